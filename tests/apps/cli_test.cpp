// Runs the built `strata` executable and checks what a user sees.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "nlohmann/json.hpp"

namespace {

const std::string kStrata = std::string(STRATA_BIN_DIR) + "/strata";
const std::string kStories = std::string(STRATA_SHARED_DIR) + "/models/stories260K";

struct Output {
  int exit_code = -1;  // -1: killed by a signal
  std::string out;
};

// Runs a command line, capturing stdout (and stderr when merge_stderr).
Output RunStrata(const std::string& args, bool merge_stderr = false) {
  std::string cmd = kStrata + " " + args + (merge_stderr ? " 2>&1" : " 2>/dev/null");
  Output o;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return o;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) o.out.append(buf, n);
  int status = pclose(p);
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return o;
}

nlohmann::json Greedy() {
  std::ifstream in(kStories + "/expected/greedy.json");
  EXPECT_TRUE(in.good());
  return nlohmann::json::parse(in);
}

TEST(Cli, RunJsonReproducesLlama2cGreedy) {
  const nlohmann::json rec = Greedy()[0];
  const int n = rec["generated_ids"].size();
  Output o = RunStrata("run --device cpu -m " + kStories + "/stories260K.gguf -p '" + rec["prompt"].get<std::string>() +
                 "' --temp 0 -n " + std::to_string(n) + " --json --threads 1");
  ASSERT_EQ(o.exit_code, 0) << o.out;
  auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["prompt_ids"], rec["prompt_ids"]);
  EXPECT_EQ(j["generated_ids"], rec["generated_ids"]);
  EXPECT_EQ(j["stop"].get<std::string>(), "length");
  EXPECT_EQ(rec["prompt"].get<std::string>() + j["text"].get<std::string>() + "\n", rec["text"].get<std::string>());
}

TEST(Cli, RunShowsLoadProgressButNotUnderJson) {
  const std::string args = "run --device cpu -m " + kStories + "/stories260K.gguf -p hi -n 2 --temp 0";
  Output plain = RunStrata(args, /*merge_stderr=*/true);
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  // A small model in a log: one final line (no 10% lines), with the bytes and the rate.
  EXPECT_NE(plain.out.find("loading weights 100% "), std::string::npos) << plain.out;
  EXPECT_EQ(plain.out.find("loading weights  10%"), std::string::npos) << plain.out;
  EXPECT_NE(plain.out.find("B/s in 0:0"), std::string::npos) << plain.out;
  Output json = RunStrata(args + " --json", /*merge_stderr=*/true);
  ASSERT_EQ(json.exit_code, 0) << json.out;
  EXPECT_EQ(json.out.find("loading weights"), std::string::npos) << json.out;
  EXPECT_NO_THROW(nlohmann::json::parse(json.out)) << json.out;
}

TEST(Cli, RunStopsOnBosWithEosReason) {
  const nlohmann::json rec = Greedy()[2];  // stops when llama2.c samples BOS
  ASSERT_EQ(rec["stop"].get<std::string>(), "bos");
  Output o = RunStrata("run --device cpu -m " + kStories + "/stories260K.bin --tokenizer " + kStories +
                 "/tok512.bin -p '" + rec["prompt"].get<std::string>() + "' --temp 0 -n 400 --json");
  ASSERT_EQ(o.exit_code, 0) << o.out;
  auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["generated_ids"], rec["generated_ids"]);
  EXPECT_EQ(j["stop"].get<std::string>(), "eos");
}

TEST(Cli, PromptIdsAndLogits) {
  Output o = RunStrata("run --device cpu -m " + kStories + "/stories260K.gguf --prompt-ids 1,403,407 -n 3 --temp 0 --json --logits");
  ASSERT_EQ(o.exit_code, 0) << o.out;
  auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["prompt_ids"], nlohmann::json({1, 403, 407}));
  EXPECT_EQ(j["generated_ids"].size(), 3u);
  ASSERT_EQ(j["logits"].size(), 512u);
  // Greedy: the first generated id is the argmax of the returned logits.
  const auto logits = j["logits"].get<std::vector<float>>();
  const int argmax = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  EXPECT_EQ(j["generated_ids"][0].get<int>(), argmax);
}

