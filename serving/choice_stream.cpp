#include "serving/choice_stream.h"

namespace strata::serving {

StreamEventCallback ChoiceStream::CallbackFor(int index) {
  std::shared_ptr<ChoiceStream> self = shared_from_this();
  return StreamEventCallback([self, index](const StreamEvent& ev) { self->Push(index, ev); });
}

void ChoiceStream::Push(int index, const StreamEvent& event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_[index]) return;
    if (event.finished) {
      finished_[index] = true;
      --remaining_;
    }
    queue_.push_back(ChoiceEvent{index, event});
  }
  cv_.notify_all();
}

void ChoiceStream::MarkFinished(int index) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!finished_[index]) {
    finished_[index] = true;
    --remaining_;
  }
  cv_.notify_all();
}

std::vector<ChoiceEvent> ChoiceStream::Take(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !queue_.empty() || remaining_ == 0; });
  std::vector<ChoiceEvent> out(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
  queue_.clear();
  return out;
}

bool ChoiceStream::all_finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return remaining_ == 0;
}

bool ChoiceStream::finished(int index) const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_[index];
}

}  // namespace strata::serving
