// Progress of a long task (model loading, quantization, perplexity) on stderr: on a terminal
// a bar redrawn in place with the rate (bytes/s or items/s) and the time left; otherwise
// (a log file, CI) one plain line at every 10% so the log stays readable; nothing at all in
// quiet mode (under --json, whose output must stay one JSON document).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace strata {

enum class ProgressMode {
  kAuto,   // a bar when the stream is a terminal, else log lines
  kBar,
  kLog,
  kQuiet,
};

enum class ProgressUnit { kItems, kBytes };

// "12.3 MB", "4.0 GB", "512 B" (decimal units, as download tools show them).
std::string FormatBytes(double bytes);
// "1:05", "1:02:03", "--:--" for unknown (negative or not finite).
std::string FormatDuration(double seconds);

// The text of one progress report, without line ending: label, bar (width cells, 0 = none),
// percent, done/total, rate and time left.
std::string FormatProgress(const std::string& label, int64_t done, int64_t total, double elapsed_s,
                           ProgressUnit unit, int bar_width);

class Progress {
 public:
  Progress(std::string label, int64_t total, ProgressUnit unit = ProgressUnit::kItems,
           ProgressMode mode = ProgressMode::kAuto, std::FILE* out = stderr);
  ~Progress();  // finishes (a bar gets its line end)
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void Update(int64_t done);  // work done so far (clamped to [0, total])
  void Add(int64_t delta) { Update(done_ + delta); }
  // The final report (100% if all done) and, for a bar, the line end. Idempotent.
  void Finish();

  ProgressMode mode() const { return mode_; }

 private:
  void Draw(bool final);

  std::string label_;
  int64_t total_, done_ = 0;
  ProgressUnit unit_;
  ProgressMode mode_;
  std::FILE* out_;
  double start_s_, last_draw_s_ = -1;
  int last_decile_ = 0;  // log mode: the last 10% step written
  bool finished_ = false;
};

}  // namespace strata
