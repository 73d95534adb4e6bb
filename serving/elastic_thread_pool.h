// cpp-httplib's task queue (one task = one connection, held for as long as an SSE stream
// is open), as a pool that starts threads on demand up to a maximum and hands each task
// to the most recently idle thread. httplib's own ThreadPool starts every thread up front
// and wakes them round-robin, so under load every one of hundreds of stacks gets touched
// and resident memory creeps up; LIFO reuse keeps the working set to the threads that
// the peak concurrency really needed.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <httplib.h>

namespace strata::serving {

class ElasticThreadPool : public httplib::TaskQueue {
 public:
  explicit ElasticThreadPool(size_t max_threads) : max_threads_(max_threads < 1 ? 1 : max_threads) {}
  ~ElasticThreadPool() override { shutdown(); }

  // Runs `fn` on an idle thread, a new one (below the maximum), or queues it for the
  // next thread that becomes free.
  void enqueue(std::function<void()> fn) override;
  // Runs what is queued, then joins every thread.
  void shutdown() override;

  size_t num_threads() const;

 private:
  struct Worker {
    std::condition_variable cv;
    std::function<void()> job;
    std::thread thread;
  };
  void Run(Worker* w);

  const size_t max_threads_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<Worker*> idle_;  // a stack: the last to finish is the first reused
  std::deque<std::function<void()>> pending_;
  bool shutdown_ = false;
};

}  // namespace strata::serving
