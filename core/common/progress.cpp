#include "core/common/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "core/common/monotonic_seconds.h"

namespace strata {

std::string FormatBytes(double bytes) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  int u = 0;
  while (bytes >= 1000.0 && u < 4) {
    bytes /= 1000.0;
    ++u;
  }
  return u == 0 ? absl::StrFormat("%.0f B", bytes) : absl::StrFormat("%.1f %s", bytes, units[u]);
}

std::string FormatDuration(double s) {
  if (!std::isfinite(s) || s < 0) return "--:--";
  const int64_t t = static_cast<int64_t>(std::llround(s));
  if (t >= 3600) return absl::StrFormat("%d:%02d:%02d", t / 3600, (t / 60) % 60, t % 60);
  return absl::StrFormat("%d:%02d", t / 60, t % 60);
}

std::string FormatProgress(const std::string& label, int64_t done, int64_t total, double elapsed_s,
                           ProgressUnit unit, int bar_width) {
  const double frac = total > 0 ? std::clamp(static_cast<double>(done) / static_cast<double>(total), 0.0, 1.0) : 1.0;
  std::string s = label;
  if (bar_width > 0) {
    const int filled = static_cast<int>(frac * bar_width);
    s += " [" + std::string(static_cast<size_t>(filled), '#') + std::string(static_cast<size_t>(bar_width - filled), ' ') + "]";
  }
  s += absl::StrFormat(" %3.0f%%", frac * 100.0);
  const double rate = elapsed_s > 0 ? static_cast<double>(done) / elapsed_s : 0.0;
  if (unit == ProgressUnit::kBytes) {
    s += " " + FormatBytes(static_cast<double>(done)) + "/" + FormatBytes(static_cast<double>(total));
    s += " " + FormatBytes(rate) + "/s";
  } else {
    s += absl::StrFormat(" %d/%d %.1f/s", done, total, rate);
  }
  const double left = rate > 0 ? static_cast<double>(total - done) / rate : -1.0;
  s += done >= total ? " in " + FormatDuration(elapsed_s) : " ETA " + FormatDuration(left);
  return s;
}

Progress::Progress(std::string label, int64_t total, ProgressUnit unit, ProgressMode mode, std::FILE* out)
    : label_(std::move(label)), total_(std::max<int64_t>(total, 0)), unit_(unit), mode_(mode), out_(out) {
  if (mode_ == ProgressMode::kAuto) mode_ = isatty(fileno(out_)) ? ProgressMode::kBar : ProgressMode::kLog;
  start_s_ = MonotonicSeconds();
}

Progress::~Progress() { Finish(); }

void Progress::Update(int64_t done) {
  done_ = std::clamp<int64_t>(done, 0, total_);
  if (mode_ == ProgressMode::kQuiet || finished_) return;
  if (mode_ == ProgressMode::kBar) {
    const double now = MonotonicSeconds();
    if (last_draw_s_ >= 0 && now - last_draw_s_ < 0.1 && done_ < total_) return;  // ~10 redraws a second
    last_draw_s_ = now;
    Draw(false);
    return;
  }
  const int decile = total_ > 0 ? static_cast<int>(done_ * 10 / total_) : 10;
  if (decile > last_decile_ && decile < 10) {  // 100% is Finish's line
    last_decile_ = decile;
    Draw(false);
  }
}

void Progress::Finish() {
  if (finished_) return;
  finished_ = true;
  if (mode_ == ProgressMode::kQuiet) return;
  Draw(true);
}

void Progress::Draw(bool final) {
  const double elapsed = MonotonicSeconds() - start_s_;
  if (mode_ == ProgressMode::kBar) {
    // \r and clear-to-end-of-line: the bar is redrawn in place.
    std::fprintf(out_, "\r%s\x1b[K%s", FormatProgress(label_, done_, total_, elapsed, unit_, 30).c_str(),
                 final ? "\n" : "");
  } else {
    std::fprintf(out_, "%s\n", FormatProgress(label_, done_, total_, elapsed, unit_, 0).c_str());
  }
  std::fflush(out_);
}

}  // namespace strata