TEST(Cli, StopStringEndsGeneration) {
  Output o = RunStrata("run --device cpu -m " + kStories + "/stories260K.gguf -p 'Once upon a time' --temp 0 -n 100 --stop Lily --json");
  ASSERT_EQ(o.exit_code, 0) << o.out;
  auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["stop"].get<std::string>(), "stop_string");
  // The reference continuation is ", there was a little girl named Lily."
  EXPECT_EQ(j["text"].get<std::string>(), ", there was a little girl named ");
}

TEST(Cli, SeedMakesSamplingReproducible) {
  const std::string args = "run -m " + kStories + "/stories260K.gguf -p 'The little dog' -n 40 --temp 1 --json --seed ";
  Output a = RunStrata(args + "7"), b = RunStrata(args + "7"), c = RunStrata(args + "8");
  ASSERT_EQ(a.exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(a.out)["generated_ids"], nlohmann::json::parse(b.out)["generated_ids"]);
  EXPECT_NE(nlohmann::json::parse(a.out)["generated_ids"], nlohmann::json::parse(c.out)["generated_ids"]);
}

// strata bench decodes greedily unless sampling flags are given; with them every request
// samples (its own seed, so a run repeats) and the JSON says how. Bad values are refused.
TEST(Cli, BenchSamplesWhenAskedAndSaysHow) {
  const std::string args = "bench -m " + kStories + "/stories260K.gguf --num-requests 6 --max-num-seqs 4 "
                           "--prompt-len-min 10 --prompt-len-max 20 --output-len-min 12 --output-len-max 12 --json";
  Output greedy = RunStrata(args);
  ASSERT_EQ(greedy.exit_code, 0) << greedy.out;
  EXPECT_EQ(nlohmann::json::parse(greedy.out)["sampling"], "greedy");
  Output sampled = RunStrata(args + " --temp 0.8 --top-k 40 --top-p 0.9 --min-p 0.01");
  ASSERT_EQ(sampled.exit_code, 0) << sampled.out;
  const nlohmann::json j = nlohmann::json::parse(sampled.out);
  EXPECT_EQ(j["output_tokens"], 72);
  EXPECT_NEAR(j["sampling"]["temperature"].get<double>(), 0.8, 1e-6);
  EXPECT_EQ(j["sampling"]["top_k"], 40);
  EXPECT_NEAR(j["sampling"]["top_p"].get<double>(), 0.9, 1e-6);
  EXPECT_NEAR(j["sampling"]["min_p"].get<double>(), 0.01, 1e-6);
  EXPECT_FALSE(j["sampling"].contains("frequency_penalty"));
  // Penalties are sampled on the device too (the CPU backend applies them): no step goes to
  // the host's sampler.
  Output penalized = RunStrata(args + " --temp 0.8 --frequency-penalty 0.5 --repeat-penalty 1.2");
  ASSERT_EQ(penalized.exit_code, 0) << penalized.out;
  const nlohmann::json pj = nlohmann::json::parse(penalized.out);
  EXPECT_NEAR(pj["sampling"]["frequency_penalty"].get<double>(), 0.5, 1e-6);
  EXPECT_NEAR(pj["sampling"]["repetition_penalty"].get<double>(), 1.2, 1e-6);
  EXPECT_EQ(pj["host_sampled_steps"], 0);
  // Logprobs: the device still draws every token (only the rows come back), unless the host
  // is asked to sample.
  Output with_logprobs = RunStrata(args + " --temp 0.8 --logprobs 3");
  ASSERT_EQ(with_logprobs.exit_code, 0) << with_logprobs.out;
  const nlohmann::json lj = nlohmann::json::parse(with_logprobs.out);
  EXPECT_EQ(lj["sampling"]["logprobs"], 3);
  EXPECT_EQ(lj["host_sampled_steps"], 0);
  EXPECT_EQ(lj["sample_on_host"], false);
  Output on_host = RunStrata(args + " --temp 0.8 --logprobs 3 --sample-on-host");
  ASSERT_EQ(on_host.exit_code, 0) << on_host.out;
  const nlohmann::json hj = nlohmann::json::parse(on_host.out);
  EXPECT_GT(hj["host_sampled_steps"].get<int64_t>(), 10);
  EXPECT_EQ(hj["sample_on_host"], true);
  EXPECT_EQ(hj["output_tokens"], lj["output_tokens"]);
  Output bad_logprobs = RunStrata(args + " --logprobs 21", /*merge_stderr=*/true);
  EXPECT_NE(bad_logprobs.exit_code, 0);
  EXPECT_NE(bad_logprobs.out.find("logprobs must be in"), std::string::npos) << bad_logprobs.out;
  Output single = RunStrata("bench -m " + kStories + "/stories260K.gguf --prompt-tokens 8 --gen-tokens 8 -r 1 "
                            "--temp 1 --top-p 0.5 --json");
  ASSERT_EQ(single.exit_code, 0) << single.out;
  EXPECT_NEAR(nlohmann::json::parse(single.out)["sampling"]["top_p"].get<double>(), 0.5, 1e-6);
  Output bad = RunStrata(args + " --top-p 1.5", /*merge_stderr=*/true);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.out.find("top_p must be in (0, 1]"), std::string::npos) << bad.out;
}

