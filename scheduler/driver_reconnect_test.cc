// Driver jobs across a scheduler restart (issue 19 item 4, step 1): the recovered core
// keeps a RUNNING driver job RUNNING for its driver to open its session again, and
// fails it once SchedulerOptions::driver_reconnect passed without; a driver just
// registered has as long to open its first session. On a FakeClock.
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "scheduler/scheduler_core.h"
#include "scheduler/state_store.h"
#include "scheduler/testing/core_fakes.h"
#include "tests/util/test_util.h"

namespace drover {
namespace {

TEST(DriverReconnectTest, ADriverJobStandsAcrossARestartUntilItsDriverIsLate) {
  FakeClock clock;
  std::unique_ptr<StateStore> backing = NewMemoryStateStore();
  auto start = [&] {
    SchedulerOptions o;
    o.clock = &clock;
    o.node_timeout = absl::Hours(1);
    o.driver_reconnect = absl::Seconds(60);
    auto core = std::make_unique<SchedulerCore>(o, std::make_unique<testing::SharedStore>(backing.get()),
                                                std::make_unique<testing::FakeAgents>());
    EXPECT_TRUE(core->Start().ok());
    return core;
  };
  auto state = [&](SchedulerCore& core, const std::string& job) {
    auto info = core.GetJob(job, 0, absl::ZeroDuration());
    return info.ok() ? *info : proto::JobInfo();
  };
  auto core = start();
  proto::RegisterDriverRequest req;
  req.set_request_id("back");
  auto back = core->RegisterDriver(req);
  req.set_request_id("late");
  auto late = core->RegisterDriver(req);
  ASSERT_TRUE(back.ok() && late.ok());
  core.reset();  // the scheduler goes away

  core = start();
  EXPECT_EQ(state(*core, *back).state(), proto::RUNNING) << state(*core, *back).reason();
  EXPECT_EQ(state(*core, *late).state(), proto::RUNNING) << state(*core, *late).reason();
  core->DriverAttached(*back);
  clock.Advance(absl::Seconds(30));
  EXPECT_EQ(state(*core, *late).state(), proto::RUNNING);
  clock.Advance(absl::Seconds(31));
  ASSERT_TRUE(testing::WaitFor([&] { return state(*core, *late).state() == proto::FAILED; }))
      << state(*core, *late).reason();
  EXPECT_TRUE(absl::StrContains(state(*core, *late).reason(), "did not reconnect"))
      << state(*core, *late).reason();
  EXPECT_EQ(state(*core, *back).state(), proto::RUNNING);
}

// A driver that registers and never opens its session (it exited, or lost the scheduler,
// between the two) does not leave its job RUNNING for ever: it fails once
// driver_reconnect has passed, saying so; a driver that attached stays.
TEST(DriverReconnectTest, ADriverThatNeverOpensItsSessionFailsAfterTheDeadline) {
  FakeClock clock;
  SchedulerOptions o;
  o.clock = &clock;
  o.node_timeout = absl::Hours(1);
  o.driver_reconnect = absl::Seconds(60);
  SchedulerCore core(o, NewMemoryStateStore(), std::make_unique<testing::FakeAgents>());
  ASSERT_TRUE(core.Start().ok());
  auto state = [&](const std::string& job) {
    auto info = core.GetJob(job, 0, absl::ZeroDuration());
    return info.ok() ? *info : proto::JobInfo();
  };
  proto::RegisterDriverRequest req;
  req.set_request_id("attached");
  auto attached = core.RegisterDriver(req);
  req.set_request_id("silent");
  auto silent = core.RegisterDriver(req);
  ASSERT_TRUE(attached.ok() && silent.ok());
  core.DriverAttached(*attached);
  clock.Advance(absl::Seconds(30));
  EXPECT_EQ(state(*silent).state(), proto::RUNNING);
  clock.Advance(absl::Seconds(31));
  ASSERT_TRUE(testing::WaitFor([&] { return state(*silent).state() == proto::FAILED; }))
      << state(*silent).reason();
  EXPECT_TRUE(absl::StrContains(state(*silent).reason(), "did not open its session"))
      << state(*silent).reason();
  EXPECT_EQ(state(*attached).state(), proto::RUNNING) << state(*attached).reason();
}

}  // namespace
}  // namespace drover
