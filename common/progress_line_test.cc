// ProgressLine and ProgressMeter without a terminal: the writer and the clock are
// injected. ForStderr is checked against a real pipe and a real pseudo-terminal.
#include "common/progress_line.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/clock.h"
#include "common/human_format.h"
#include "gtest/gtest.h"

namespace drover {
namespace {

// What a terminal would have received, write by write.
struct Screen {
  std::vector<std::string> writes;
  std::string All() const {
    std::string s;
    for (const auto& w : writes) s += w;
    return s;
  }
};

ProgressLine::Options OptionsFor(Screen* screen, Clock* clock, int columns = 80) {
  ProgressLine::Options o;
  o.write = [screen](absl::string_view s) { screen->writes.emplace_back(s); };
  o.columns = [columns] { return columns; };
  o.clock = clock;
  return o;
}

TEST(ProgressLineTest, DrawsInPlaceAndRedrawsAtMostEveryInterval) {
  FakeClock clock;
  Screen screen;
  ProgressLine line(OptionsFor(&screen, &clock));
  line.Update("pending 1s");
  ASSERT_EQ(screen.writes.size(), 1u);
  EXPECT_EQ(screen.writes[0], "\rpending 1s\033[K");
  // Within the interval: remembered, not drawn.
  line.Update("pending 1.05s");
  EXPECT_EQ(screen.writes.size(), 1u);
  clock.Advance(absl::Milliseconds(100));
  line.Update("pending 2s");
  ASSERT_EQ(screen.writes.size(), 2u);
  EXPECT_EQ(screen.writes[1], "\rpending 2s\033[K");
  // Show draws at once.
  line.Show("starting 0/4 ranks");
  ASSERT_EQ(screen.writes.size(), 3u);
  EXPECT_EQ(screen.writes[2], "\rstarting 0/4 ranks\033[K");
}

TEST(ProgressLineTest, OutputIsPrintedOnACleanLineAndTheLineComesBackBelowIt) {
  FakeClock clock;
  Screen screen;
  ProgressLine line(OptionsFor(&screen, &clock));
  // Nothing drawn yet: the output alone.
  line.PrintAbove([&] { screen.writes.push_back("first\n"); });
  EXPECT_EQ(screen.All(), "first\n");
  line.Show("running 3s");
  screen.writes.clear();
  line.PrintAbove([&] { screen.writes.push_back("[rank0]: hello\n"); });
  EXPECT_EQ(screen.All(), "\r\033[K[rank0]: hello\n\rrunning 3s\033[K");
  // Cleared: the next output is not followed by a line.
  line.Clear();
  screen.writes.clear();
  line.PrintAbove([&] { screen.writes.push_back("last\n"); });
  EXPECT_EQ(screen.All(), "last\n");
}

TEST(ProgressLineTest, DestructorErasesADrawnLineOnly) {
  FakeClock clock;
  Screen screen;
  { ProgressLine line(OptionsFor(&screen, &clock)); }
  EXPECT_TRUE(screen.writes.empty());
  {
    ProgressLine line(OptionsFor(&screen, &clock));
    line.Show("x");
  }
  ASSERT_EQ(screen.writes.size(), 2u);
  EXPECT_EQ(screen.writes[1], "\r\033[K");
}

TEST(ProgressLineTest, TextIsOneLineThatNeverWraps) {
  EXPECT_EQ(FitToColumns("abcdef", 4), "abc");
  EXPECT_EQ(FitToColumns("a\nb\tc", 80), "a b c");
  // UTF-8 characters count as one column each and are never split.
  EXPECT_EQ(FitToColumns("\xc3\xa9t\xc3\xa9s", 3), "\xc3\xa9t");
  EXPECT_EQ(FitToColumns("abc", 1), "");
  FakeClock clock;
  Screen screen;
  ProgressLine line(OptionsFor(&screen, &clock, /*columns=*/10));
  line.Show("pending: waiting behind job-7 for 4 GPUs");
  EXPECT_EQ(screen.writes.back(), "\rpending: \033[K");
}

TEST(ProgressLineTest, BarFillsWithTheFraction) {
  EXPECT_EQ(RenderBar(0, 12), "[>         ]");
  EXPECT_EQ(RenderBar(0.5, 12), "[=====>    ]");
  EXPECT_EQ(RenderBar(1, 12), "[==========]");
  EXPECT_EQ(RenderBar(7, 6), "[====]");    // clamped
  EXPECT_EQ(RenderBar(-1, 6), "[>   ]");
}

TEST(ProgressMeterTest, RateAndEtaFollowTheRecentWindow) {
  FakeClock clock;
  ProgressMeter meter({.label = "pull",
                       .total = 1000,
                       .unit = ProgressMeter::Unit::kItems,
                       .clock = &clock,
                       .window = absl::Seconds(5)});
  EXPECT_EQ(meter.Rate(), 0);
  EXPECT_FALSE(meter.Eta().has_value());
  clock.Advance(absl::Seconds(1));
  meter.Add(100);
  EXPECT_DOUBLE_EQ(meter.Rate(), 100);
  ASSERT_TRUE(meter.Eta().has_value());
  EXPECT_EQ(*meter.Eta(), absl::Seconds(9));
  // Ten seconds at 10/s: the window forgets the fast start.
  for (int i = 0; i < 10; ++i) {
    clock.Advance(absl::Seconds(1));
    meter.Add(10);
  }
  EXPECT_NEAR(meter.Rate(), 10, 0.5);
  EXPECT_EQ(meter.done(), 200);
  EXPECT_NEAR(absl::ToDoubleSeconds(*meter.Eta()), 80, 4);
  // A stall: the rate falls to zero and the ETA is unknown.
  clock.Advance(absl::Seconds(30));
  EXPECT_EQ(meter.Rate(), 0);
  EXPECT_FALSE(meter.Eta().has_value());
}

TEST(ProgressMeterTest, RendersBytesWithABarAndItemsWithoutATotal) {
  FakeClock clock;
  ProgressMeter bytes({.label = "pulling w",
                       .total = 4LL << 30,
                       .unit = ProgressMeter::Unit::kBytes,
                       .clock = &clock});
  clock.Advance(absl::Seconds(2));
  bytes.Set(1LL << 30);
  const std::string line = bytes.Render(80);
  EXPECT_EQ(line,
            "pulling w [======>                 ]  25%  1.0 GiB/4.0 GiB  512.0 MiB/s  ETA 6s");
  EXPECT_LE(line.size(), 79u);
  // Narrow terminals keep a 10-character bar (the line is then cut by ProgressLine).
  EXPECT_TRUE(absl::StrContains(bytes.Render(20), "[==>     ]"));

  ProgressMeter items({.label = "loader", .item_name = "batches", .clock = &clock});
  clock.Advance(absl::Seconds(1));
  items.Add(1500);
  EXPECT_EQ(items.Render(), "loader  1.5k batches  1.5k batches/s");
}

TEST(HumanFormatTest, SizesDurationsCounts) {
  EXPECT_EQ(HumanBytes(700), "700 B");
  EXPECT_EQ(HumanBytes(3.5 * (1 << 30)), "3.5 GiB");
  EXPECT_EQ(HumanDuration(absl::Seconds(42)), "42s");
  EXPECT_EQ(HumanDuration(absl::Seconds(192)), "3m12s");
  EXPECT_EQ(HumanDuration(absl::Hours(2) + absl::Minutes(5)), "2h05m");
  EXPECT_EQ(HumanDuration(-absl::Seconds(3)), "0s");
  EXPECT_EQ(HumanCount(999), "999");
  EXPECT_EQ(HumanCount(12345), "12.3k");
  EXPECT_EQ(HumanCount(4.5e6), "4.5M");
}

// Points stderr at `fd` for the life of the object.
class StderrRedirect {
 public:
  explicit StderrRedirect(int fd) : saved_(dup(STDERR_FILENO)) { dup2(fd, STDERR_FILENO); }
  ~StderrRedirect() {
    dup2(saved_, STDERR_FILENO);
    close(saved_);
  }

