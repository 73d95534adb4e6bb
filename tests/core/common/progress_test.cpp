// The progress reporter: its text, the 10% log lines off a terminal, silence when quiet.
#include "core/common/progress.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "absl/strings/str_split.h"

namespace strata {
namespace {

// What a reporter writes to a memory stream.
struct Captured {
  char* buf = nullptr;
  size_t size = 0;
  std::FILE* f = open_memstream(&buf, &size);
  std::string Text() {
    std::fflush(f);
    return std::string(buf, size);
  }
  ~Captured() {
    std::fclose(f);
    free(buf);
  }
};

TEST(Progress, FormatsBytesAndDurations) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(12.3e6), "12.3 MB");
  EXPECT_EQ(FormatBytes(4e9), "4.0 GB");
  EXPECT_EQ(FormatDuration(65), "1:05");
  EXPECT_EQ(FormatDuration(3723), "1:02:03");
  EXPECT_EQ(FormatDuration(-1), "--:--");
}

TEST(Progress, LineHasPercentRateAndEta) {
  // Half of 2 GB in 10 s: 100 MB/s, 10 s left.
  const std::string s = FormatProgress("load", 1000000000, 2000000000, 10.0, ProgressUnit::kBytes, 10);
  EXPECT_EQ(s, "load [#####     ]  50% 1.0 GB/2.0 GB 100.0 MB/s ETA 0:10");
  const std::string done = FormatProgress("q", 4, 4, 2.0, ProgressUnit::kItems, 0);
  EXPECT_EQ(done, "q 100% 4/4 2.0/s in 0:02");
}

TEST(Progress, LogModeWritesOneLinePerTenPercent) {
  Captured c;
  {
    Progress p("layers", 100, ProgressUnit::kItems, ProgressMode::kLog, c.f);
    for (int i = 1; i <= 100; ++i) p.Update(i);
  }
  const std::vector<std::string> lines = absl::StrSplit(c.Text(), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 10u);  // 10%, 20%, ..., 90%, then the final 100%
  EXPECT_NE(lines[0].find(" 10% 10/100"), std::string::npos) << lines[0];
  EXPECT_NE(lines[9].find("100% 100/100"), std::string::npos) << lines[9];
}

TEST(Progress, BarRedrawsInPlaceAndEndsItsLine) {
  Captured c;
  {
    Progress p("load", 10, ProgressUnit::kItems, ProgressMode::kBar, c.f);
    p.Update(5);
  }
  const std::string t = c.Text();
  EXPECT_EQ(t.front(), '\r');
  EXPECT_EQ(t.back(), '\n');
  EXPECT_NE(t.find(" 50% 5/10"), std::string::npos) << t;  // the last state, on its own line
}

TEST(Progress, QuietWritesNothing) {
  Captured c;
  {
    Progress p("x", 10, ProgressUnit::kItems, ProgressMode::kQuiet, c.f);
    p.Update(10);
  }
  EXPECT_EQ(c.Text(), "");
}

}  // namespace
}  // namespace strata
