// The meeting point of one HTTP request's choices (n engine requests, or one per prompt)
// and the HTTP thread that answers it. The engine's step thread pushes events through the
// callbacks (never blocking: a short lock and a notify); the HTTP thread waits with a
// timeout, so it can notice shutdown and never holds up a step.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "core/engine/request.h"

namespace strata::serving {

struct ChoiceEvent {
  int index = 0;  // the choice the event belongs to
  StreamEvent event;
};

class ChoiceStream : public std::enable_shared_from_this<ChoiceStream> {
 public:
  explicit ChoiceStream(int num_choices) : finished_(num_choices, false), remaining_(num_choices) {}

  // The engine callback of choice `index`; it keeps the stream alive while the engine holds it.
  StreamEventCallback CallbackFor(int index);

  // Events pushed since the last call, waiting up to `timeout` for the first one. Once
  // every choice has finished it never waits: there is nothing more to wait for, and the
  // caller must close the response at once (waiting out the timeout held every stream's
  // end, [DONE] and the connection close, back by 100 ms).
  std::vector<ChoiceEvent> Take(std::chrono::milliseconds timeout);

  // Every choice has pushed its final event (they may not all be taken yet).
  bool all_finished() const;
  bool finished(int index) const;
  // Marks a choice that never reached the engine (its Submit failed) as finished.
  void MarkFinished(int index);

 private:
  void Push(int index, const StreamEvent& event);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ChoiceEvent> queue_;
  std::vector<bool> finished_;
  int remaining_;
};

}  // namespace strata::serving
