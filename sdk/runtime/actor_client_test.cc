// ActorClient on fakes (testing/fake_seams.h): a fake scheduler keeps actor records,
// fake actor workers at the far end of socketpairs answer calls. Creation, call order,
// arguments holding calls back, deaths, restarts and kills, in milliseconds.
#include "sdk/runtime/actor_client.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <typeinfo>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/cleanup/cleanup.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdk/runtime/connection_loop.h"
#include "sdk/runtime/object_table.h"
#include "sdk/runtime/testing/fake_seams.h"

namespace drover::internal {
namespace {

using testing::Answer;
using testing::FakeAgents;
using testing::FakeScheduler;
using testing::FakeWorker;
using testing::FakeWorkerConnector;
using testing::WaitFor;
using testing::kTestActorFactory;
using testing::kTestActorMethod;
using testing::LoopHolder;
using testing::RegisterTestActor;
using ::testing::HasSubstr;

constexpr absl::Duration kWait = absl::Seconds(10);


class ActorClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kAbort);
    RegisterTestActor();
    workers_.SetPolicy([this](const proto::TaskSpec&) {
      return hold_.load() ? Answer::kHold : Answer::kReply;
    });
    OwnerIdentity id = testing::TestIdentity(&ids_);
    client_ = std::make_unique<ActorClient>(ActorClient::Deps{
        std::move(id), &scheduler_, &workers_, &agents_, &table_, Clock::Real()});
  }

  std::shared_ptr<ActorState> Create(CallOptions options = {}) {
    return client_->Create(kTestActorFactory, options, {});
  }
  std::shared_ptr<RefState> Call(const std::shared_ptr<ActorState>& a, const std::string& name = "",
                                 std::vector<TaskArgument> args = {}) {
    CallOptions o;
    o.name = name;
    return client_->Call(a, kTestActorMethod, o, std::move(args));
  }
  ObjectTable::Outcome Wait(const std::shared_ptr<RefState>& ref) {
    EXPECT_TRUE(table_.WaitDone(ref, absl::Now() + kWait)) << ref->id << " not done";
    return table_.Read(ref);
  }
  std::string Value(const std::shared_ptr<RefState>& ref) {
    ObjectTable::Outcome o = Wait(ref);
    if (o.state != RefState::State::kReady) return absl::StrCat("failed: ", o.error.ToString());
    return *o.value.inline_bytes;
  }
  absl::Status Error(const std::shared_ptr<RefState>& ref) {
    ObjectTable::Outcome o = Wait(ref);
    return o.state == RefState::State::kFailed ? o.error : absl::OkStatus();
  }
  std::vector<std::string> Names(const std::shared_ptr<FakeWorker>& w) {
    std::vector<std::string> names;
    for (const auto& s : w->Received()) names.push_back(s.name());
    return names;
  }

  ObjectTable table_;
  FakeScheduler scheduler_;
  FakeWorkerConnector workers_;
  FakeAgents agents_{&workers_};
  std::atomic<bool> hold_{false};
  std::atomic<int> ids_{0};
  std::unique_ptr<ActorClient> client_;
};

TEST_F(ActorClientTest, CreationAsksTheSchedulerWithTheFactoryShapeAndRestarts) {
  CallOptions o;
  o.max_restarts = 2;
  o.resources.cpus = 2;
  o.name = "counter";
  std::shared_ptr<ActorState> a = Create(o);
  ASSERT_TRUE(client_->WaitReady(a, kWait).ok());
  std::vector<proto::CreateActorRequest> c = scheduler_.Creations();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].job_id(), "job1");
  EXPECT_EQ(c[0].owner(), "job1/42@n1");
  EXPECT_EQ(c[0].creation().actor_id(), a->id);
  EXPECT_EQ(c[0].creation().factory(), "MakeCounter");
  EXPECT_EQ(c[0].creation().name(), "counter");
  EXPECT_EQ(c[0].max_restarts(), 2);
  EXPECT_EQ(c[0].shape().cpus(), 2);
  EXPECT_EQ(c[0].package().hash(), "pkg-hash");
  EXPECT_EQ(c[0].request_id(), a->id);
}