// The tokens and sequences per step default to "auto" (core/engine/step_budget.h): 512 and
// 16 on a CPU, as before; a count given is taken as is; anything else is refused with the
// flag's name.
TEST(Cli, BenchStepTokensDefaultByDevice) {
  const std::string args = "bench -m " + kStories + "/stories260K.gguf --num-requests 3 --max-num-seqs 2 "
                           "--prompt-len-min 10 --prompt-len-max 20 --output-len-min 4 --output-len-max 4 --json";
  Output by_default = RunStrata(args);
  ASSERT_EQ(by_default.exit_code, 0) << by_default.out;
  EXPECT_EQ(nlohmann::json::parse(by_default.out)["max_batched_tokens"], 512);
  Output seqs_by_default = RunStrata("bench -m " + kStories + "/stories260K.gguf --num-requests 3 --prompt-len-min 10 "
                                     "--prompt-len-max 20 --output-len-min 4 --output-len-max 4 --json");
  ASSERT_EQ(seqs_by_default.exit_code, 0) << seqs_by_default.out;
  EXPECT_EQ(nlohmann::json::parse(seqs_by_default.out)["max_num_seqs"], 16);
  Output given = RunStrata(args + " --max-batched-tokens 64");
  ASSERT_EQ(given.exit_code, 0) << given.out;
  EXPECT_EQ(nlohmann::json::parse(given.out)["max_batched_tokens"], 64);
  Output bad = RunStrata(args + " --max-batched-tokens lots", /*merge_stderr=*/true);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.out.find("max-batched-tokens"), std::string::npos) << bad.out;
  Output bad_chunk = RunStrata("run -m " + kStories + "/stories260K.gguf --prompt-ids 1,2 -n 2 --batch-tokens 0",
                               /*merge_stderr=*/true);
  EXPECT_NE(bad_chunk.exit_code, 0);
  EXPECT_NE(bad_chunk.out.find("--batch-tokens"), std::string::npos) << bad_chunk.out;
}

