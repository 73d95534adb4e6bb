// The CPU backend's worker threads: a persistent pool that every op (and every kernel file,
// e.g. the INT8/INT4 matmuls) uses instead of an OpenMP fork/join per op.
//
// Why not OpenMP: an op on a small model takes a few microseconds, and a per-op fork/join
// whose barrier waits for every thread of the team collapses when one of those threads is
// descheduled (a build or another process on the same cores): every op then waits a
// scheduler time slice for it (measured: ~6,400 tok/s quiet, 6 tok/s beside a build).
//
// How this pool avoids it:
//  - Work is split into chunks that threads *claim* (one atomic per chunk), and the caller
//    claims chunks too. A worker that is descheduled, or still asleep, simply claims nothing;
//    the caller finishes the op without it. The caller only waits for chunks that a worker
//    has actually started.
//  - Waiters (idle workers, and the caller waiting for started chunks) spin for a short
//    while (kSpinMicros) and then block on a futex, so a sleeping thread costs nothing and
//    a spinning one does not hold a core for long.
//  - The number of threads an op uses comes from its size (ThreadsFor): ops below
//    kMinBytesPerThread of memory traffic per thread run on the caller alone and never
//    wake a worker (a 64-wide matrix of stories260K runs on one thread).
//
// API for kernels (thread-safe; nested or concurrent calls run inline on the calling
// thread, so a body may itself call ParallelFor):
//
//   dev->pool->ParallelFor(num_items, bytes_per_item, [&](int64_t begin, int64_t end) {
//     for (int64_t i = begin; i < end; ++i) ...;   // items [begin, end), any thread
//   });
//
// `bytes_per_item` is the memory an item reads and writes (for a GEMV row: the weight row's
// bytes); it picks the thread count. Bodies must not throw. Items of one call may run on any
// thread in any order; a body that needs per-thread scratch uses thread_local storage or
// allocates per call of the body (one call covers a whole chunk of items).
#ifndef STRATA_BACKENDS_CPU_THREAD_POOL_H_
#define STRATA_BACKENDS_CPU_THREAD_POOL_H_

#include <atomic>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <vector>

namespace strata::cpu {

class ThreadPool {
 public:
  // Below this much memory traffic per thread, another thread costs more (a wake-up, the
  // chunk claims, the final wait) than it saves.
  static constexpr int64_t kMinBytesPerThread = 256 * 1024;
  // How long an idle worker, or a caller waiting for a started chunk, spins before it
  // blocks in the kernel.
  static constexpr int64_t kSpinMicros = 100;

  // `num_threads` counts the caller: num_threads - 1 workers are started.
  explicit ThreadPool(int32_t num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int32_t num_threads() const { return num_threads_; }

  // Threads worth using for `items` items of `bytes_per_item` each (1 .. num_threads()).
  int32_t ThreadsFor(int64_t items, int64_t bytes_per_item) const;

  // Runs body(begin, end) over chunks covering [0, items) exactly once each, on up to
  // ThreadsFor(items, bytes_per_item) threads, and returns when all have finished.
  template <typename Body>
  void ParallelFor(int64_t items, int64_t bytes_per_item, Body&& body) {
    ParallelForThreads(items, ThreadsFor(items, bytes_per_item), std::forward<Body>(body));
  }

  // The same with an explicit thread count (clamped to 1 .. num_threads()).
  template <typename Body>
  void ParallelForThreads(int64_t items, int32_t threads, Body&& body) {
    if (items <= 0) return;
    using B = std::remove_reference_t<Body>;
    Run(items, threads, &CallBody<B>, const_cast<void*>(static_cast<const void*>(&body)));
  }

 private:
  using Fn = void (*)(void* ctx, int64_t begin, int64_t end);
  template <typename B>
  static void CallBody(void* ctx, int64_t begin, int64_t end) {
    (*static_cast<B*>(ctx))(begin, end);
  }

  void Run(int64_t items, int32_t threads, Fn fn, void* ctx);
  void WorkerLoop();
  // Claims and runs chunks of the job of generation `gen` until none is left; returns the
  // number of chunks this thread ran.
  int64_t RunChunks(uint32_t gen);

  const int32_t num_threads_;
  std::vector<std::thread> workers_;
  // One job at a time; others (nested in a body, or from another thread) run inline.
  std::atomic<bool> busy_{false};

  // The job: state_ = (generation << 32) | next chunk index; fn_/ctx_/... are written
  // before the generation is published and read only after a chunk of it was claimed.
  std::atomic<uint64_t> state_{0xFFFFFFFFull};  // generation 0, closed
  std::atomic<Fn> fn_{nullptr};
  std::atomic<void*> ctx_{nullptr};
  std::atomic<int64_t> items_{0};
  std::atomic<int64_t> chunk_{1};
  std::atomic<int64_t> num_chunks_{0};
  std::atomic<int64_t> chunks_done_{0};
  std::atomic<int32_t> participants_{0};  // workers that joined the current job
  std::atomic<int32_t> max_workers_{0};   // how many the current job wants

  // Futex words: wake_seq_ changes when a job is posted (workers wait on it); done_seq_
  // when the last chunk of a job finishes (the caller waits on it).
  alignas(64) std::atomic<uint32_t> wake_seq_{0};
  std::atomic<int32_t> sleeping_workers_{0};
  alignas(64) std::atomic<uint32_t> done_seq_{0};
  std::atomic<int32_t> caller_sleeping_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace strata::cpu

#endif  // STRATA_BACKENDS_CPU_THREAD_POOL_H_