TEST_F(ActorClientTest, CallRunsOnTheActorsWorker) {
  std::shared_ptr<ActorState> a = Create();
  std::shared_ptr<RefState> r = Call(a);
  EXPECT_EQ(Value(r), "ok:Counter::Add");
  std::shared_ptr<FakeWorker> w = workers_.Worker(0);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->actor_id, a->id);
  EXPECT_EQ(w->lease_id, "");
}

TEST_F(ActorClientTest, CallsRunInTheOrderTheyWereMade) {
  std::shared_ptr<ActorState> a = Create();
  std::vector<std::shared_ptr<RefState>> refs;
  std::vector<std::string> want;
  for (int i = 0; i < 30; ++i) {
    want.push_back(absl::StrCat("call-", i));
    refs.push_back(Call(a, want.back()));
  }
  for (auto& r : refs) EXPECT_EQ(Value(r), "ok:Counter::Add");
  ASSERT_EQ(workers_.Workers().size(), 1u);  // one connection for all of them
  EXPECT_EQ(Names(workers_.Worker(0)), want);
}

TEST_F(ActorClientTest, CallWaitingForAnArgumentHoldsBackTheCallsAfterIt) {
  std::shared_ptr<ActorState> a = Create();
  ASSERT_EQ(Value(Call(a, "warm")), "ok:Counter::Add");
  std::shared_ptr<RefState> dep = table_.NewPending("job1.dep");
  TaskArgument arg;
  arg.ref = dep;
  std::shared_ptr<RefState> first = Call(a, "first", {arg});
  std::shared_ptr<RefState> second = Call(a, "second");
  // A call is sent (or held) within Call itself: both wait here, none went out.
  EXPECT_EQ(client_->CallCounts(a), (std::pair<size_t, size_t>{2, 0}));
  EXPECT_EQ(workers_.Worker(0)->Received().size(), 1u);  // only "warm"
  EXPECT_EQ(table_.Read(second).state, RefState::State::kPending);
  table_.Complete(dep, ObjectValue{std::make_shared<const std::string>("v"), std::nullopt, {}});
  EXPECT_EQ(Value(second), "ok:Counter::Add");
  EXPECT_EQ(Value(first), "ok:Counter::Add");
  EXPECT_EQ(Names(workers_.Worker(0)), (std::vector<std::string>{"warm", "first", "second"}));
}

TEST_F(ActorClientTest, FailedArgumentFailsOnlyItsCall) {
  std::shared_ptr<ActorState> a = Create();
  TaskArgument bad;
  bad.ref = table_.NewFailed("job1.bad", absl::NotFoundError("gone"));
  std::shared_ptr<RefState> first = Call(a, "first", {bad});
  std::shared_ptr<RefState> second = Call(a, "second");
  absl::Status s = Error(first);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "argument 1 of first failed: gone");
  EXPECT_EQ(Value(second), "ok:Counter::Add");
}

TEST_F(ActorClientTest, UnregisteredMethodFailsNamingTheActor) {
  std::shared_ptr<ActorState> a = Create();
  std::shared_ptr<RefState> r = client_->Call(a, "no-such-key", CallOptions{}, {});
  absl::Status s = Error(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr(a->id));
  EXPECT_THAT(std::string(s.message()), HasSubstr("not registered"));
}

TEST_F(ActorClientTest, UnregisteredFactoryMakesADeadActor) {
  std::shared_ptr<ActorState> a = client_->Create("no-such-factory", CallOptions{}, {});
  absl::Status s = Error(Call(a));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("not registered as an actor factory"));
  EXPECT_TRUE(scheduler_.Creations().empty());
}

TEST_F(ActorClientTest, CreationThatFailsFailsTheQueuedCalls) {
  scheduler_.SetCreateError(absl::FailedPreconditionError("job job1 has ended"));
  std::shared_ptr<ActorState> a = Create();
  absl::Status s = Error(Call(a));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("cannot create actor " + a->id));
  EXPECT_THAT(std::string(s.message()), HasSubstr("job job1 has ended"));
  EXPECT_EQ(scheduler_.Creations().size(), 1u);  // not an outage: asked once
}