TEST(Cli, TokenizeMatchesReferenceEncodings) {
  std::ifstream in(std::string(STRATA_SHARED_DIR) + "/tokenizers/reference_encodings.json");
  ASSERT_TRUE(in.good());
  const auto ref = nlohmann::json::parse(in);
  const auto& c = ref["llama3"][0];
  const std::string tok = std::string(STRATA_SHARED_DIR) + "/tokenizers/llama3/tokenizer.json";
  // Pass the text through a file-free route: single quotes need escaping for the shell.
  std::string text = c["text"].get<std::string>();
  std::string quoted = "'";
  for (char ch : text) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  quoted += "'";
  Output o = RunStrata("tokenize -m " + tok + " --text " + quoted + " --special --json");
  ASSERT_EQ(o.exit_code, 0) << o.out;
  EXPECT_EQ(nlohmann::json::parse(o.out)["ids"], c["ids_special"]);
}

// A Hugging Face tokenizer.json can stand in for a model's own tokenizer (random-weight
// --synthetic models have none): the prompt is encoded exactly as the reference says.
// A tokenizer larger than the model's vocabulary is refused with both sizes.
TEST(Cli, SyntheticModelTakesATokenizerJson) {
  std::ifstream in(std::string(STRATA_SHARED_DIR) + "/tokenizers/reference_encodings.json");
  ASSERT_TRUE(in.good());
  const auto ref = nlohmann::json::parse(in)["llama2"][0];
  const std::string tok = std::string(STRATA_SHARED_DIR) + "/tokenizers/llama2/tokenizer.json";
  Output o = RunStrata("run --device cpu --threads 1 --synthetic llama-110m --ctx-size 64 --tokenizer " + tok +
                       " -p '" + ref["text"].get<std::string>() + "' -n 2 --temp 0 --json");
  ASSERT_EQ(o.exit_code, 0) << o.out;
  const auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["prompt_ids"], ref["ids_special"]);
  EXPECT_EQ(j["generated_ids"].size(), 2u);

  const std::string big = std::string(STRATA_SHARED_DIR) + "/tokenizers/llama3/tokenizer.json";
  Output e = RunStrata("run --device cpu --threads 1 --synthetic llama-110m --ctx-size 64 --tokenizer " + big +
                       " -p hi -n 1", /*merge_stderr=*/true);
  EXPECT_NE(e.exit_code, 0);
  EXPECT_NE(e.out.find("128256 tokens, more than the model's vocabulary of 32000"), std::string::npos) << e.out;
  // Serving random weights needs a text tokenizer: a clear error before anything loads.
  Output s = RunStrata("serve --device cpu --synthetic llama-110m --port 0", /*merge_stderr=*/true);
  EXPECT_NE(s.exit_code, 0);
  EXPECT_NE(s.out.find("needs --tokenizer"), std::string::npos) << s.out;
}

