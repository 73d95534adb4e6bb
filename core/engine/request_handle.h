// The client's end of one request's token stream. The engine's step thread pushes events;
// the client either gets them through the request's callback or pulls them with Next(),
// from any thread. Wait() blocks until the request ends and returns the whole output.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <string>

#include "core/engine/request.h"

namespace strata {

class RequestHandle {
 public:
  RequestHandle(std::string request_id, int64_t num_prompt_tokens, StreamEventCallback callback);

  const std::string& request_id() const { return output_.request_id; }

  // The next event, blocking until there is one; nullopt once the final event was taken.
  // With a callback, events are not queued: Next() returns nullopt when the stream ends.
  std::optional<StreamEvent> Next();
  // The next event if one is queued now, without blocking.
  std::optional<StreamEvent> TryNext();
  // Blocks until the request has ended; the output is complete then.
  RequestOutput Wait();
  bool finished() const;

  // Engine side (step thread). Push after the final event is ignored.
  void Push(StreamEvent event);
  // Fills in the output's statistics before the final event is pushed.
  void SetStats(int64_t num_cached_tokens, int32_t num_preemptions, double ttft, double tpot,
                double e2e);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamEvent> queue_;
  StreamEventCallback callback_;
  RequestOutput output_;
  bool done_ = false;        // the final event was pushed
};

}  // namespace strata
