#include "serving/elastic_thread_pool.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace strata::serving {
namespace {

// HTTP workers wake once per streamed token. At the default policy each wake-up preempts
// the engine's step thread (Linux favours freshly woken threads), which then waits for a
// core: on 2 cores with 16 streams the step thread spent ~40% of its time preempted and
// time per output token tripled. SCHED_BATCH (no wake-up preemption) and a lower priority
// let the step thread keep its core; the workers still run whenever a core is free.
// Both are allowed without privileges; failures are harmless (the default policy stays).
void YieldToTheEngine() {
  sched_param p{};
  p.sched_priority = 0;
  pthread_setschedparam(pthread_self(), SCHED_BATCH, &p);
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 5);
}

}  // namespace

void ElasticThreadPool::enqueue(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  if (shutdown_) return;  // httplib stops enqueueing before shutdown; nothing to run it now
  if (!idle_.empty()) {
    Worker* w = idle_.back();
    idle_.pop_back();
    w->job = std::move(fn);
    w->cv.notify_one();
    return;
  }
  if (workers_.size() < max_threads_) {
    auto w = std::make_unique<Worker>();
    w->job = std::move(fn);
    Worker* raw = w.get();
    workers_.push_back(std::move(w));
    raw->thread = std::thread([this, raw] { Run(raw); });
    return;
  }
  pending_.push_back(std::move(fn));
}

void ElasticThreadPool::Run(Worker* w) {
  YieldToTheEngine();
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (w->job) {
      std::function<void()> job = std::move(w->job);
      w->job = nullptr;
      lock.unlock();
      job();
      lock.lock();
      continue;
    }
    if (!pending_.empty()) {
      w->job = std::move(pending_.front());
      pending_.pop_front();
      continue;
    }
    if (shutdown_) return;
    idle_.push_back(w);
    w->cv.wait(lock, [&] { return w->job != nullptr || shutdown_; });
    if (!w->job) {
      // Shutdown: leave the idle stack so nobody hands this worker a job.
      for (size_t i = 0; i < idle_.size(); ++i)
        if (idle_[i] == w) {
          idle_.erase(idle_.begin() + static_cast<std::ptrdiff_t>(i));
          break;
        }
    }
  }
}

void ElasticThreadPool::shutdown() {
  std::vector<Worker*> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_ && workers_.empty()) return;
    shutdown_ = true;
    for (auto& w : workers_) {
      w->cv.notify_all();
      all.push_back(w.get());
    }
  }
  for (Worker* w : all)
    if (w->thread.joinable()) w->thread.join();
  std::lock_guard<std::mutex> lock(mu_);
  workers_.clear();
  idle_.clear();
}

size_t ElasticThreadPool::num_threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return workers_.size();
}

}  // namespace strata::serving
