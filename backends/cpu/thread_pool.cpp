#include "backends/cpu/thread_pool.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define STRATA_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define STRATA_CPU_RELAX() asm volatile("yield")
#else
#define STRATA_CPU_RELAX() ((void)0)
#endif

namespace strata::cpu {
namespace {

constexpr uint64_t kClosed = 0xFFFFFFFFull;  // "next chunk" of a finished job: nothing to claim

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
}

void FutexWake(std::atomic<uint32_t>* word, int count) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, count, nullptr,
          nullptr, 0);
}

// Spins until `ready()` or kSpinMicros have passed; true if ready.
template <typename Ready>
bool SpinUntil(Ready ready) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::microseconds(ThreadPool::kSpinMicros);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
      STRATA_CPU_RELAX();
    }
    if (Clock::now() >= deadline) return ready();
  }
}

}  // namespace

ThreadPool::ThreadPool(int32_t num_threads) : num_threads_(std::max<int32_t>(1, num_threads)) {
  workers_.reserve(num_threads_ - 1);
  for (int32_t i = 1; i < num_threads_; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  wake_seq_.fetch_add(1);
  FutexWake(&wake_seq_, INT_MAX);
  for (std::thread& t : workers_) t.join();
}

int32_t ThreadPool::ThreadsFor(int64_t items, int64_t bytes_per_item) const {
  if (items <= 1 || num_threads_ == 1) return 1;
  const int64_t bytes = items * std::max<int64_t>(1, bytes_per_item);
  const int64_t by_size = bytes / kMinBytesPerThread;
  return static_cast<int32_t>(std::clamp<int64_t>(std::min(by_size, items), 1, num_threads_));
}

int64_t ThreadPool::RunChunks(uint32_t gen) {
  int64_t ran = 0;
  for (;;) {
    uint64_t v = state_.load();
    if (static_cast<uint32_t>(v >> 32) != gen) return ran;
    const uint64_t idx = v & 0xFFFFFFFFull;
    if (idx >= static_cast<uint64_t>(num_chunks_.load())) return ran;
    // The claim also proves that the job of `gen` is still open, so the fields read below
    // are its own (a newer job's are written only after this one is closed).
    if (!state_.compare_exchange_weak(v, v + 1)) continue;
    const int64_t chunk = chunk_.load(), items = items_.load();
    const int64_t begin = static_cast<int64_t>(idx) * chunk;
    fn_.load()(ctx_.load(), begin, std::min(items, begin + chunk));
    ++ran;
    if (chunks_done_.fetch_add(1) + 1 == num_chunks_.load()) {
      done_seq_.fetch_add(1);
      if (caller_sleeping_.load() != 0) FutexWake(&done_seq_, 1);
    }
  }
}

void ThreadPool::WorkerLoop() {
  // The value before any post: a job (or the stop) posted before this thread got here
  // must still count as new.
  uint32_t seen = 0;
  for (;;) {
    auto posted = [&] { return wake_seq_.load(std::memory_order_relaxed) != seen; };
    if (!SpinUntil(posted)) {
      sleeping_workers_.fetch_add(1);
      while (wake_seq_.load() == seen) FutexWait(&wake_seq_, seen);
      sleeping_workers_.fetch_sub(1);
    }
    if (stop_.load()) return;
    seen = wake_seq_.load();
    const uint32_t gen = static_cast<uint32_t>(state_.load() >> 32);
    // Only as many workers as the job asked for take part; a late one may take a later
    // job's place, which costs that job a little parallelism, never correctness.
    if (participants_.fetch_add(1) < max_workers_.load()) RunChunks(gen);
  }
}

void ThreadPool::Run(int64_t items, int32_t threads, Fn fn, void* ctx) {
  threads = std::clamp<int32_t>(threads, 1, num_threads_);
  if (threads == 1 || items == 1) {
    fn(ctx, 0, items);
    return;
  }
  if (busy_.exchange(true)) {  // a body calling back in, or another thread's op: run here
    fn(ctx, 0, items);
    return;
  }
  // A few chunks per thread, so that the caller can take over the share of a worker that
  // is late (descheduled or still waking up).
  const int64_t want_chunks = std::min<int64_t>(items, int64_t{threads} * 4);
  const int64_t chunk = (items + want_chunks - 1) / want_chunks;
  const int64_t num_chunks = (items + chunk - 1) / chunk;
  const uint32_t gen = static_cast<uint32_t>(state_.load() >> 32) + 1;
  fn_.store(fn);
  ctx_.store(ctx);
  items_.store(items);
  chunk_.store(chunk);
  num_chunks_.store(num_chunks);
  chunks_done_.store(0);
  participants_.store(0);
  max_workers_.store(threads - 1);
  state_.store(uint64_t{gen} << 32);  // publish: chunk 0 of job `gen` is claimable
  wake_seq_.fetch_add(1);
  if (sleeping_workers_.load() > 0) FutexWake(&wake_seq_, threads - 1);

  RunChunks(gen);
  auto finished = [&] { return chunks_done_.load() == num_chunks; };
  if (!SpinUntil(finished)) {
    for (;;) {
      const uint32_t seq = done_seq_.load();
      caller_sleeping_.store(1);
      if (finished()) break;
      FutexWait(&done_seq_, seq);
      if (finished()) break;
    }
    caller_sleeping_.store(0);
  }
  state_.store((uint64_t{gen} << 32) | kClosed);
  busy_.store(false);
}

}  // namespace strata::cpu
