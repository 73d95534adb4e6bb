#include "apps/strata/runtime.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/common/progress.h"
#include "core/common/status_macros.h"
#include "core/model/model_tokenizer.h"
#include "core/engine/kv_sizing.h"
#include "core/model/synthetic_model.h"
#include "plugins/device_selector.h"

namespace strata::cli {

void AddDeviceFlags(FlagSet& f) {
  f.Value("device", "", "auto", "backend: auto (highest score), cpu, cuda, opencl, or a plugin's name; NAME:N picks its N-th device (opencl:1)");
  f.Repeated("plugin", "load this backend plugin file too (may repeat)");
  f.Value("threads", "-t", "0", "CPU threads; 0 = all cores");
}

void AddModelFlags(FlagSet& f) {
  f.Value("model", "-m", "", "a .gguf file, a llama2.c .bin (with --tokenizer) or a Hugging Face directory");
  f.Value("tokenizer", "", "",
          "llama2.c tokenizer.bin for a llama2.c checkpoint, or a Hugging Face tokenizer.json that replaces "
          "the model's own (e.g. with --synthetic; tokenizer_config.json beside it is read for special tokens)");
  f.Value("synthetic", "", "", "instead of --model: random weights in a known shape (llama3-8b, llama3-1b, qwen2-7b, qwen3-8b, llama-110m)");
  f.Value("synthetic-dtype", "", "bf16",
          "weight type of --synthetic: f32, f16, bf16, or quantized linear weights (the rest bf16) made by "
          "`strata quantize`'s round-to-nearest: int8 (W8A16 per row), int4-g128 (W4A16, --method rtn), w8a8 "
          "(dynamic per-token activations), fp8 (W8A8 FP8)");
  f.Value("ctx-size", "-c", "0", "context length in tokens; 0 = the model's");
  f.Value("batch-tokens", "", "auto",
          "tokens per forward step (prefill chunk); auto = by device, as vLLM: 8192 on GPUs of >= 70 GiB, "
          "2048 on other GPUs, 512 on CPUs");
  f.Value("block-size", "", "16", "tokens per KV-cache block");
  f.Value("kv-dtype", "", "auto", "KV cache type: auto (the activation type), f32, f16, bf16, fp8 (E4M3, scale 1), int8 (scales per block and kv "
          "head); the 8-bit caches halve the cache's bytes (twice the sequences or context) on the CPU and CUDA "
          "backends (CUDA: the same fused rope/KV-write and fast attention kernels as bf16, with bf16 activations)");
  f.Switch("enforce-eager", "issue every op of every step; no recorded decode graphs (CUDA graphs)");
  f.Switch("no-async-scheduling",
           "finish each step before scheduling the next (default: on a GPU, launch the next step while this one runs)");
}

AsyncScheduling AsyncSchedulingFrom(const FlagSet& flags) {
  return flags.On("no-async-scheduling") ? AsyncScheduling::kOff : AsyncScheduling::kAuto;
}

absl::StatusOr<strata_dtype> ParseDType(const std::string& s) {
  if (s == "f32" || s == "float32") return STRATA_DTYPE_F32;
  if (s == "f16" || s == "float16") return STRATA_DTYPE_F16;
  if (s == "bf16" || s == "bfloat16") return STRATA_DTYPE_BF16;
  return absl::InvalidArgumentError(absl::StrCat("unknown type '", s, "' (f32, f16, bf16)"));
}

// --kv-dtype also takes the 8-bit caches of ABI 1.9.
absl::StatusOr<strata_dtype> ParseKvDType(const std::string& s) {
  if (s == "fp8" || s == "fp8_e4m3" || s == "e4m3") return STRATA_DTYPE_FP8_E4M3;
  if (s == "int8" || s == "i8") return STRATA_DTYPE_I8;
  auto dt = ParseDType(s);
  if (!dt.ok()) return absl::InvalidArgumentError(absl::StrCat("unknown KV cache type '", s, "' (f32, f16, bf16, fp8, int8)"));
  return dt;
}

absl::StatusOr<DeviceRuntime> OpenDevice(const FlagSet& flags, int32_t index) {
  DeviceRuntime rt;
  rt.registry = std::make_unique<PluginRegistry>();
  PluginSearchOptions opts;
  opts.plugin_files = flags.All("plugin");
  STRATA_ASSIGN_OR_RETURN(DeviceSpec spec, ParseDeviceSpec(flags.Get("device")));
  // A named backend: leave the others' libraries (and their runtimes' memory) unloaded.
  if (spec.backend != "auto") opts.only_backend = spec.backend;
  rt.registry->DiscoverAndLoad(opts);
  for (const RejectedPlugin& r : rt.registry->rejected()) std::cerr << "strata: plugin refused: " << r.reason << "\n";
  STRATA_ASSIGN_OR_RETURN(rt.plugin, SelectBackend(*rt.registry, flags.Get("device")));
  STRATA_ASSIGN_OR_RETURN(int64_t threads, flags.Int("threads"));
  if (threads < 0) return absl::InvalidArgumentError("--threads must be >= 0");
  strata_device_options o{};
  o.struct_size = sizeof(o);
  o.num_threads = static_cast<int32_t>(threads);
  // --device NAME:N picks the device; a parallel rank (index > 0) takes the next ones.
  int32_t device_index = spec.index;
  if (index > 0) {
    int32_t count = 1;
    if (rt.plugin->backend->device_count(&count) == STRATA_OK && count > 0) device_index = (spec.index + index) % count;
  }
  STRATA_ASSIGN_OR_RETURN(rt.device, Device::Open(rt.plugin->backend, rt.plugin->name, device_index, o));
  return rt;
}

absl::StatusOr<int64_t> IntOrAutoFlag(const FlagSet& flags, const char* name, int64_t auto_value) {
  if (flags.Get(name) == "auto") return auto_value;
  return flags.Int(name);
}

absl::StatusOr<ModelRuntime> LoadModel(
    const FlagSet& flags, Device& device, bool need_tokenizer,
    const std::function<absl::Status(const ModelFile&, ModelRuntimeOptions&)>& adjust) {
  ModelRuntime rt;
  const std::string tokenizer_flag = flags.Get("tokenizer");
  const bool tokenizer_json = absl::EndsWith(tokenizer_flag, ".json");
  if (!flags.Get("synthetic").empty()) {
    TensorDType td = TensorDType::kBF16;
    SyntheticQuant quant = SyntheticQuant::kNone;
    STRATA_RETURN_IF_ERROR(ParseSyntheticDtype(flags.Get("synthetic-dtype"), &td, &quant));
    STRATA_ASSIGN_OR_RETURN(rt.file, MakeSyntheticModel(flags.Get("synthetic"), td, quant));
  } else {
    if (flags.Get("model").empty()) return absl::InvalidArgumentError("--model (-m) or --synthetic is required");
    STRATA_ASSIGN_OR_RETURN(rt.file, LoadModelFile(flags.Get("model"), tokenizer_json ? "" : tokenizer_flag));
  }
  if (!tokenizer_flag.empty() && !tokenizer_json && rt.file->format != "llama2c" &&
      rt.file->tokenizer.kind == TokenizerSource::Kind::kNone) {
    // A llama2.c tokenizer.bin for a model file that carries none (e.g. a Hugging Face
    // directory that `strata quantize` wrote from a llama2.c checkpoint).
    STRATA_ASSIGN_OR_RETURN(rt.file->tokenizer.vocab,
                            ReadLlama2cTokenizer(tokenizer_flag, static_cast<int32_t>(rt.file->config.vocab_size)));
    rt.file->tokenizer.kind = TokenizerSource::Kind::kSentencePieceVocab;
  }
  if (tokenizer_json) {
    if (!std::filesystem::is_regular_file(tokenizer_flag))
      return absl::NotFoundError(absl::StrCat("--tokenizer: no file '", tokenizer_flag, "'"));
    rt.file->tokenizer.kind = TokenizerSource::Kind::kTokenizerJson;
    rt.file->tokenizer.tokenizer_json_path = tokenizer_flag;
    const std::filesystem::path config = std::filesystem::path(tokenizer_flag).parent_path() / "tokenizer_config.json";
    rt.file->tokenizer.tokenizer_config_path = std::filesystem::is_regular_file(config) ? config.string() : "";
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = LoadModelTokenizer(*rt.file);
  if (tok.ok()) {
    if ((*tok)->vocab_size() > rt.file->config.vocab_size)
      return absl::InvalidArgumentError(absl::StrCat("the tokenizer has ", (*tok)->vocab_size(),
                                                     " tokens, more than the model's vocabulary of ",
                                                     rt.file->config.vocab_size));
    rt.tokenizer = std::move(*tok);
  } else if (need_tokenizer || !absl::IsNotFound(tok.status())) {
    return tok.status();
  }
  ModelRuntimeOptions o;
  STRATA_ASSIGN_OR_RETURN(int64_t ctx, flags.Int("ctx-size"));
  STRATA_ASSIGN_OR_RETURN(int64_t bt, IntOrAutoFlag(flags, "batch-tokens", DefaultStepTokens(device.info(), StepBudgetUse::kOnline)));
  STRATA_ASSIGN_OR_RETURN(int64_t bs, flags.Int("block-size"));
  if (ctx < 0 || bt <= 0 || bs <= 0) return absl::InvalidArgumentError("--ctx-size, --batch-tokens, --block-size must be positive");
  if (ctx > 0 && rt.file->config.max_position > 0 && ctx > rt.file->config.max_position)
    std::cerr << "strata: warning: --ctx-size " << ctx << " exceeds the model's trained context "
              << rt.file->config.max_position << "\n";
  o.max_context = ctx;
  o.max_batch_tokens = static_cast<int32_t>(bt);
  o.block_size = static_cast<int32_t>(bs);
  o.max_seqs = 1;
  if (flags.Get("kv-dtype") != "auto") {
    STRATA_ASSIGN_OR_RETURN(o.kv_dtype, ParseKvDType(flags.Get("kv-dtype")));
  }
  if (flags.On("enforce-eager")) o.decode_graphs = DecodeGraphMode::kOff;
  if (adjust) STRATA_RETURN_IF_ERROR(adjust(*rt.file, o));
  LoadProgress progress(flags, "loading weights");
  o.on_load_progress = [&](uint64_t done, uint64_t total) { progress.Update(static_cast<int64_t>(done), static_cast<int64_t>(total)); };
  STRATA_ASSIGN_OR_RETURN(rt.model, LlamaModel::Load(device, *rt.file, o));
  progress.Finish();
  rt.file->DropTensorData();
  return rt;
}

ProgressMode ProgressModeFor(const FlagSet& flags) {
  // Under --json stdout must stay one JSON document and stderr quiet unless something fails.
  return flags.Defines("json") && flags.On("json") ? ProgressMode::kQuiet : ProgressMode::kAuto;
}

LoadProgress::LoadProgress(const FlagSet& flags, std::string label, ProgressUnit unit)
    : mode_(ProgressModeFor(flags)), label_(std::move(label)), unit_(unit) {}

LoadProgress::~LoadProgress() = default;

void LoadProgress::Update(int64_t done, int64_t total) {
  if (!bar_) {
    ProgressMode mode = mode_;
    if (mode == ProgressMode::kAuto && !isatty(fileno(stderr)) &&
        (unit_ != ProgressUnit::kBytes || total < kLogLinesFromBytes)) {
      // A log (not a terminal) gets the 10% lines only for work that takes a while; small work
      // gets its final line alone.
      small_log_ = true;
      mode = ProgressMode::kLog;
    }
    bar_ = std::make_unique<Progress>(label_, total, unit_, mode);
  }
  if (!small_log_) bar_->Update(done);
}

void LoadProgress::Finish() {
  if (!bar_) return;
  if (small_log_) bar_->Update(INT64_MAX);
  bar_->Finish();
}

void AddKvPoolFlags(FlagSet& f) {
  f.Value("kv-blocks", "", "0", "KV-cache blocks; 0 = size the pool from the device's free memory");
  f.Value("gpu-memory-utilization", "", absl::StrFormat("%.2f", kDefaultGpuMemoryUtilization),
          "share of the device's free memory that weights and KV cache may use (with --kv-blocks 0)");
}

absl::Status SizeKvPool(const FlagSet& f, const ModelFile& file, const strata_device_info& info,
                        ModelRuntimeOptions& o) {
  STRATA_ASSIGN_OR_RETURN(int64_t kv_blocks, f.Int("kv-blocks"));
  STRATA_ASSIGN_OR_RETURN(double utilization, f.Double("gpu-memory-utilization"));
  if (kv_blocks < 0) return absl::InvalidArgumentError("--kv-blocks must be >= 0");
  if (!(utilization > 0 && utilization <= 1))
    return absl::InvalidArgumentError("--gpu-memory-utilization must be in (0, 1]");
  if (kv_blocks > 0) {
    o.num_blocks = static_cast<int32_t>(kv_blocks);
    return absl::OkStatus();
  }
  o.num_blocks = KvBlocksForDevice(file, info, o, utilization);
  return absl::OkStatus();
}

absl::Status ParseSamplingFlags(const FlagSet& f, SamplingParams* p) {
  const std::pair<const char*, float SamplingParams::*> floats[] = {
      {"temp", &SamplingParams::temperature},
      {"top-p", &SamplingParams::top_p},
      {"min-p", &SamplingParams::min_p},
      {"repeat-penalty", &SamplingParams::repetition_penalty},
      {"frequency-penalty", &SamplingParams::frequency_penalty},
      {"presence-penalty", &SamplingParams::presence_penalty},
  };
  for (const auto& [flag, member] : floats) {
    STRATA_ASSIGN_OR_RETURN(double v, f.Double(flag));
    p->*member = static_cast<float>(v);
  }
  STRATA_ASSIGN_OR_RETURN(int64_t top_k, f.Int("top-k"));
  p->top_k = static_cast<int>(top_k);
  return absl::OkStatus();
}

}  // namespace strata::cli
