// What every model-running subcommand sets up the same way: the plugin registry, the
// chosen backend and its device, the model and its tokenizer. Flags are declared here once.
#pragma once

#include "core/engine/step_budget.h"
#include <functional>
#include <memory>

#include "core/engine/async_scheduling.h"
#include "absl/status/statusor.h"
#include "apps/strata/flag_set.h"
#include "core/device/device.h"
#include "core/common/progress.h"
#include "core/model/llama_model.h"
#include "core/model/model_file.h"
#include "core/sampling/sampling_params.h"
#include "core/tokenizer/tokenizer.h"
#include "plugins/plugin_loader.h"

namespace strata::cli {

void AddDeviceFlags(FlagSet& flags);
void AddModelFlags(FlagSet& flags);
// --no-async-scheduling (one of the model flags).
AsyncScheduling AsyncSchedulingFrom(const FlagSet& flags);

struct DeviceRuntime {
  std::unique_ptr<PluginRegistry> registry;
  const LoadedPlugin* plugin = nullptr;
  std::unique_ptr<Device> device;
};

// Loads the plugins (--plugin, next to the executable, STRATA_PLUGIN_PATH) and opens the
// device chosen by --device. Rejected plugins are reported on stderr.
// `index`: the device of a parallel run's local rank (taken modulo the backend's device
// count, so CPU ranks share the one CPU device).
absl::StatusOr<DeviceRuntime> OpenDevice(const FlagSet& flags, int32_t index = 0);

struct ModelRuntime {
  std::unique_ptr<ModelFile> file;
  std::unique_ptr<Tokenizer> tokenizer;  // null when the model has none
  std::unique_ptr<LlamaModel> model;
};

// `adjust` (optional) may change the options parsed from the flags once the file is read,
// before the model is loaded (the serving benchmark sets sequences and KV blocks).
absl::StatusOr<ModelRuntime> LoadModel(
    const FlagSet& flags, Device& device, bool need_tokenizer,
    const std::function<absl::Status(const ModelFile&, ModelRuntimeOptions&)>& adjust = {});

absl::StatusOr<strata_dtype> ParseDType(const std::string& s);

// How long work shows its progress on stderr: quiet under --json, else a bar on a terminal
// and plain lines in a log (core/common/progress.h).
ProgressMode ProgressModeFor(const FlagSet& flags);

// The progress of loading or warming up a model, made when its total is first known: on a
// terminal a bar; in a log, lines at every 10% for byte counts of 256 MB and more, else only
// the final line (a small model's load would print ten lines in a few milliseconds).
class LoadProgress {
 public:
  static constexpr int64_t kLogLinesFromBytes = 256'000'000;
  LoadProgress(const FlagSet& flags, std::string label, ProgressUnit unit = ProgressUnit::kBytes);
  ~LoadProgress();
  void Update(int64_t done, int64_t total);
  void Finish();  // the final line; nothing if Update was never called

 private:
  ProgressMode mode_;
  std::string label_;
  ProgressUnit unit_;
  bool small_log_ = false;
  std::unique_ptr<Progress> bar_;
};

// A count flag that may be "auto" (--batch-tokens, --max-batched-tokens, --max-num-seqs):
// auto_value then, which the caller takes from core/engine/step_budget.h for its device.
absl::StatusOr<int64_t> IntOrAutoFlag(const FlagSet& flags, const char* name, int64_t auto_value);

// --temp, --top-k, --top-p, --min-p, --repeat-penalty, --frequency-penalty and
// --presence-penalty (which both `run` and `bench` take, each with its own defaults) into p;
// SamplingParams::Validate checks their ranges.
absl::Status ParseSamplingFlags(const FlagSet& flags, SamplingParams* p);

// The KV pool of a batching engine (serve, bench's serving mode): --kv-blocks (0 = size it
// from the device's free memory) and --gpu-memory-utilization (the share of free memory
// that weights and KV cache may take).
void AddKvPoolFlags(FlagSet& flags);

// Sets o.num_blocks from those flags for `file` on a device described by `info`; o's
// max_seqs, block_size, max_context and kv_dtype must already be set.
absl::Status SizeKvPool(const FlagSet& flags, const ModelFile& file, const strata_device_info& info,
                        ModelRuntimeOptions& o);

}  // namespace strata::cli
