// OwnerCores torn down with an actor call in flight while the loop still runs handlers:
// the cores stop before the loop, and the loop stops before either goes, so the close
// of the actor's connection, handled while the submitter shuts down, finds its actor
// client alive (run under ASan, members destroyed in declaration order instead are a
// heap-use-after-free in ActorClient::ConnectionClosed), and nothing hangs.
#include "sdk/runtime/owner_cores.h"

#include <sys/socket.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <typeinfo>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "proto/task.pb.h"
#include "sdk/runtime/object_table.h"
#include "sdk/runtime/testing/fake_seams.h"

namespace drover::internal {
namespace {

using testing::Answer;
using testing::FakeAgents;
using testing::FakeScheduler;
using testing::FakeWorkerConnector;
using testing::WaitFor;
using testing::kTestActorFactory;
using testing::kTestActorMethod;
using testing::LoopHolder;
using testing::TestIdentity;
using testing::RegisterTestActor;

constexpr absl::Duration kWait = absl::Seconds(10);


// The scheduler fake, with a hook run when the submitter's Shutdown cancels its calls.
class HookedScheduler : public FakeScheduler {
 public:
  void CancelAll() override {
    if (on_cancel_all) on_cancel_all();
    FakeScheduler::CancelAll();
  }
  std::function<void()> on_cancel_all;
};

TEST(OwnerCoresTest, DestroyedWithACallInFlightTheCoresStopBeforeTheLoop) {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kAbort);
  RegisterTestActor();
  ObjectTable table;
  HookedScheduler scheduler;
  FakeWorkerConnector workers;
  workers.SetPolicy([](const proto::TaskSpec&) { return Answer::kHold; });
  FakeAgents agents(&workers);
  std::atomic<int> ids{0};
  LoopHolder holder;
  absl::Notification close_handled;
  absl::Cleanup let_go_at_end = [&] { holder.LetGo(); };
  auto cores = std::make_unique<OwnerCores>(
      TaskSubmitter::Deps{TestIdentity(&ids), &scheduler, &workers, &agents, &table, Clock::Real()},
      ActorClient::Deps{TestIdentity(&ids), &scheduler, &workers, &agents, &table, Clock::Real(),
                        "head:7000"});
  std::shared_ptr<ActorState> a = cores->actors().Create(kTestActorFactory, CallOptions{}, {});
  std::shared_ptr<RefState> call = cores->actors().Call(a, kTestActorMethod, CallOptions{}, {});
  ASSERT_TRUE(workers.Worker(0)->WaitReceived(1, kWait));  // in flight, held
  // The loop's thread is held until the submitter shuts down, after the actor client
  // did: the actor connection's close then waits for the loop.
  ASSERT_TRUE(holder.Hold(cores->loop(), kWait));
  ConnectionLoop* loop = &cores->loop();
  scheduler.on_cancel_all = [&] {
    // The loop goes on and handles the actor connection's close (only the blocker's
    // connection is left watched), while the teardown is still in the submitter.
    holder.LetGo();
    if (WaitFor([&] { return loop->watched() == 1; }, kWait)) close_handled.Notify();
  };
  cores.reset();
  EXPECT_TRUE(close_handled.HasBeenNotified());
  ASSERT_TRUE(table.WaitDone(call, absl::Now() + kWait));
  ObjectTable::Outcome o = table.Read(call);
  ASSERT_EQ(o.state, RefState::State::kFailed);
  EXPECT_EQ(o.error.code(), absl::StatusCode::kCancelled) << o.error;
  EXPECT_TRUE(absl::StrContains(o.error.message(), "drover::Shutdown was called")) << o.error;
}

}  // namespace
}  // namespace drover::internal
