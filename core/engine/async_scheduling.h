// When the engine and the generator overlap steps: launch step N + 1 on the device before
// step N's sampled tokens are back on the host (vLLM's --async-scheduling), so the device
// does not idle while the host handles tokens and schedules. Needs the device ABI 1.4
// entries (LlamaModel::SupportsOverlappedSteps); the outputs are the same either way.
#pragma once

namespace strata {

enum class AsyncScheduling {
  kAuto,  // where the backend has the entries and runs ops asynchronously (a GPU)
  kOn,    // wherever the backend has the entries (on a CPU it only delays tokens: tests)
  kOff,   // --no-async-scheduling
};

class Device;

// Whether steps on `device` overlap under `mode` (supports: the model's ABI 1.4 entries).
bool OverlapsSteps(AsyncScheduling mode, bool supports, const Device& device);

}  // namespace strata
