#include "serving/memory_reclaimer.h"

#include <chrono>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace strata::serving {

MemoryReclaimer::MemoryReclaimer(double interval_s, TrimFunction trim)
    : interval_s_(interval_s), trim_(std::move(trim)) {
  if (interval_s_ > 0 && trim_) thread_ = std::thread([this] { Loop(); });
}

MemoryReclaimer::~MemoryReclaimer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

uint64_t MemoryReclaimer::runs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return runs_;
}

uint64_t MemoryReclaimer::released() const {
  std::lock_guard<std::mutex> lock(mu_);
  return released_;
}

bool MemoryReclaimer::DefaultTrim() {
#if defined(__GLIBC__)
  return malloc_trim(0) != 0;
#else
  return false;
#endif
}

void MemoryReclaimer::Loop() {
  const auto period = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(interval_s_));
  std::unique_lock<std::mutex> lock(mu_);
  while (!wake_.wait_for(lock, period, [this] { return stop_; })) {
    lock.unlock();  // trim without holding our lock: runs()/released() stay responsive
    const bool freed = trim_();
    lock.lock();
    ++runs_;
    if (freed) ++released_;
  }
}

}  // namespace strata::serving
