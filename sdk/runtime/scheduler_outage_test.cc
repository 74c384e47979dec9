// SchedulerOutage's lines under concurrent callers: one "away" and one "back" per
// outage, in the order of the state changes (never a "back" before its "away").
#include "sdk/runtime/scheduler_outage.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace drover::internal {
namespace {

TEST(SchedulerOutageTest, OneAwayAndOneBackPerOutage) {
  std::vector<std::string> lines;
  SchedulerOutage outage("10.0.0.1:1", [&](const std::string& l) { lines.push_back(l); });
  outage.Back();  // nothing was told: nothing to say
  outage.Away(absl::UnavailableError("connection refused"), "job j-1");
  outage.Away(absl::DeadlineExceededError("late"), "actor a-1");
  EXPECT_TRUE(outage.away());
  outage.Back();
  outage.Back();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_TRUE(absl::StrContains(lines[0], "does not answer (connection refused); job j-1"))
      << lines[0];
  EXPECT_TRUE(absl::StrContains(lines[1], "is back")) << lines[1];
}

// Regression: Away and Back told their lines after releasing the lock, so a caller
// preempted between its state change and its line let another caller's later line
// out first ("back" printed before its "away"). Many threads flipping the state as
// fast as they can make that window likely; the lines must still alternate.
TEST(SchedulerOutageTest, LinesComeOutInTheOrderOfTheStateChanges) {
  absl::Mutex mu;
  std::vector<bool> told;  // true: an "away" line
  SchedulerOutage outage("10.0.0.1:1", [&](const std::string& l) {
    // A sink that yields widens the window in which another caller can overtake.
    std::this_thread::yield();
    absl::MutexLock lock(&mu);
    told.push_back(absl::StrContains(l, "does not answer"));
  });
  constexpr int kThreads = 8;
  constexpr int kRounds = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&outage, t] {
      for (int i = 0; i < kRounds; ++i) {
        if ((i + t) % 2 == 0) {
          outage.Away(absl::UnavailableError("down"), "a call");
        } else {
          outage.Back();
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  absl::MutexLock lock(&mu);
  ASSERT_FALSE(told.empty());
  int disorder = 0;
  size_t first = told.size();
  for (size_t i = 0; i < told.size(); ++i) {
    if (told[i] != (i % 2 == 0)) {
      ++disorder;
      if (first == told.size()) first = i;
    }
  }
  EXPECT_EQ(disorder, 0) << "of " << told.size() << " lines, " << disorder
                         << " out of order, the first at line " << first;
}

}  // namespace
}  // namespace drover::internal
