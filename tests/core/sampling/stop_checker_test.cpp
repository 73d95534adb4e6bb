#include "core/sampling/stop_checker.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace strata {
namespace {

// Feeds all increments and returns everything emitted (plus the Flush() if not stopped).
struct StreamOutcome {
  std::string text;
  bool stopped = false;
  std::string stop;
};
StreamOutcome FeedAll(const std::vector<std::string>& stops, const std::vector<std::string>& pieces) {
  StopChecker c(stops);
  StreamOutcome run;
  for (const std::string& piece : pieces) {
    StopChecker::Result r = c.Feed(piece);
    run.text += r.text;
    if (r.stopped) {
      run.stopped = true;
      run.stop = r.stop;
      break;
    }
  }
  if (!run.stopped) run.text += c.Flush();
  return run;
}

TEST(StopCheckerTest, StopAcrossTokenBoundaries) {
  const StreamOutcome r = FeedAll({"o w"}, {"Hel", "lo wor", "ld"});
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "Hell");
  EXPECT_EQ(r.stop, "o w");

  // The stop string split over three increments.
  const StreamOutcome split = FeedAll({"o w"}, {"Hello", " ", "world"});
  EXPECT_TRUE(split.stopped);
  EXPECT_EQ(split.text, "Hell");
}

TEST(StopCheckerTest, HoldsBackAPossibleStartAndReleasesIt) {
  StopChecker c({"world!"});
  StopChecker::Result a = c.Feed("Hello wor");
  EXPECT_EQ(a.text, "Hello ");  // "wor" may begin "world!"
  EXPECT_FALSE(a.stopped);
  EXPECT_EQ(c.held(), 3u);
  StopChecker::Result b = c.Feed("ld?");
  EXPECT_EQ(b.text, "world?");  // it did not: released
  EXPECT_FALSE(b.stopped);
  EXPECT_EQ(c.held(), 0u);
}

TEST(StopCheckerTest, HoldbackShrinksToTheLongestStillMatchingTail) {
  // "aab" ends with "ab", a prefix of "abc": only "a" is safe.
  StopChecker c({"abc"});
  EXPECT_EQ(c.Feed("aab").text, "a");
  EXPECT_EQ(c.held(), 2u);
  StopChecker::Result r = c.Feed("c and more");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");
}

TEST(StopCheckerTest, FlushReleasesTheTailAtEndOfGeneration) {
  StopChecker c({"abc"});
  EXPECT_EQ(c.Feed("xxab").text, "xx");
  EXPECT_EQ(c.Flush(), "ab");
}

TEST(StopCheckerTest, EarliestStopStringWins) {
  const StreamOutcome r = FeedAll({"world", "lo"}, {"Hello world"});
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "Hel");
  EXPECT_EQ(r.stop, "lo");
}

TEST(StopCheckerTest, NothingAfterStop) {
  StopChecker c({"\n"});
  StopChecker::Result r = c.Feed("line one\nline two");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "line one");
  StopChecker::Result after = c.Feed("more");
  EXPECT_TRUE(after.stopped);
  EXPECT_EQ(after.text, "");
  EXPECT_EQ(c.Flush(), "");
}

TEST(StopCheckerTest, NoStopStringsPassEverythingThrough) {
  StopChecker c({});
  EXPECT_EQ(c.Feed("Hel").text, "Hel");
  EXPECT_EQ(c.Feed("lo").text, "lo");
  EXPECT_EQ(c.held(), 0u);
}

TEST(StopCheckerTest, MultiByteUtf8StopString) {
  // "é" is two bytes; the stop string starts in one increment and ends in the next.
  const StreamOutcome r = FeedAll({"café!"}, {"un caf", "\xc3", "\xa9! oui"});
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "un ");
}

}  // namespace
}  // namespace strata
