#include "core/quantize/calibration.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/common/status_macros.h"
#include "nlohmann/json.hpp"

namespace strata {

absl::StatusOr<std::vector<std::string>> ReadCalibrationTexts(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("--calib: cannot read '", path, "'"));
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string all = ss.str();
  if (all.empty()) return absl::InvalidArgumentError(absl::StrCat("--calib: '", path, "' is empty"));
  const absl::string_view first = absl::StripLeadingAsciiWhitespace(all);
  if (!first.empty() && first.front() == '{') {  // JSONL
    std::vector<std::string> texts;
    int line_no = 0;
    for (absl::string_view line : absl::StrSplit(all, '\n')) {
      ++line_no;
      if (absl::StripAsciiWhitespace(line).empty()) continue;
      nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_object())
        return absl::InvalidArgumentError(absl::StrCat(path, ":", line_no, ": not a JSON object"));
      const char* key = j.contains("text") ? "text" : "prompt";
      if (!j.contains(key) || !j[key].is_string())
        return absl::InvalidArgumentError(absl::StrCat(path, ":", line_no, ": no \"text\" or \"prompt\" string"));
      texts.push_back(j[key].get<std::string>());
    }
    if (texts.empty()) return absl::InvalidArgumentError(absl::StrCat("--calib: '", path, "' has no prompts"));
    return texts;
  }
  return std::vector<std::string>{all};
}

absl::StatusOr<std::vector<std::vector<int32_t>>> CalibrationSequences(const std::vector<std::string>& texts,
                                                                       const Tokenizer& tokenizer, int64_t seq_len,
                                                                       int64_t max_tokens) {
  if (seq_len < 2 || max_tokens < 2) return absl::InvalidArgumentError("calibration needs at least 2 tokens");
  std::vector<int32_t> stream;
  for (const std::string& t : texts) {
    std::vector<int32_t> ids = tokenizer.Encode(t, /*add_special=*/false);
    stream.insert(stream.end(), ids.begin(), ids.end());
    if (static_cast<int64_t>(stream.size()) >= max_tokens) break;
  }
  const int32_t bos = tokenizer.bos_id();
  const int64_t body = bos >= 0 ? seq_len - 1 : seq_len;  // tokens of text per sequence
  std::vector<std::vector<int32_t>> seqs;
  int64_t used = 0;
  for (size_t at = 0; at < stream.size() && used < max_tokens;) {
    const int64_t room = std::min<int64_t>(body, max_tokens - used - (bos >= 0 ? 1 : 0));
    const size_t n = static_cast<size_t>(std::min<int64_t>(room, static_cast<int64_t>(stream.size() - at)));
    if (n < 1) break;
    std::vector<int32_t> s;
    if (bos >= 0) s.push_back(bos);
    s.insert(s.end(), stream.begin() + at, stream.begin() + at + n);
    at += n;
    if (s.size() < 2) break;
    used += static_cast<int64_t>(s.size());
    seqs.push_back(std::move(s));
  }
  if (seqs.empty()) return absl::InvalidArgumentError("the calibration text has no tokens");
  return seqs;
}

absl::Status RunCalibration(LlamaModel& model, const std::vector<std::vector<int32_t>>& sequences,
                            LinearInputObserver& observer, const std::function<void(int64_t, int64_t)>& progress) {
  int64_t total = 0, done = 0;
  for (const auto& s : sequences) total += static_cast<int64_t>(s.size());
  const int64_t step = model.options().max_batch_tokens;
  for (const auto& seq : sequences) {
    const int64_t n = static_cast<int64_t>(seq.size());
    if (n > model.max_context())
      return absl::InvalidArgumentError(
          absl::StrCat("calibration sequence of ", n, " tokens exceeds the context of ", model.max_context()));
    for (int64_t start = 0; start < n; start += step) {
      const int64_t end = std::min(n, start + step);
      StepInput in;
      in.token_ids.assign(seq.begin() + start, seq.begin() + end);
      for (int64_t p = start; p < end; ++p) {
        in.positions.push_back(static_cast<int32_t>(p));
        in.slot_mapping.push_back(static_cast<int32_t>(p));
      }
      in.query_start_loc = {0, static_cast<int32_t>(end - start)};
      in.seq_lens = {static_cast<int32_t>(end)};
      in.block_tables.resize(static_cast<size_t>(model.max_blocks_per_seq()));
      for (int32_t b = 0; b < model.max_blocks_per_seq(); ++b) in.block_tables[b] = b;
      in.logits_rows = {static_cast<int32_t>(end - start - 1)};
      STRATA_RETURN_IF_ERROR(model.ObserveLinearInputs(in, observer));
      done += end - start;
      if (progress) progress(done, total);
    }
  }
  return absl::OkStatus();
}

absl::Status ActivationMaxObserver::Observe(int32_t layer, LinearInput input, const float* x, int64_t tokens,
                                            int64_t cols) {
  std::vector<float>& m = maxima_[static_cast<size_t>(layer) * kNumLinearInputs + static_cast<size_t>(input)];
  if (m.empty()) m.assign(static_cast<size_t>(cols), 0.0f);
  if (static_cast<int64_t>(m.size()) != cols) return absl::InternalError("linear input width changed");
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t c = 0; c < cols; ++c) {
      const float v = std::abs(x[t * cols + c]);
      if (!std::isfinite(v))
        return absl::InvalidArgumentError(absl::StrCat("non-finite activation in layer ", layer, " during calibration"));
      m[static_cast<size_t>(c)] = std::max(m[static_cast<size_t>(c)], v);
    }
  return absl::OkStatus();
}

}  // namespace strata