// `serve` warms the model up before it listens (a CPU: a 64-token prefill and one decode
// step), and a --synthetic model is served as "synthetic:SHAPE", not under an empty name.
TEST(Cli, ServeWarmsUpBeforeListeningAndNamesASyntheticModel) {
  const std::string tok = std::string(STRATA_SHARED_DIR) + "/tokenizers/llama2/tokenizer.json";
  const std::string script =
      "LOG=$(mktemp); " + kStrata +
      " serve --device cpu --threads 1 --synthetic llama-110m --ctx-size 64 --max-num-seqs 1 --tokenizer " + tok +
      " --port 0 > $LOG 2>&1 & pid=$!; for i in $(seq 1 300); do grep -q listening $LOG && break; sleep 0.1; done; "
      "kill -TERM $pid; wait $pid; echo exit=$?; cat $LOG; rm -f $LOG";
  FILE* p = popen(("sh -c '" + script + "'").c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  pclose(p);
  EXPECT_NE(out.find("exit=0"), std::string::npos) << out;
  const size_t warm = out.find("warmed up in"), listening = out.find("listening on http://");
  ASSERT_NE(warm, std::string::npos) << out;
  ASSERT_NE(listening, std::string::npos) << out;
  EXPECT_LT(warm, listening) << out;
  EXPECT_NE(out.find("prefill of 64 tokens, 1 decode steps"), std::string::npos) << out;
  // Progress in a log (not a terminal): the 536 MB of weights get a line at every 10%, the
  // warm-up (small work) only its final line, and both come before the port opens.
  const size_t half = out.find("loading weights  "), loaded = out.find("loading weights 100%");  // "  x%": < 100%
  ASSERT_NE(half, std::string::npos) << out;
  ASSERT_NE(loaded, std::string::npos) << out;
  EXPECT_LT(half, loaded);
  // The final line's rate: "MB/s" or, where the weights are made faster than 1 GB/s (a fast
  // host), "GB/s" (FormatBytes picks the unit), so only "B/s in " is fixed.
  EXPECT_NE(out.find("B/s in "), std::string::npos) << out;
  EXPECT_NE(out.find(" ETA "), std::string::npos) << out;
  const size_t warming = out.find("warming up 100% 2/2");
  ASSERT_NE(warming, std::string::npos) << out;
  EXPECT_EQ(out.find("warming up  "), std::string::npos) << out;
  EXPECT_LT(loaded, warming);
  EXPECT_LT(warming, listening);
  EXPECT_NE(out.find("model 'synthetic:llama-110m'"), std::string::npos) << out;
}

TEST(Cli, DevicesListsCpuAndRefusesWrongAbi) {
  const std::string bad = std::string(STRATA_TEST_PLUGIN_DIR) + "/libstrata-backend-wrongabi.so";
  Output o = RunStrata("devices --json --plugin " + bad);
  ASSERT_EQ(o.exit_code, 0) << o.out;
  auto j = nlohmann::json::parse(o.out);
  bool cpu = false;
  for (const auto& p : j["plugins"])
    if (p["name"] == "cpu") cpu = !p["devices"].empty();
  EXPECT_TRUE(cpu) << o.out;
  ASSERT_EQ(j["refused"].size(), 1u) << o.out;
  const std::string reason = j["refused"][0]["reason"];
  EXPECT_NE(reason.find(bad), std::string::npos) << reason;
  EXPECT_NE(reason.find("2.0"), std::string::npos) << reason;
  EXPECT_NE(reason.find("1."), std::string::npos) << reason;
}

TEST(Cli, CorruptModelGivesClearErrorNotCrash) {
  const std::string path = std::string(STRATA_TEST_TMP) + "/cli-corrupt.gguf";
  {
    std::ifstream src(kStories + "/stories260K.gguf", std::ios::binary);
    std::string data((std::istreambuf_iterator<char>(src)), std::istreambuf_iterator<char>());
    std::ofstream(path, std::ios::binary) << data.substr(0, data.size() / 3);
  }
  Output o = RunStrata("run --device cpu -m " + path + " -p hi --json", /*merge_stderr=*/true);
  EXPECT_EQ(o.exit_code, 1) << o.out;
  EXPECT_NE(o.out.find(path), std::string::npos) << o.out;
}

TEST(Cli, UnknownDeviceIsAnError) {
  Output o = RunStrata("run --device cpu -m " + kStories + "/stories260K.gguf -p hi --device nosuch", true);
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_NE(o.out.find("nosuch"), std::string::npos) << o.out;
}

}  // namespace

namespace {

const std::string kText = std::string(STRATA_SHARED_DIR) + "/text/tinystories_sample.txt";

TEST(Cli, PerplexityJsonMatchesLlama2cReference) {
  Output o = RunStrata("perplexity --device cpu -t 1 -m " + kStories + "/stories260K.bin --tokenizer " + kStories +
                       "/tok512.bin -f " + kText + " --ctx 128 --json");
  ASSERT_EQ(o.exit_code, 0) << o.out;
  auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["chunks"], 14);
  EXPECT_EQ(j["scored"], 882);
  EXPECT_NEAR(j["ppl"].get<double>() / 6.8452865687, 1.0, 1e-4);  // ../shared/text/ppl_reference.json
  EXPECT_FALSE(j.contains("quant_counters"));                      // a dense model has none
}

