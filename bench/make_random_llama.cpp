// make_random_llama: writes a GGUF `llama` model with random weights (normal, std 0.02; norm
// weights 1.0, always F32) and a SentencePiece vocab, so benchmarks and `strata run` have a model of any
// size without downloading one. The weights are noise: the point is realistic shapes and bytes.
//
//   make_random_llama --out m.gguf --dim 768 --layers 12 --heads 12 --kv-heads 12
//       --hidden 2048 --vocab 32000 --dtype f32 --seed 1 [--context 1024]
//       [--outlier-channels N --outlier-scale S]
//
// --outlier-channels N: N channels of every RMSNorm weight that feeds a projection are S
// (default 50) instead of 1, and the columns of Q/K/V and gate/up that read those channels are
// divided by S: the model computes exactly the same function, but the activations entering
// its projections have N outlier channels S times larger than the rest — what trained LLMs
// show and what SmoothQuant and LLM.int8() are for.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "core/common/half.h"
#include "core/model/formats/gguf_quant_blocks.h"
#include "core/model/formats/gguf_writer.h"
#include "core/quant/rtn_quantize.h"

namespace {

struct Options {
  std::string out;
  int64_t dim = 768;
  int64_t layers = 12;
  int64_t heads = 12;
  int64_t kv_heads = 12;
  int64_t hidden = 2048;
  int64_t vocab = 32000;
  int64_t context = 1024;
  std::string dtype = "f32";
  uint64_t seed = 1;
  int64_t outlier_channels = 0;
  double outlier_scale = 50.0;
};

void PrintHelp(const Options& d) {
  std::printf(
      "usage: make_random_llama --out FILE.gguf [options]\n"
      "  --out FILE        output GGUF path (required)\n"
      "  --dim N           hidden size (default %lld)\n"
      "  --layers N        decoder layers (default %lld)\n"
      "  --heads N         attention heads (default %lld)\n"
      "  --kv-heads N      key/value heads (default %lld)\n"
      "  --hidden N        feed-forward size (default %lld)\n"
      "  --vocab N         vocab size, at least 259 (default %lld)\n"
      "  --context N       context length (default %lld)\n"
      "  --dtype T         f32 | f16 | bf16 | q8_0 | q4_0 of the matrices (norms stay f32; default %s)\n"
      "  --seed N          random seed (default %llu)\n"
      "  --outlier-channels N  N norm channels scaled by --outlier-scale, compensated in the\n"
      "                    projections reading them (same function, outlier activations)\n"
      "  --outlier-scale S  (default 50)\n",
      (long long)d.dim, (long long)d.layers, (long long)d.heads, (long long)d.kv_heads,
      (long long)d.hidden, (long long)d.vocab, (long long)d.context, d.dtype.c_str(),
      (unsigned long long)d.seed);
}

bool ParseInt(const char* s, int64_t* out) {
  char* end = nullptr;
  const long long v = std::strtoll(s, &end, 10);
  if (end == s || *end != '\0' || v <= 0) return false;
  *out = v;
  return true;
}

// splitmix64: tiny, fast and good enough for noise weights.
struct Rng {
  uint64_t s;
  uint64_t Next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double Uniform() { return ((Next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }  // (0, 1)
};

// Box-Muller: two normals per pair of uniforms.
void FillNormal(Rng& rng, float std, std::vector<float>& v) {
  constexpr double kTwoPi = 6.283185307179586;
  for (size_t i = 0; i < v.size(); i += 2) {
    const double r = std::sqrt(-2.0 * std::log(rng.Uniform())) * std;
    const double t = kTwoPi * rng.Uniform();
    v[i] = static_cast<float>(r * std::cos(t));
    if (i + 1 < v.size()) v[i + 1] = static_cast<float>(r * std::sin(t));
  }
}

std::vector<uint8_t> Encode(const std::vector<float>& v, strata::TensorDType dtype) {
  if (dtype == strata::TensorDType::kF32) {
    std::vector<uint8_t> out(v.size() * 4);
    std::memcpy(out.data(), v.data(), out.size());
    return out;
  }
  std::vector<uint8_t> out(v.size() * 2);
  uint16_t* p = reinterpret_cast<uint16_t*>(out.data());
  for (size_t i = 0; i < v.size(); ++i) {
    p[i] = dtype == strata::TensorDType::kF16 ? strata::F32ToF16(v[i]) : strata::F32ToBf16(v[i]);
  }
  return out;
}

// <unk> <s> </s>, the 256 byte-fallback pieces, then filler pieces: "▁", single characters
// with and without "▁", then letter pairs and triples, so ordinary text tokenizes into
// plausible pieces. Scores decrease with rank, as in a trained SentencePiece BPE vocab.
void MakeVocab(int64_t n, std::vector<std::string>* pieces, std::vector<float>* scores,
               std::vector<int32_t>* types) {
  const std::string kSpace = "\xE2\x96\x81";
  std::set<std::string> seen;
  auto add = [&](const std::string& p, float score, int32_t type) {
    if (static_cast<int64_t>(pieces->size()) >= n || !seen.insert(p).second) return;
    pieces->push_back(p);
    scores->push_back(score);
    types->push_back(type);
  };
  add("<unk>", 0.0f, 2);
  add("<s>", 0.0f, 3);
  add("</s>", 0.0f, 3);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    add(buf, 0.0f, 6);
  }
  float score = 0.0f;
  auto filler = [&](const std::string& p) { add(p, score -= 1.0f, 1); };
  filler(kSpace);
  for (char c = 33; c < 127; ++c) {
    filler(kSpace + std::string(1, c));
    filler(std::string(1, c));
  }
  const std::string letters = "etaoinshrdlcumwfgypbvkjxqz";
  for (char a : letters) {
    for (char b : letters) {
      filler(std::string{a, b});
      filler(kSpace + std::string{a, b});
    }
  }
  for (char a : letters) {
    for (char b : letters) {
      for (char c : letters) {
        if (static_cast<int64_t>(pieces->size()) >= n) return;
        filler(std::string{a, b, c});
        filler(kSpace + std::string{a, b, c});
      }
    }
  }
  // Still short (vocab > ~36k): numbered pieces fill the rest.
  for (int64_t i = 0; static_cast<int64_t>(pieces->size()) < n; ++i) filler("x" + std::to_string(i));
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  const Options defaults;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      PrintHelp(defaults);
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "make_random_llama: %s needs a value (see --help)\n", a.c_str());
      return 2;
    }
    const char* v = argv[++i];
    bool ok = true;
    if (a == "--out") o.out = v;
    else if (a == "--dtype") o.dtype = v;
    else if (a == "--dim") ok = ParseInt(v, &o.dim);
    else if (a == "--layers") ok = ParseInt(v, &o.layers);
    else if (a == "--heads") ok = ParseInt(v, &o.heads);
    else if (a == "--kv-heads") ok = ParseInt(v, &o.kv_heads);
    else if (a == "--hidden") ok = ParseInt(v, &o.hidden);
    else if (a == "--vocab") ok = ParseInt(v, &o.vocab);
    else if (a == "--context") ok = ParseInt(v, &o.context);
    else if (a == "--outlier-channels") ok = ParseInt(v, &o.outlier_channels);
    else if (a == "--outlier-scale") {
      char* end = nullptr;
      o.outlier_scale = std::strtod(v, &end);
      ok = end != v && *end == '\0' && o.outlier_scale > 0;
    }
    else if (a == "--seed") {
      int64_t s;
      ok = ParseInt(v, &s);
      o.seed = static_cast<uint64_t>(s);
    } else {
      std::fprintf(stderr, "make_random_llama: unknown flag %s (see --help)\n", a.c_str());
      return 2;
    }
    if (!ok) {
      std::fprintf(stderr, "make_random_llama: %s wants a positive integer, got '%s'\n", a.c_str(), v);
      return 2;
    }
  }
  strata::TensorDType dtype = strata::TensorDType::kF32;
  uint32_t ggml_quant = 0;  // matrices as GGUF Q8_0 / Q4_0 (round to nearest, core/quant)
  if (o.dtype == "f32") dtype = strata::TensorDType::kF32;
  else if (o.dtype == "f16") dtype = strata::TensorDType::kF16;
  else if (o.dtype == "bf16") dtype = strata::TensorDType::kBF16;
  else if (o.dtype == "q8_0") ggml_quant = strata::kGgmlTypeQ8_0;
  else if (o.dtype == "q4_0") ggml_quant = strata::kGgmlTypeQ4_0;
  else {
    std::fprintf(stderr, "make_random_llama: --dtype must be f32, f16, bf16, q8_0 or q4_0\n");
    return 2;
  }
  if (o.out.empty()) {
    std::fprintf(stderr, "make_random_llama: --out is required (see --help)\n");
    return 2;
  }
  if (o.dim % o.heads != 0 || o.heads % o.kv_heads != 0 || (o.dim / o.heads) % 2 != 0 || o.vocab < 259) {
    std::fprintf(stderr,
                 "make_random_llama: need dim %% heads == 0, heads %% kv-heads == 0, an even head "
                 "size and vocab >= 259\n");
    return 2;
  }
  const int64_t head_dim = o.dim / o.heads, kv_dim = head_dim * o.kv_heads;
  if (o.outlier_channels > o.dim) {
    std::fprintf(stderr, "make_random_llama: --outlier-channels must be at most --dim\n");
    return 2;
  }
  // The outlier channels, spread over the width (a stride coprime to nothing in particular).
  std::vector<bool> outlier(static_cast<size_t>(o.dim), false);
  for (int64_t i = 0, placed = 0; placed < o.outlier_channels; ++i) {
    const size_t c = static_cast<size_t>((i * 7919 + 13) % o.dim);
    if (!outlier[c]) {
      outlier[c] = true;
      ++placed;
    }
  }
  const float S = static_cast<float>(o.outlier_scale);

  strata::GgufWriter w;
  w.AddString("general.architecture", "llama");
  w.AddString("general.name", "random-llama");
  w.AddUint32("general.alignment", 32);
  w.AddUint32("llama.context_length", static_cast<uint32_t>(o.context));
  w.AddUint32("llama.embedding_length", static_cast<uint32_t>(o.dim));
  w.AddUint32("llama.block_count", static_cast<uint32_t>(o.layers));
  w.AddUint32("llama.feed_forward_length", static_cast<uint32_t>(o.hidden));
  w.AddUint32("llama.attention.head_count", static_cast<uint32_t>(o.heads));
  w.AddUint32("llama.attention.head_count_kv", static_cast<uint32_t>(o.kv_heads));
  w.AddUint32("llama.rope.dimension_count", static_cast<uint32_t>(head_dim));
  w.AddFloat32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.AddFloat32("llama.rope.freq_base", 10000.0f);
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::vector<int32_t> types;
  MakeVocab(o.vocab, &pieces, &scores, &types);
  w.AddString("tokenizer.ggml.model", "llama");
  w.AddStringArray("tokenizer.ggml.tokens", pieces);
  w.AddFloat32Array("tokenizer.ggml.scores", scores);
  w.AddInt32Array("tokenizer.ggml.token_type", types);
  w.AddUint32("tokenizer.ggml.unknown_token_id", 0);
  w.AddUint32("tokenizer.ggml.bos_token_id", 1);
  w.AddUint32("tokenizer.ggml.eos_token_id", 2);
  w.AddBool("tokenizer.ggml.add_bos_token", true);
  w.AddBool("tokenizer.ggml.add_space_prefix", true);

  Rng rng{o.seed * 0x2545F4914F6CDD1Dull + 1};
  int64_t params = 0;
  // kind: 0 = plain matrix, 1 = norm feeding projections (outlier channels x S), 2 = a
  // projection reading such a norm (outlier columns / S), 3 = the final norm.
  // Each tensor is generated only when the writer reaches it (GgufWriter::AddTensorLater),
  // in the order added, so the random stream is the same as generating them all up front,
  // and only one tensor is in memory at a time: the Llama-3-8B shape (16 GB in f16) is
  // written on a 24 GiB machine.
  auto add = [&](const std::string& name, std::vector<int64_t> shape, int kind) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    params += n;
    auto values = [&rng, &outlier, S, shape, n, kind] {
      std::vector<float> v(static_cast<size_t>(n), 1.0f);
      if (kind == 0 || kind == 2) FillNormal(rng, 0.02f, v);
      if (kind == 1 || kind == 2) {
        const size_t cols = static_cast<size_t>(shape.back());
        for (size_t i = 0; i < v.size(); ++i)
          if (outlier[i % cols]) v[i] = kind == 1 ? v[i] * S : v[i] / S;
      }
      return v;
    };
    absl::Status st;
    if (ggml_quant != 0 && shape.size() == 2 && shape[1] % 32 == 0) {
      const uint64_t bytes = static_cast<uint64_t>(shape[0] * (shape[1] / strata::GgmlBlockElements(ggml_quant)) *
                                                   strata::GgmlBlockBytes(ggml_quant));
      st = w.AddTensorLater(name, ggml_quant, shape, bytes, [values, shape, ggml_quant]() -> absl::StatusOr<std::vector<uint8_t>> {
        const std::vector<float> v = values();
        const strata::QuantizedTensor q =
            ggml_quant == strata::kGgmlTypeQ8_0
                ? strata::QuantizeInt8(v.data(), shape[0], shape[1], 32, STRATA_DTYPE_F16)
                : strata::QuantizeInt4Group(v.data(), shape[0], shape[1], 32, /*symmetric=*/true);
        return strata::QuantizedToGgmlBlocks(q, ggml_quant);
      });
    } else {
      // Norm weights (1-D) stay F32 whatever --dtype says, as llama.cpp's converters write
      // them: llama.cpp refuses an F16 norm, and the peers must run the same file.
      const strata::TensorDType t = shape.size() == 1 ? strata::TensorDType::kF32 : dtype;
      st = w.AddTensorLater(name, t, shape, [values, t]() -> absl::StatusOr<std::vector<uint8_t>> {
        return Encode(values(), t);
      });
    }
    if (!st.ok()) {
      std::fprintf(stderr, "make_random_llama: %s: %s\n", name.c_str(), std::string(st.message()).c_str());
      std::exit(1);
    }
  };
  add("token_embd.weight", {o.vocab, o.dim}, 0);
  for (int64_t l = 0; l < o.layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    add(b + "attn_norm.weight", {o.dim}, 1);
    add(b + "attn_q.weight", {o.dim, o.dim}, 2);
    add(b + "attn_k.weight", {kv_dim, o.dim}, 2);
    add(b + "attn_v.weight", {kv_dim, o.dim}, 2);
    add(b + "attn_output.weight", {o.dim, o.dim}, 0);
    add(b + "ffn_norm.weight", {o.dim}, 1);
    add(b + "ffn_gate.weight", {o.hidden, o.dim}, 2);
    add(b + "ffn_up.weight", {o.hidden, o.dim}, 2);
    add(b + "ffn_down.weight", {o.dim, o.hidden}, 0);
  }
  add("output_norm.weight", {o.dim}, 3);
  add("output.weight", {o.vocab, o.dim}, 0);
  auto st = w.Write(o.out);
  if (!st.ok()) {
    std::fprintf(stderr, "make_random_llama: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  std::printf("{\"out\": \"%s\", \"params\": %lld, \"dtype\": \"%s\"}\n", o.out.c_str(),
              (long long)params, o.dtype.c_str());
  return 0;
}