 private:
  int saved_;
};

TEST(ProgressLineTest, ForStderrIsNullOnAPipeAndDrawsOnATerminal) {
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  {
    StderrRedirect to_pipe(p[1]);
    EXPECT_EQ(ProgressLine::ForStderr(), nullptr) << "progress must never go to a pipe";
  }
  close(p[0]);
  close(p[1]);

  int master = posix_openpt(O_RDWR | O_NOCTTY);
  ASSERT_GE(master, 0);
  ASSERT_EQ(grantpt(master), 0);
  ASSERT_EQ(unlockpt(master), 0);
  int slave = open(ptsname(master), O_RDWR | O_NOCTTY);
  ASSERT_GE(slave, 0);
  {
    StderrRedirect to_tty(slave);
    setenv("TERM", "xterm", 1);
    setenv("DROVER_PROGRESS", "0", 1);
    EXPECT_EQ(ProgressLine::ForStderr(), nullptr) << "DROVER_PROGRESS=0 turns it off";
    unsetenv("DROVER_PROGRESS");
    auto line = ProgressLine::ForStderr();
    ASSERT_NE(line, nullptr);
    line->Show("on a terminal");
  }
  char buf[256];
  ssize_t n = read(master, buf, sizeof(buf));
  ASSERT_GT(n, 0);
  // The line and, when it was destroyed, its erasure.
  EXPECT_TRUE(absl::StrContains(std::string(buf, n), "\ron a terminal\033[K"))
      << std::string(buf, n);
  close(slave);
  close(master);
}

}  // namespace
}  // namespace drover