TEST_F(ActorClientTest, ACreationWaitsForASchedulerThatIsAwayAndGoesOnWhenItAnswers) {
  scheduler_.SetCreateError(absl::UnavailableError("the head is away"), /*times=*/2);
  std::shared_ptr<ActorState> a = Create();
  EXPECT_EQ(Value(Call(a)), "ok:Counter::Add");
  EXPECT_EQ(scheduler_.Creations().size(), 3u);
}

// The driver's session, actor calls and lease requests all notice a scheduler restart:
// the user reads one "away" and one "back" line for it, not one pair per part.
TEST_F(ActorClientTest, AnOutageIsToldOnceWhoeverNoticesIt) {
  absl::Mutex mu;
  std::vector<std::string> lines;
  SchedulerOutage outage("head:7000", [&](const std::string& line) {
    absl::MutexLock l(&mu);
    lines.push_back(line);
  });
  OwnerIdentity id = testing::TestIdentity(&ids_, "abcd9999", "job1/44@n1");
  ActorClient client(ActorClient::Deps{std::move(id), &scheduler_, &workers_, &agents_, &table_,
                                       Clock::Real(), "head:7000", &outage});
  // The session noticed first (as runtime.cc's session thread tells it).
  outage.Away(absl::UnavailableError("Socket closed"), "job job1");
  scheduler_.SetCreateError(absl::UnavailableError("the head is away"), /*times=*/4);
  std::shared_ptr<ActorState> a = client.Create(kTestActorFactory, CallOptions{}, {});
  std::shared_ptr<ActorState> b = client.Create(kTestActorFactory, CallOptions{}, {});
  EXPECT_EQ(Value(client.Call(a, kTestActorMethod, CallOptions{}, {})), "ok:Counter::Add");
  EXPECT_EQ(Value(client.Call(b, kTestActorMethod, CallOptions{}, {})), "ok:Counter::Add");
  outage.Back();  // the session attached again after the actor calls were answered
  client.Shutdown();
  absl::MutexLock l(&mu);
  ASSERT_EQ(lines.size(), 2u) << absl::StrJoin(lines, "\n");
  EXPECT_THAT(lines[0], HasSubstr("the scheduler at head:7000 does not answer (Socket closed)"));
  EXPECT_EQ(lines[1], "the scheduler at head:7000 is back");
}

