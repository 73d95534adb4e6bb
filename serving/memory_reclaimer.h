// Gives memory that malloc keeps after it was freed back to the system, periodically.
//
// Why: under mixed traffic the server's RSS crept up (+3.2% to +6.4% over the last 20 minutes
// of a 30-minute soak, docs/soak.md) while the memory in use stayed flat. The growth was
// freed memory kept inside one glibc arena (the engine thread's: per-batch-shape oneDNN
// primitives and step buffers of varying size): glibc returns a thread arena's memory only
// from the top of its heap, so free holes in the middle stay resident. malloc_trim(0) walks
// every arena and releases the free pages inside it (madvise), which brought RSS back to its
// level of 15 minutes earlier in that soak. It costs a walk over the free lists under each
// arena's lock, well under a millisecond at this server's heap size, so once every few
// seconds is enough and invisible to latency.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace strata::serving {

class MemoryReclaimer {
 public:
  // `trim` returns whether it released anything (malloc_trim's result); the default is
  // glibc's malloc_trim(0) (a no-op returning false elsewhere).
  using TrimFunction = std::function<bool()>;

  // Starts a thread that calls `trim` every `interval_s` seconds (<= 0: no thread).
  explicit MemoryReclaimer(double interval_s, TrimFunction trim = DefaultTrim);
  ~MemoryReclaimer();  // stops the thread promptly (it waits on a condition variable)
  MemoryReclaimer(const MemoryReclaimer&) = delete;
  MemoryReclaimer& operator=(const MemoryReclaimer&) = delete;

  uint64_t runs() const;      // calls of `trim` so far
  uint64_t released() const;  // of which released memory

  static bool DefaultTrim();

 private:
  void Loop();

  const double interval_s_;
  TrimFunction trim_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  uint64_t runs_ = 0, released_ = 0;
  std::thread thread_;
};

}  // namespace strata::serving