TEST(Cli, PerplexityRefusesBadInput) {
  Output o = RunStrata("perplexity --device cpu -m " + kStories + "/stories260K.gguf -f " + kText + " --ctx 1024", true);
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_NE(o.out.find("tokens"), std::string::npos) << o.out;  // too short for two windows
  o = RunStrata("perplexity --device cpu -m " + kStories + "/stories260K.gguf -f /nonexistent.txt", true);
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_NE(o.out.find("cannot read"), std::string::npos) << o.out;
  o = RunStrata("perplexity --device cpu -m " + kStories + "/stories260K.gguf -f " + kText + " --ctx 128 --stride 128", true);
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_NE(o.out.find("--stride"), std::string::npos) << o.out;
}

TEST(Cli, QuantizeThenPerplexityWithCounters) {
  const std::string dir = std::string(STRATA_TEST_TMP) + "/cli_w8a8";
  Output q = RunStrata("quantize --device cpu -t 1 -m " + kStories + "/stories260K.bin --tokenizer " + kStories +
                       "/tok512.bin -o " + dir + " --method w8a8 --calib " + kText + " --calib-tokens 512 --json");
  ASSERT_EQ(q.exit_code, 0) << q.out;
  auto qj = nlohmann::json::parse(q.out);
  EXPECT_EQ(qj["layout"], "compressed-tensors");
  EXPECT_EQ(qj["quantized_tensors"], 35);
  Output p = RunStrata("perplexity --device cpu -t 1 -m " + dir + " --tokenizer " + kStories + "/tok512.bin -f " +
                       kText + " --ctx 128 --json --kl-divergence " + kStories + "/stories260K.gguf");
  ASSERT_EQ(p.exit_code, 0) << p.out;
  auto j = nlohmann::json::parse(p.out);
  EXPECT_GT(j["ppl"].get<double>(), 6.0);
  EXPECT_LT(j["ppl"].get<double>(), 6.8452865687 * 1.05);
  EXPECT_GT(j["kl_divergence"]["top1_agreement"].get<double>(), 0.8);
  ASSERT_TRUE(j.contains("quant_counters"));
  EXPECT_EQ(j["quant_counters"]["saturated"].size(), 5u);  // one entry per layer
}

TEST(Cli, QuantizeRefusesBadOptions) {
  const std::string m = "quantize --device cpu -m " + kStories + "/stories260K.bin --tokenizer " + kStories + "/tok512.bin ";
  const std::string out = std::string(STRATA_TEST_TMP) + "/cli_refused";
  const std::pair<std::string, std::string> cases[] = {
      {"-o " + out + " --method bogus", "--method"},
      {"-o " + out + " --method w8a8", "--calib"},
      {"-o " + out + ".gguf --method w8a8 --calib " + kText, "GGUF"},
      {"-o " + out + " --method gptq --bits 3 --calib " + kText, "--bits"},
      {"-o " + out + " --method rtn --group-size 48", "--group-size"},
      {"-o " + out + " --method int8 --act-order", "--act-order"},
      {"-o " + out + " --method int8 --alpha 0.3", "--alpha"},
      {"-o " + out + " --method llm-int8 --calib " + kText, "outlier"},  // no HF layout keeps f16 outliers
      {"-o " + out + " --method w8a8 --calib /nonexistent", "cannot read"},
  };
  for (const auto& [args, want] : cases) {
    Output o = RunStrata(m + args, true);
    EXPECT_EQ(o.exit_code, 1) << args << "\n" << o.out;
    EXPECT_NE(o.out.find(want), std::string::npos) << args << "\n" << o.out;
  }
}

}  // namespace