TEST_F(ActorClientTest, ACreationGivesUpAfterTheSchedulerHasBeenAwayAMinute) {
  FakeClock clock;
  OwnerIdentity id = testing::TestIdentity(&ids_, "abcd5678", "job1/43@n1");
  ActorClient client(ActorClient::Deps{std::move(id), &scheduler_, &workers_, &agents_, &table_,
                                       &clock, "head:7000"});
  scheduler_.SetCreateError(absl::UnavailableError("the head is away"));
  std::shared_ptr<ActorState> a = client.Create(kTestActorFactory, CallOptions{}, {});
  std::shared_ptr<RefState> ref = client.Call(a, kTestActorMethod, CallOptions{}, {});
  // Fake time moves a second per step; the creation gives up once a minute has passed.
  const absl::Time real_deadline = absl::Now() + kWait;
  while (!table_.WaitDone(ref, absl::Now() + absl::Milliseconds(5)) && absl::Now() < real_deadline) {
    clock.Advance(absl::Seconds(1));
  }
  absl::Status s = Error(ref);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), HasSubstr("the scheduler at head:7000 has not answered for 1m"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("the head is away"));
  EXPECT_GE(scheduler_.Creations().size(), 3u);
  EXPECT_LE(clock.Now() - absl::FromUnixSeconds(1'000'000'000), absl::Seconds(70));
  client.Shutdown();
}

// An actor creation that gives up ends no outage: the session, still waiting, tells no
// second "away" line, and the one "back" line comes when the scheduler answers.
TEST_F(ActorClientTest, ACreationThatGivesUpLeavesTheOutageToldOnce) {
  absl::Mutex mu;
  std::vector<std::string> lines;
  SchedulerOutage outage("head:7000", [&](const std::string& line) {
    absl::MutexLock l(&mu);
    lines.push_back(line);
  });
  FakeClock clock;
  OwnerIdentity id = testing::TestIdentity(&ids_, "abcd4321", "job1/45@n1");
  ActorClient client(ActorClient::Deps{std::move(id), &scheduler_, &workers_, &agents_, &table_,
                                       &clock, "head:7000", &outage});
  scheduler_.SetCreateError(absl::UnavailableError("the head is away"));
  std::shared_ptr<ActorState> a = client.Create(kTestActorFactory, CallOptions{}, {});
  std::shared_ptr<RefState> ref = client.Call(a, kTestActorMethod, CallOptions{}, {});
  const absl::Time real_deadline = absl::Now() + kWait;
  while (!table_.WaitDone(ref, absl::Now() + absl::Milliseconds(5)) && absl::Now() < real_deadline) {
    clock.Advance(absl::Seconds(1));
  }
  EXPECT_EQ(Error(ref).code(), absl::StatusCode::kUnavailable);
  // The session is still waiting for the same outage.
  outage.Away(absl::UnavailableError("Socket closed"), "job job1");
  outage.Back();
  client.Shutdown();
  absl::MutexLock l(&mu);
  ASSERT_EQ(lines.size(), 2u) << absl::StrJoin(lines, "\n");
  EXPECT_THAT(lines[0], HasSubstr("does not answer"));
  EXPECT_EQ(lines[1], "the scheduler at head:7000 is back");
}

TEST_F(ActorClientTest, CallsInFlightFailWithTheCauseAndLaterCallsGoToTheRestartedActor) {
  std::shared_ptr<ActorState> a = Create();
  hold_ = true;
  std::shared_ptr<RefState> lost = Call(a, "lost");
  std::shared_ptr<FakeWorker> w = workers_.Worker(0);
  ASSERT_TRUE(w->WaitReceived(1));
  // The scheduler restarts it elsewhere, then its old worker's connection breaks.
  proto::ActorInfo info = *scheduler_.Actor(a->id);
  info.set_state(proto::ACTOR_ALIVE);
  info.set_reason("its worker was killed by SIGKILL");
  info.set_unix_path("actor:restarted");
  scheduler_.SetActor(info);
  w->Die();
  absl::Status s = Error(lost);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), absl::StrCat("actor ", a->id,
                                      " died while running lost: its worker was killed by SIGKILL"));
  hold_ = false;
  EXPECT_EQ(Value(Call(a, "after")), "ok:Counter::Add");
  ASSERT_EQ(workers_.Workers().size(), 2u);
  EXPECT_EQ(Names(workers_.Worker(1)), (std::vector<std::string>{"after"}));
}

TEST_F(ActorClientTest, CallsOnADeadActorFailWithItsReason) {
  std::shared_ptr<ActorState> a = Create();
  ASSERT_EQ(Value(Call(a)), "ok:Counter::Add");
  proto::ActorInfo info = *scheduler_.Actor(a->id);
  info.set_state(proto::ACTOR_DEAD);
  info.set_reason("it ran out of restarts (exit code 1)");
  scheduler_.SetActor(info);
  workers_.Worker(0)->Die();
  ASSERT_TRUE(WaitFor([&] {
    absl::Status s = client_->WaitDead(a, absl::Milliseconds(1));
    return s.code() == absl::StatusCode::kFailedPrecondition;
  }));
  absl::Status s = Error(Call(a));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr(absl::StrCat("actor ", a->id, " (")));
  EXPECT_THAT(std::string(s.message()), HasSubstr("is dead: it ran out of restarts (exit code 1)"));
}

TEST_F(ActorClientTest, KillMakesTheHandleDeadAtOnce) {
  std::shared_ptr<ActorState> a = Create();
  ASSERT_TRUE(client_->WaitReady(a, kWait).ok());
  ASSERT_TRUE(client_->Kill(a).ok());
  ASSERT_EQ(scheduler_.Kills().size(), 1u);
  EXPECT_EQ(scheduler_.Kills()[0].actor_id(), a->id);
  absl::Status s = Error(Call(a));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("is dead: killed by drover::Kill"));
  EXPECT_EQ(workers_.connects(), 0);
}

