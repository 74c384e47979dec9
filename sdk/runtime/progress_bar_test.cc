// The loader's progress line: its text, its rate limit and its end, on a fake clock.
#include "sdk/runtime/progress_bar.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace drover::internal {
namespace {

TEST(ProgressBarTest, LineSaysCountRateAndEta) {
  EXPECT_EQ(ProgressBar::Line("data", "items", 1234, 20000, 0), "data: 1234/20000 items (6%)");
  EXPECT_EQ(ProgressBar::Line("data", "items", 1000, 3000, 500), "data: 1000/3000 items (33%)  500 items/s  ETA 4s");
  EXPECT_EQ(ProgressBar::Line("data", "batches", 10, 10, 5), "data: 10/10 batches (100%)  5 batches/s");
}

TEST(ProgressBarTest, RedrawsAtMostTenTimesASecondAndEndsWithANewline) {
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* out = ::open_memstream(&buf, &len);
  ASSERT_NE(out, nullptr);
  FakeClock clock;
  {
    ProgressBar bar("data", "items", 100, out, &clock);
    bar.Update(1);  // first: drawn
    for (int i = 2; i <= 50; ++i) bar.Update(i);  // same instant: not drawn
    clock.Advance(absl::Milliseconds(100));
    bar.Update(60);
    clock.Advance(absl::Milliseconds(100));
    bar.Finish(100);
    bar.Finish(100);
  }
  std::fclose(out);
  const std::string text(buf, len);
  std::free(buf);
  int lines = 0;
  for (char c : text) lines += c == '\r';
  EXPECT_EQ(lines, 3) << text;
  EXPECT_NE(text.find("data: 60/100 items (60%)  600 items/s  ETA 100ms"), std::string::npos) << text;
  EXPECT_NE(text.find("data: 100/100 items (100%)  500 items/s   \n"), std::string::npos) << text;
  EXPECT_EQ(text.back(), '\n');
}

TEST(ProgressBarTest, AutoShowsOnlyOnATerminal) {
  const int fd = ::open("/dev/null", O_WRONLY);
  ASSERT_GE(fd, 0);
  EXPECT_FALSE(ShowProgress(0, fd));
  EXPECT_TRUE(ShowProgress(1, fd));
  EXPECT_FALSE(ShowProgress(2, fd));
  ::close(fd);
  int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  if (master >= 0 && ::grantpt(master) == 0 && ::unlockpt(master) == 0) {
    const int tty = ::open(::ptsname(master), O_WRONLY | O_NOCTTY);
    ASSERT_GE(tty, 0);
    EXPECT_TRUE(ShowProgress(0, tty));
    ::close(tty);
  }
  if (master >= 0) ::close(master);
}

}  // namespace
}  // namespace drover::internal
