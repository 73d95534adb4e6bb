#include "core/engine/request_handle.h"

#include <utility>

namespace strata {

RequestHandle::RequestHandle(std::string request_id, int64_t num_prompt_tokens,
                             StreamEventCallback callback)
    : callback_(std::move(callback)) {
  output_.request_id = std::move(request_id);
  output_.num_prompt_tokens = num_prompt_tokens;
}

std::optional<StreamEvent> RequestHandle::Next() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !queue_.empty() || done_; });
  if (queue_.empty()) return std::nullopt;
  StreamEvent e = std::move(queue_.front());
  queue_.pop_front();
  return e;
}

std::optional<StreamEvent> RequestHandle::TryNext() {
  std::lock_guard<std::mutex> lock(mu_);
  if (queue_.empty()) return std::nullopt;
  StreamEvent e = std::move(queue_.front());
  queue_.pop_front();
  return e;
}

RequestOutput RequestHandle::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  return output_;
}

bool RequestHandle::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void RequestHandle::SetStats(int64_t num_cached_tokens, int32_t num_preemptions, double ttft,
                             double tpot, double e2e) {
  std::lock_guard<std::mutex> lock(mu_);
  output_.num_cached_tokens = num_cached_tokens;
  output_.num_preemptions = num_preemptions;
  output_.ttft_seconds = ttft;
  output_.tpot_seconds = tpot;
  output_.e2e_seconds = e2e;
}

void RequestHandle::Push(StreamEvent event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    output_.generated_ids.insert(output_.generated_ids.end(), event.token_ids.begin(),
                                 event.token_ids.end());
    output_.token_steps.insert(output_.token_steps.end(), event.token_ids.size(), event.step);
    output_.text += event.text;
    if (event.finished) {
      output_.finish_reason = event.finish_reason;
      output_.error = event.error;
    }
  }
  // The callback runs outside the lock, before the request counts as done, so Wait()
  // returning means every callback has run.
  if (callback_) callback_(event);
  std::lock_guard<std::mutex> lock(mu_);
  const bool final_event = event.finished;
  if (!callback_) queue_.push_back(std::move(event));
  if (final_event) done_ = true;
  cv_.notify_all();
}

}  // namespace strata
