// The loader's progress: the meter's bar on a line while it runs, a summary that stays
// at the end, on a fake clock and a captured terminal; shown only where asked.
#include "sdk/runtime/progress_bar.h"

#include <string>

#include "absl/strings/match.h"
#include "common/progress_line_testing.h"
#include "gtest/gtest.h"

namespace drover::internal {
namespace {

TEST(ProgressBarTest, SummaryGivesCountTimeAndRate) {
  EXPECT_EQ(ProgressBar::Summary("data", "items", 1000, absl::Seconds(2)),
            "data: 1000 items in 2s (500 items/s)");
  EXPECT_EQ(ProgressBar::Summary("data", "batches", 0, absl::ZeroDuration()), "data: 0 batches in 0");
}

TEST(ProgressBarTest, DrawsTheMeterThenLeavesTheSummary) {
  FakeClock clock;
  drover::testing::CapturedTerminal term;
  {
    ProgressBar bar("data", "items", 100, term.Line(&clock), &clock);
    bar.Update(1);
    clock.Advance(absl::Seconds(1));
    bar.Update(60);
    const std::string running = term.text();
    EXPECT_TRUE(absl::StrContains(running, "data [")) << running;
    EXPECT_TRUE(absl::StrContains(running, "60/100 items")) << running;
    EXPECT_TRUE(absl::StrContains(running, "ETA")) << running;
    clock.Advance(absl::Seconds(1));
    bar.Finish(100);
    bar.Finish(100);
  }
  const std::string text = term.text();
  EXPECT_EQ(text.find("data: 100 items in 2s"), text.rfind("data: 100 items in 2s")) << text;
}

TEST(ProgressBarTest, OffShowsNothingAndOnShowsEvenWithoutATerminal) {
  EXPECT_EQ(LoaderLine(2), nullptr);
  EXPECT_NE(LoaderLine(1), nullptr);
}

}  // namespace
}  // namespace drover::internal