TEST_F(ActorClientTest, LookupFindsANamedActor) {
  CallOptions o;
  o.name = "counter";
  std::shared_ptr<ActorState> a = Create(o);
  ASSERT_TRUE(client_->WaitReady(a, kWait).ok());
  absl::StatusOr<std::shared_ptr<ActorState>> found = client_->Lookup("counter", kWait);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->get(), a.get());  // one state per actor in this process
  EXPECT_EQ(client_->Lookup("nobody", absl::Milliseconds(10)).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(ActorClientTest, WaitReadyTimesOutNamingWhyTheActorWaits) {
  proto::ActorInfo info;
  info.set_actor_id("actor-x");
  info.set_state(proto::ACTOR_PENDING);
  info.set_pending_reason("no node has 8 GPUs");
  scheduler_.SetActor(info);
  std::shared_ptr<ActorState> a = client_->FromId("actor-x");
  absl::Status s = client_->WaitReady(a, absl::Milliseconds(50));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s.message(), "actor actor-x is not ready: no node has 8 GPUs");
}

TEST_F(ActorClientTest, ShutdownFailsCallsInFlight) {
  std::shared_ptr<ActorState> a = Create();
  hold_ = true;
  std::shared_ptr<RefState> r = Call(a);
  ASSERT_TRUE(workers_.Worker(0)->WaitReceived(1));
  client_->Shutdown();
  absl::Status s = Error(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(s.message(), "drover::Shutdown was called");
}

// Connections to fake workers; once armed, each Connect waits until the test lets it go.
class GatedConnector : public WorkerConnector {
 public:
  explicit GatedConnector(WorkerConnector* inner) : inner_(inner) {}
  absl::StatusOr<std::unique_ptr<FramedSocket>> Connect(const std::string& node_id,
                                                       const std::string& unix_path,
                                                       const std::string& tcp_address,
                                                       const std::string& lease_id,
                                                       const std::string& actor_id) override {
    if (armed.load()) {
      if (!entered.HasBeenNotified()) entered.Notify();
      gate.WaitForNotification();
    }
    return inner_->Connect(node_id, unix_path, tcp_address, lease_id, actor_id);
  }
  std::atomic<bool> armed{false};
  absl::Notification entered;
  absl::Notification gate;

 private:
  WorkerConnector* const inner_;
};

// An actor's Connect that finishes while Shutdown runs, with the process's loop
// stopped right after the cores (as Runtime::Shutdown does) and before it handled
// anything of that connection: the call waiting for it fails naming the shutdown
// instead of being sent on a connection nobody reads again, and calls made after
// Shutdown fail at once, on that actor, on an actor connected before (its shut
// connection still listed) and on one never connected.
TEST_F(ActorClientTest, CallsRacingShutdownFailNamingItAndNoneIsLeftInFlight) {
  GatedConnector gated(&workers_);
  LoopHolder holder;
  std::vector<std::unique_ptr<FramedSocket>> probes;  // watched until the loop stops
  ConnectionLoop loop;  // after the sockets it watches: it goes first
  std::thread shutdown, stopper;
  absl::Cleanup at_end = [&] {
    if (!gated.gate.HasBeenNotified()) gated.gate.Notify();
    holder.LetGo();
    if (shutdown.joinable()) shutdown.join();
    if (stopper.joinable()) stopper.join();
  };
  OwnerIdentity id = testing::TestIdentity(&ids_, "abcd8888", "job1/46@n1");
  auto client = std::make_unique<ActorClient>(ActorClient::Deps{
      std::move(id), &scheduler_, &gated, &agents_, &table_, Clock::Real(), "head:7000",
      nullptr, &loop});
  auto call = [&](const std::shared_ptr<ActorState>& a) {
    return client->Call(a, kTestActorMethod, CallOptions{}, {});
  };
  // Connected before Shutdown.
  std::shared_ptr<ActorState> before = client->Create(kTestActorFactory, CallOptions{}, {});
  ASSERT_EQ(Value(call(before)), "ok:Counter::Add");
  // Its connect waits at the gate.
  std::shared_ptr<ActorState> racing = client->Create(kTestActorFactory, CallOptions{}, {});
  ASSERT_TRUE(client->WaitReady(racing, kWait).ok());
  hold_ = true;
  gated.armed = true;
  std::shared_ptr<RefState> queued = call(racing);
  ASSERT_TRUE(gated.entered.WaitForNotificationWithTimeout(kWait));
  // The loop's thread is held from here until it is stopped.
  ASSERT_TRUE(holder.Hold(loop, kWait));
  // An actor whose creation waits for an away scheduler: Shutdown ends that wait, which
  // tells the test that Shutdown has begun.
  scheduler_.SetCreateError(absl::UnavailableError("the scheduler restarts"));
  std::shared_ptr<ActorState> creating = client->Create(kTestActorFactory, CallOptions{}, {});
  shutdown = std::thread([&] { client->Shutdown(); });
  ASSERT_TRUE(WaitFor([&] {
    return client->WaitReady(creating, absl::Milliseconds(1)).code() ==
           absl::StatusCode::kCancelled;
  }, kWait));
  gated.gate.Notify();  // the connect finishes during Shutdown
  shutdown.join();
  // Stop the loop before it reads anything more: Watch refuses once Stop has begun.
  stopper = std::thread([&] { loop.Stop(); });
  ASSERT_TRUE(WaitFor([&] {
    int p[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p) != 0) return false;
    ::close(p[1]);
    probes.push_back(std::make_unique<FramedSocket>(p[0]));
    return !loop.Watch(probes.back().get(), "a probe", [](std::string_view) {},
                       [](const absl::Status&) {})
                .ok();
  }, kWait));
  holder.LetGo();
  stopper.join();

  absl::Status s = Error(queued);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("drover::Shutdown was called"));
  EXPECT_EQ(client->CallCounts(racing), (std::pair<size_t, size_t>{0, 0}));
  for (const std::shared_ptr<ActorState>& a : {racing, before, client->FromId("actor-never")}) {
    std::shared_ptr<RefState> late = call(a);
    ObjectTable::Outcome o = table_.Read(late);  // at once: no wait
    ASSERT_EQ(o.state, RefState::State::kFailed) << "a call after Shutdown on " << a->id;
    EXPECT_EQ(o.error.code(), absl::StatusCode::kCancelled) << o.error;
    EXPECT_THAT(std::string(o.error.message()), HasSubstr("drover::Shutdown was called"));
    EXPECT_EQ(client->CallCounts(a), (std::pair<size_t, size_t>{0, 0})) << a->id;
  }
}

