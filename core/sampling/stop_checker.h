// Stop strings over streamed text. The detokenizer hands over text increments; a stop
// string may span several of them ("Hel" + "lo wor" + "ld" with stop "o w"), so any tail
// that could still become the start of a stop string is held back until it either
// completes the stop string (then it is dropped: the output ends right before the stop
// string, as in vLLM and the OpenAI API) or stops matching (then it is released).
// End-of-sequence tokens and max_new_tokens are the caller's business; it calls Flush()
// when generation ends for those reasons, to release the held-back tail.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace strata {

class StopChecker {
 public:
  struct Result {
    std::string text;      // safe to emit now
    bool stopped = false;  // a stop string was hit; nothing more will be emitted
    std::string stop;      // the stop string that was hit (when stopped)
  };

  // Empty stop strings are ignored (SamplingParams::Validate() rejects them).
  explicit StopChecker(std::vector<std::string> stop_strings);

  // Feeds the next decoded increment. After a stop, returns empty results with stopped set.
  Result Feed(std::string_view increment);

  // Generation ended for another reason: releases the held-back tail (empty if stopped).
  std::string Flush();

  bool stopped() const { return stopped_; }
  // Bytes currently held back.
  size_t held() const { return pending_.size(); }

 private:
  std::vector<std::string> stops_;
  std::string pending_;  // text not yet emitted: a possible start of a stop string
  bool stopped_ = false;
  std::string hit_;
};

}  // namespace strata