// The client's threads do not grow with its actor connections: one loop reads them all
// (a reader thread each would add 31 here).
TEST_F(ActorClientTest, ThreadsDoNotGrowWithActorConnections) {
  testing::SilentWorkerConnector silent;
  OwnerIdentity id = testing::TestIdentity(&ids_, "abcd7777", "job1/45@n1");
  ActorClient client(ActorClient::Deps{std::move(id), &scheduler_, &silent, &agents_, &table_,
                                       Clock::Real(), "head:7000"});
  std::vector<std::shared_ptr<RefState>> calls;
  auto connect_one = [&] {
    std::shared_ptr<ActorState> a = client.Create(kTestActorFactory, CallOptions{}, {});
    calls.push_back(client.Call(a, kTestActorMethod, CallOptions{}, {}));  // connects it
  };
  connect_one();
  ASSERT_TRUE(WaitFor([&] { return silent.connects() == 1; }));
  // Its creation and connection threads end once it is connected.
  int last = -1;
  ASSERT_TRUE(WaitFor([&] {
    const int now = testing::ThreadCount();
    const bool steady = now == last;
    last = now;
    return steady;
  }));
  const int base = testing::ThreadCount();
  for (int i = 1; i < 32; ++i) connect_one();
  ASSERT_TRUE(WaitFor([&] { return silent.connects() == 32; }, kWait));
  EXPECT_TRUE(WaitFor([&] { return testing::ThreadCount() <= base + 2; }))
      << testing::ThreadCount() << " threads, " << base << " with one connection";
  client.Shutdown();
  for (auto& r : calls) EXPECT_EQ(table_.Read(r).state, RefState::State::kFailed);
}

}  // namespace
}  // namespace drover::internal
