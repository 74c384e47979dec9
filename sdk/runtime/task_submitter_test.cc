// TaskSubmitter on fakes (testing/fake_seams.h): a fake scheduler grants leases, fake
// workers at the far end of socketpairs answer tasks as each test says. Submission,
// pipelining depth, retries, lineage, cancel, lease return and failure texts, in
// milliseconds. Absl's deadlock detection aborts on a lock-order inversion.
#include "sdk/runtime/task_submitter.h"

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
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
using ::testing::HasSubstr;

constexpr absl::Duration kWait = absl::Seconds(10);

// The function a lease request is for (its id is "<owner tag>-<function>|<shape>-<n>").
std::string FunctionOf(const proto::RequestLeaseRequest& req) {
  const std::string& id = req.request_id();
  const size_t begin = id.find('-') + 1;
  return id.substr(begin, id.find('|') - begin);
}

// A scheduler that holds every lease request until the test lets one go (answered
// "pending"), and counts the requests it holds per function.
class LeaseGate {
 public:
  absl::Status Hold(const proto::RequestLeaseRequest& req, proto::RequestLeaseReply* reply) {
    const std::string fn = FunctionOf(req);
    absl::MutexLock l(&mu_);
    ++held_[fn];
    max_held_ = std::max(max_held_, Total());
    mu_.Await(absl::Condition(
        +[](LeaseGate* g) ABSL_EXCLUSIVE_LOCKS_REQUIRED(g->mu_) { return g->open_ || g->passes_ > 0; },
        this));
    if (!open_) --passes_;
    --held_[fn];
    reply->set_granted(false);
    reply->set_pending_reason("waiting for 1 CPU");
    return absl::OkStatus();
  }
  // Lets one held request return.
  void PassOne() {
    absl::MutexLock l(&mu_);
    ++passes_;
  }
  // Lets every request return at once, now and later.
  void Open() {
    absl::MutexLock l(&mu_);
    open_ = true;
  }
  int held() {
    absl::MutexLock l(&mu_);
    return Total();
  }
  int max_held() {
    absl::MutexLock l(&mu_);
    return max_held_;
  }
  // Functions with at least one request held now.
  std::set<std::string> Asking() {
    absl::MutexLock l(&mu_);
    std::set<std::string> out;
    for (const auto& [fn, n] : held_) {
      if (n > 0) out.insert(fn);
    }
    return out;
  }

 private:
  int Total() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    int n = 0;
    for (const auto& [fn, k] : held_) n += k;
    return n - passes_;
  }
  absl::Mutex mu_;
  std::map<std::string, int> held_ ABSL_GUARDED_BY(mu_);
  int max_held_ ABSL_GUARDED_BY(mu_) = 0;
  int passes_ ABSL_GUARDED_BY(mu_) = 0;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
};

class TaskSubmitterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kAbort);
    // By default workers answer at once; `hold` makes them keep what they are sent.
    workers_.SetPolicy([this](const proto::TaskSpec& spec) {
      if (die_attempts_below_ > spec.attempt()) return Answer::kDie;
      return hold_.load() ? Answer::kHold : Answer::kReply;
    });
  }

  void Start(Clock* clock = nullptr, ConnectionLoop* loop = nullptr,
             std::function<void()> watched_for_test = nullptr) {
    OwnerIdentity id = testing::TestIdentity(&ids_);
    submitter_ = std::make_unique<TaskSubmitter>(TaskSubmitter::Deps{
        std::move(id), &scheduler_, &workers_, &agents_, &table_,
        clock != nullptr ? clock : Clock::Real(), /*outage=*/nullptr, loop,
        std::move(watched_for_test)});
  }

  // Waits until an idle check has run wholly after this call (what the clock says now).
  void AwaitHousekeeping() {
    const uint64_t seen = submitter_->ProgressForTest().housekeeping_passes;
    ASSERT_TRUE(WaitFor([&] { return submitter_->ProgressForTest().housekeeping_passes >= seen + 2; }));
  }

  std::shared_ptr<TaskRecord> NewTask(const std::string& fn, std::vector<TaskArgument> args = {},
                                      int retries = 0) {
    auto t = std::make_shared<TaskRecord>();
    t->function = fn;
    t->display = fn;
    t->options.max_retries = retries;
    t->retries_left = retries;
    t->args = std::move(args);
    t->result = table_.NewPending(absl::StrCat("job1.abcd1234.r", ++ids_));
    t->return_id = t->result->id;
    return t;
  }

  std::shared_ptr<RefState> Submit(const std::string& fn, std::vector<TaskArgument> args = {},
                                   int retries = 0) {
    std::shared_ptr<TaskRecord> t = NewTask(fn, std::move(args), retries);
    std::shared_ptr<RefState> r = t->result;
    submitter_->Submit(std::move(t));
    return r;
  }

  ObjectTable::Outcome Wait(const std::shared_ptr<RefState>& ref) {
    EXPECT_TRUE(table_.WaitDone(ref, absl::Now() + kWait)) << ref->id << " not done";
    return table_.Read(ref);
  }
  std::string Value(const std::shared_ptr<RefState>& ref) {
    ObjectTable::Outcome o = Wait(ref);
    if (o.state != RefState::State::kReady) return absl::StrCat("failed: ", o.error.ToString());
    return o.value.inline_bytes ? *o.value.inline_bytes : "<stored>";
  }
  absl::Status Error(const std::shared_ptr<RefState>& ref) {
    ObjectTable::Outcome o = Wait(ref);
    return o.state == RefState::State::kFailed ? o.error : absl::OkStatus();
  }
  static TaskArgument RefArg(std::shared_ptr<RefState> ref) {
    TaskArgument a;
    a.ref = std::move(ref);
    return a;
  }
  size_t TotalReceived() {
    size_t n = 0;
    for (const auto& w : workers_.Workers()) n += w->Received().size();
    return n;
  }
  // A fast task, answered at once: the worker's average run time becomes ~1 µs.
  void WarmUp() { ASSERT_EQ(Value(Submit("f")), "ok:f"); }

  // Declared first: refs and tasks of every test point into it.
  ObjectTable table_;
  FakeScheduler scheduler_;
  FakeWorkerConnector workers_;
  FakeAgents agents_{&workers_};
  std::atomic<bool> hold_{false};
  std::atomic<int> die_attempts_below_{0};
  std::atomic<int> ids_{0};
  // For the tests that drive time by hand (Start(&fake_clock_)).
  FakeClock fake_clock_;
  // Last: shut down before the fakes go.
  std::unique_ptr<TaskSubmitter> submitter_;
};

// --- Submission ---

TEST_F(TaskSubmitterTest, SubmittedTaskRunsOnALeasedWorkerAndCompletes) {
  Start();
  std::shared_ptr<RefState> r = Submit("f");
  EXPECT_EQ(Value(r), "ok:f");
  ASSERT_EQ(workers_.Workers().size(), 1u);
  std::vector<proto::TaskSpec> got = workers_.Worker(0)->Received();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].function(), "f");
  EXPECT_EQ(got[0].return_id(), r->id);
  EXPECT_EQ(got[0].attempt(), 0);
  EXPECT_EQ(workers_.Worker(0)->lease_id, "lease-1");
}

TEST_F(TaskSubmitterTest, LeaseRequestNamesTheOwnerJobPackageAndShape) {
  Start();
  ASSERT_EQ(Value(Submit("f")), "ok:f");
  std::vector<proto::RequestLeaseRequest> reqs = scheduler_.LeaseRequests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].job_id(), "job1");
  EXPECT_EQ(reqs[0].owner(), "job1/42@n1");
  EXPECT_EQ(reqs[0].package().hash(), "pkg-hash");
  EXPECT_EQ(reqs[0].shape().cpus(), 1);
  EXPECT_TRUE(absl::StartsWith(reqs[0].request_id(), "abcd1234-")) << reqs[0].request_id();
  EXPECT_GT(reqs[0].wait_ms(), 0);
}

TEST_F(TaskSubmitterTest, NodeAffinityGoesIntoTheLeaseHint) {
  Start();
  std::shared_ptr<TaskRecord> t = NewTask("f");
  t->options.node_id = "n7";
  t->options.soft_affinity = true;
  std::shared_ptr<RefState> r = t->result;
  submitter_->Submit(t);
  ASSERT_EQ(Value(r), "ok:f");
  std::vector<proto::RequestLeaseRequest> reqs = scheduler_.LeaseRequests();
  ASSERT_FALSE(reqs.empty());
  EXPECT_EQ(reqs[0].hint().node_id(), "n7");
  EXPECT_TRUE(reqs[0].hint().soft());
}

TEST_F(TaskSubmitterTest, GrantedLeaseTellsWhereTheNodesAgentIs) {
  Start();
  ASSERT_EQ(Value(Submit("f")), "ok:f");
  EXPECT_EQ(agents_.Noted()["n1"], "agent-n1:1");
}

TEST_F(TaskSubmitterTest, DifferentFunctionsGetWorkersOfTheirOwn) {
  Start();
  hold_ = true;
  std::shared_ptr<RefState> a = Submit("f");
  std::shared_ptr<RefState> b = Submit("g");
  ASSERT_TRUE(WaitFor([&] { return TotalReceived() == 2; }));
  ASSERT_EQ(workers_.Workers().size(), 2u);
  for (const auto& w : workers_.Workers()) {
    std::vector<proto::TaskSpec> got = w->Received();
    ASSERT_EQ(got.size(), 1u);
    w->Release(0, "v-" + got[0].function());
  }
  EXPECT_EQ(Value(a), "v-f");
  EXPECT_EQ(Value(b), "v-g");
}

TEST_F(TaskSubmitterTest, ReadyRefArgumentIsSentInline) {
  Start();
  ObjectValue v;
  v.inline_bytes = std::make_shared<const std::string>("hello");
  std::shared_ptr<RefState> arg = table_.NewReady("job1.x", v);
  ASSERT_EQ(Value(Submit("f", {RefArg(arg)})), "ok:f");
  std::vector<proto::TaskSpec> got = workers_.Worker(0)->Received();
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].args_size(), 1);
  EXPECT_EQ(got[0].args(0).value(), "hello");
}

TEST_F(TaskSubmitterTest, LargeStoredArgumentPrefersItsNode) {
  Start();
  ObjectValue v;
  v.stored = StoredRef{"job1.big", "n3", 2u << 20};
  std::shared_ptr<RefState> arg = table_.NewReady("job1.big", v);
  ASSERT_EQ(Value(Submit("f", {RefArg(arg)})), "ok:f");
  std::vector<proto::RequestLeaseRequest> reqs = scheduler_.LeaseRequests();
  ASSERT_FALSE(reqs.empty());
  EXPECT_EQ(reqs[0].hint().data_bytes().at("n3"), 2u << 20);
  std::vector<proto::TaskSpec> got = workers_.Worker(0)->Received();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].args(0).stored().object_id(), "job1.big");
}

TEST_F(TaskSubmitterTest, TaskWaitsForItsRefArgumentThenRuns) {
  Start();
  std::shared_ptr<RefState> dep = table_.NewPending("job1.dep");
  std::shared_ptr<RefState> r = Submit("f", {RefArg(dep)});
  EXPECT_EQ(scheduler_.LeaseRequests().size(), 0u);  // nothing to run yet
  EXPECT_THAT(table_.PendingReason(r), HasSubstr("argument 1"));
  ObjectValue v;
  v.inline_bytes = std::make_shared<const std::string>("dep-value");
  table_.Complete(dep, v);
  EXPECT_EQ(Value(r), "ok:f");
  EXPECT_EQ(workers_.Worker(0)->Received()[0].args(0).value(), "dep-value");
}

// --- Pipelining depth ---

TEST_F(TaskSubmitterTest, OneTaskAtATimeUntilTheRunTimeIsKnown) {
  Start();
  hold_ = true;
  std::shared_ptr<RefState> a = Submit("f");
  std::shared_ptr<FakeWorker> w = workers_.Worker(0);
  ASSERT_NE(w, nullptr);
  ASSERT_TRUE(w->WaitReceived(1));
  std::shared_ptr<RefState> b = Submit("f");
  // b goes to a second worker (asked for), not behind a on the first.
  ASSERT_TRUE(WaitFor([&] { return TotalReceived() == 2; }));
  EXPECT_EQ(w->Received().size(), 1u);
  EXPECT_EQ(workers_.Workers().size(), 2u);
}

TEST_F(TaskSubmitterTest, FastTasksArePipelinedDeepOnOneWorker) {
  Start();
  WarmUp();
  hold_ = true;
  std::vector<std::shared_ptr<RefState>> refs;
  for (int i = 0; i < 20; ++i) refs.push_back(Submit("f"));
  std::shared_ptr<FakeWorker> w = workers_.Worker(0);
  ASSERT_TRUE(w->WaitReceived(21));
  EXPECT_EQ(w->Held(), 20u);  // all in flight at once, none answered
  EXPECT_EQ(workers_.Workers().size(), 1u);
  EXPECT_EQ(scheduler_.LeaseRequests().size(), 1u);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(w->Release(0, "v"));
  for (auto& r : refs) EXPECT_EQ(Value(r), "v");
}

TEST_F(TaskSubmitterTest, SlowTasksGoOneAtATimeToWhicheverWorkerIsFree) {
  Start();
  hold_ = true;
  std::shared_ptr<RefState> first = Submit("f");
  std::shared_ptr<FakeWorker> w = workers_.Worker(0);
  ASSERT_TRUE(w->WaitReceived(1));
  ASSERT_TRUE(w->Release(0, "v", /*run_us=*/5000));
  ASSERT_EQ(Value(first), "v");
  std::vector<std::shared_ptr<RefState>> refs;
  for (int i = 0; i < 3; ++i) refs.push_back(Submit("f"));
  ASSERT_TRUE(WaitFor([&] { return TotalReceived() == 4; }));
  EXPECT_EQ(w->Received().size(), 2u);  // depth 1 at 5 ms a task
  EXPECT_GE(workers_.Workers().size(), 3u);
  // Its caller does not spin for a result that takes milliseconds.
  EXPECT_EQ(refs[0]->spin_us.load(), 0);
}

TEST_F(TaskSubmitterTest, BytesInFlightPerWorkerAreBounded) {
  Start();
  WarmUp();
  hold_ = true;
  std::vector<std::shared_ptr<RefState>> refs;
  for (int i = 0; i < 3; ++i) {
    TaskArgument a;
    a.value.bytes = std::string(40 * 1024, 'x');
    refs.push_back(Submit("f", {a}));
  }
  ASSERT_TRUE(WaitFor([&] { return TotalReceived() == 4; }));
  // Two of 40 KiB fit under the 64 KiB bound; the third went to another worker.
  EXPECT_EQ(workers_.Worker(0)->Received().size(), 3u);
  EXPECT_EQ(workers_.Workers().size(), 2u);
}

TEST_F(TaskSubmitterTest, AtMostFourLeaseRequestsPerFunctionAreOutstanding) {
  Start();
  // The scheduler holds requests unanswered (not granted, pending).
  scheduler_.SetLeasePolicy([](const proto::RequestLeaseRequest&, proto::RequestLeaseReply* reply) {
    absl::SleepFor(absl::Milliseconds(2));
    reply->set_granted(false);
    reply->set_pending_reason("waiting for 1 CPU");
    return absl::OkStatus();
  });
  std::vector<std::shared_ptr<RefState>> refs;
  for (int i = 0; i < 10; ++i) refs.push_back(Submit("f"));
  ASSERT_TRUE(scheduler_.WaitLeaseRequests(20));
  std::set<std::string> ids;
  for (const auto& r : scheduler_.LeaseRequests()) ids.insert(r.request_id());
  EXPECT_EQ(ids.size(), 4u);  // four requests for ten tasks, each asked again and again
  EXPECT_THAT(table_.PendingReason(refs[9]), HasSubstr("pending: waiting for 1 CPU"));
}

// --- Failures and retries ---

TEST_F(TaskSubmitterTest, TaskIsRetriedOnAnotherWorkerWhenItsWorkerDies) {
  Start();
  die_attempts_below_ = 1;  // attempt 0 kills its worker
  std::shared_ptr<RefState> r = Submit("f", {}, /*retries=*/1);
  EXPECT_EQ(Value(r), "ok:f");
  ASSERT_EQ(workers_.Workers().size(), 2u);
  EXPECT_TRUE(workers_.Worker(0)->dead());
  std::vector<proto::TaskSpec> second = workers_.Worker(1)->Received();
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].attempt(), 1);
}

TEST_F(TaskSubmitterTest, RetriesRunOutAfterMaxRetries) {
  Start();
  die_attempts_below_ = 100;
  std::shared_ptr<RefState> r = Submit("f", {}, /*retries=*/2);
  absl::Status s = Error(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), HasSubstr("no retries are left"));
  std::vector<int> attempts;
  for (const auto& w : workers_.Workers()) {
    for (const auto& spec : w->Received()) attempts.push_back(spec.attempt());
  }
  EXPECT_EQ(attempts, (std::vector<int>{0, 1, 2}));
}

TEST_F(TaskSubmitterTest, WorkerDeathErrorNamesTaskWorkerNodeAndHowItEnded) {
  Start();
  agents_.SetExitText("was killed by SIGKILL; stderr ends with: out of memory");
  die_attempts_below_ = 1;
  absl::Status s = Error(Submit("train_step"));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(),
            "task train_step: its worker worker-of-lease-1 on node n1 died while running it and "
            "no retries are left (SetMaxRetries): the worker was killed by SIGKILL; stderr ends "
            "with: out of memory");
}

TEST_F(TaskSubmitterTest, WorkerDeathWithoutAnExitTextSaysTheConnectionBroke) {
  Start();
  die_attempts_below_ = 1;
  absl::Status s = Error(Submit("f"));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), HasSubstr("died while running it"));
  EXPECT_FALSE(absl::EndsWith(s.message(), "the worker ")) << s.message();
}

TEST_F(TaskSubmitterTest, ErrorReplyFailsTheResultWithTheWorkersMessage) {
  Start();
  hold_ = true;
  std::shared_ptr<RefState> r = Submit("f");
  std::shared_ptr<FakeWorker> w = workers_.Worker(0);
  ASSERT_TRUE(w->WaitReceived(1));
  ASSERT_TRUE(w->Fail(0, absl::StatusCode::kInternal, "task f on node n1 failed: boom"));
  absl::Status s = Error(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(s.message(), "task f on node n1 failed: boom");
  EXPECT_EQ(w->Received().size(), 1u);  // user errors are not retried
}

TEST_F(TaskSubmitterTest, ArgumentThatFailedToEncodeFailsTheTaskBeforeAnyLease) {
  Start();
  TaskArgument a;
  a.error = absl::InvalidArgumentError("cannot encode a Foo");
  absl::Status s = Error(Submit("f", {a}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "argument 1 of f: cannot encode a Foo");
  EXPECT_TRUE(scheduler_.LeaseRequests().empty());
}

TEST_F(TaskSubmitterTest, FailedRefArgumentFailsTheTaskNamingTheArgument) {
  Start();
  std::shared_ptr<RefState> bad = table_.NewFailed("job1.bad", absl::NotFoundError("object gone"));
  absl::Status s = Error(Submit("f", {TaskArgument{}, RefArg(bad)}));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "argument 2 of f failed: object gone");
}

TEST_F(TaskSubmitterTest, LeaseRefusedForGoodFailsQueuedTasksAndTheirDependents) {
  Start();
  scheduler_.SetLeasePolicy([](const proto::RequestLeaseRequest&, proto::RequestLeaseReply*) {
    return absl::FailedPreconditionError("job job1 has ended");
  });
  std::shared_ptr<RefState> a = Submit("f");
  std::shared_ptr<RefState> b = Submit("g", {RefArg(a)});
  std::shared_ptr<RefState> c = Submit("h", {RefArg(b)});
  std::shared_ptr<RefState> d = Submit("k", {RefArg(c)});
  absl::Status sa = Error(a);
  EXPECT_EQ(sa.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(sa.message(), "task f: cannot get a worker: job job1 has ended");
  absl::Status sd = Error(d);
  EXPECT_EQ(sd.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(sd.message()), HasSubstr("argument 1 of k failed: argument 1 of h failed"));
  EXPECT_THAT(std::string(sd.message()), HasSubstr("job job1 has ended"));
}

TEST_F(TaskSubmitterTest, InvalidLeaseRequestFailsTheTaskAtOnce) {
  Start();
  scheduler_.SetLeasePolicy([](const proto::RequestLeaseRequest&, proto::RequestLeaseReply*) {
    return absl::InvalidArgumentError("no node has 64 GPUs");
  });
  absl::Status s = Error(Submit("f"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("no node has 64 GPUs"));
}

TEST_F(TaskSubmitterTest, UnreachableSchedulerIsAskedAgainAfterABackoffOnTheClock) {
  FakeClock& clock = fake_clock_;
  Start(&clock);
  scheduler_.SetLeasePolicy([](const proto::RequestLeaseRequest&, proto::RequestLeaseReply*) {
    return absl::UnavailableError("connection refused");
  });
  std::shared_ptr<RefState> r = Submit("f");
  ASSERT_TRUE(scheduler_.WaitLeaseRequests(1));
  ASSERT_TRUE(WaitFor([&] {
    return absl::StrContains(table_.PendingReason(r), "cannot get a worker: connection refused");
  }));
  // Parked in its back-off on the fake clock: no second request until the clock moves.
  ASSERT_TRUE(WaitFor([&] { return submitter_->ProgressForTest().lease_backoffs >= 1; }));
  EXPECT_EQ(scheduler_.LeaseRequests().size(), 1u);
  clock.Advance(absl::Milliseconds(60));
  EXPECT_TRUE(scheduler_.WaitLeaseRequests(2));
}

TEST_F(TaskSubmitterTest, WorkerThatCannotBeReachedHasItsLeaseReturned) {
  Start();
  workers_.FailNext(1);
  std::shared_ptr<RefState> r = Submit("f");
  EXPECT_EQ(Value(r), "ok:f");
  std::vector<std::pair<std::string, std::string>> returned = scheduler_.Returned();
  ASSERT_EQ(returned.size(), 1u);
  EXPECT_EQ(returned[0].first, "lease-1");
  EXPECT_EQ(returned[0].second, "the owner could not connect to its worker");
  EXPECT_EQ(workers_.Worker(0)->lease_id, "lease-2");
}

// A granted worker that cannot be reached is a failed request: the key backs off (on
// the clock) before asking again, instead of request, grant, connect, return at once.
TEST_F(TaskSubmitterTest, UnreachableGrantedWorkerBacksOffBeforeTheNextRequest) {
  FakeClock& clock = fake_clock_;
  Start(&clock);
  workers_.FailNext(1);
  std::shared_ptr<RefState> r = Submit("f");
  ASSERT_TRUE(WaitFor([&] { return submitter_->ProgressForTest().lease_backoffs >= 1; }));
  EXPECT_EQ(scheduler_.LeaseRequests().size(), 1u);
  EXPECT_THAT(table_.PendingReason(r), HasSubstr("cannot reach worker"));
  clock.Advance(absl::Milliseconds(60));
  EXPECT_EQ(Value(r), "ok:f");
}

// Once the loop reading every worker connection has failed, no grant can be used: the
// queued task fails naming the loop (not asked for again and again), and so do later
// submits.
TEST_F(TaskSubmitterTest, FailedConnectionLoopFailsQueuedAndLaterTasksNamingIt) {
  ConnectionLoop loop;
  Start(nullptr, &loop);
  WarmUp();  // the loop runs
  loop.FailForTest();
  ASSERT_TRUE(WaitFor([&] { return !loop.failure().ok(); }));
  absl::Status s = Error(Submit("f"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("connection loop failed")) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("task f")) << s;
  const size_t asked = scheduler_.LeaseRequests().size();
  absl::Status later = Error(Submit("g"));
  EXPECT_EQ(later.code(), absl::StatusCode::kInternal) << later;
  EXPECT_THAT(std::string(later.message()), HasSubstr("connection loop failed")) << later;
  EXPECT_EQ(scheduler_.LeaseRequests().size(), asked);  // refused without asking
  submitter_->Shutdown();
}

// --- Lineage ---

TEST_F(TaskSubmitterTest, StoredResultKeepsItsTaskAndIsMadeAgainFromIt) {
  Start();
  hold_ = true;
  std::shared_ptr<RefState> r = Submit("make");
  std::shared_ptr<FakeWorker> w = workers_.Worker(0);
  ASSERT_TRUE(w->WaitReceived(1));
  ASSERT_TRUE(w->ReleaseStored(0, "job1.obj-a", "n2"));
  ObjectTable::Outcome o = Wait(r);
  ASSERT_EQ(o.state, RefState::State::kReady);
  EXPECT_EQ(o.value.stored->object_id, "job1.obj-a");
  // Its node is lost: take the lineage and run the task again (as GetValue does).
  std::shared_ptr<TaskRecord> task = table_.TakeLineage(r);
  ASSERT_NE(task, nullptr);
  EXPECT_EQ(table_.Read(r).state, RefState::State::kPending);
  task->result = r;
  ++task->attempt;
  submitter_->Submit(task);
  ASSERT_TRUE(WaitFor([&] { return TotalReceived() == 2; }));
  std::shared_ptr<FakeWorker> again = workers_.Workers().back();
  ASSERT_TRUE(WaitFor([&] { return again->Held() == 1; }));
  EXPECT_EQ(again->Received().back().function(), "make");
  EXPECT_EQ(again->Received().back().attempt(), 1);
  EXPECT_EQ(again->Received().back().return_id(), r->id);
  ASSERT_TRUE(again->ReleaseStored(0, "job1.obj-b", "n1"));
  o = Wait(r);
  ASSERT_EQ(o.state, RefState::State::kReady);
  EXPECT_EQ(o.value.stored->object_id, "job1.obj-b");
}

TEST_F(TaskSubmitterTest, InlineResultKeepsNoLineage) {
  Start();
  ASSERT_EQ(Value(Submit("f")), "ok:f");
  std::shared_ptr<RefState> r = Submit("f");
  ASSERT_EQ(Value(r), "ok:f");
  EXPECT_EQ(table_.TakeLineage(r), nullptr);
}

// --- Cancel ---

TEST_F(TaskSubmitterTest, CancelOfAQueuedTaskFailsItBeforeItStarts) {
  Start();
  hold_ = true;
  // Shared with the policy: its lease requests may still ask after this body ends.
  auto grants = std::make_shared<std::atomic<int>>(0);
  scheduler_.SetLeasePolicy([grants](const proto::RequestLeaseRequest&, proto::RequestLeaseReply* reply) {
    if (grants->fetch_add(1) == 0) {
      reply->set_granted(true);
      reply->set_lease_id("lease-1");
      reply->set_worker_id("worker-of-lease-1");
      reply->set_node_id("n1");
      return absl::OkStatus();
    }
    absl::SleepFor(absl::Milliseconds(2));
    reply->set_pending_reason("waiting for 1 CPU");
    return absl::OkStatus();
  });
  std::shared_ptr<RefState> a = Submit("f");
  ASSERT_TRUE(workers_.Worker(0)->WaitReceived(1));
  std::shared_ptr<RefState> b = Submit("f");
  ASSERT_TRUE(submitter_->Cancel(b.get(), /*force=*/false).ok());
  absl::Status s = Error(b);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(s.message(), "task f: cancelled before it started");
  EXPECT_EQ(TotalReceived(), 1u);
  EXPECT_EQ(table_.Read(a).state, RefState::State::kPending);
}

TEST_F(TaskSubmitterTest, CancelOfARunningTaskAsksItsWorker) {
  Start();
  hold_ = true;
  std::shared_ptr<RefState> r = Submit("f");
  std::shared_ptr<FakeWorker> w = workers_.Worker(0);
  ASSERT_TRUE(w->WaitReceived(1));
  ASSERT_TRUE(submitter_->Cancel(r.get(), /*force=*/false).ok());
  absl::Status s = Error(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(w->Cancels(), (std::vector<uint64_t>{w->Received()[0].seq()}));
  EXPECT_FALSE(w->dead());
  EXPECT_EQ(w->Received().size(), 1u);  // a cancelled task is not run again
}

TEST_F(TaskSubmitterTest, ForcedCancelKillsTheWorker) {
  Start();
  hold_ = true;
  std::shared_ptr<RefState> r = Submit("f", {}, /*retries=*/3);
  std::shared_ptr<FakeWorker> w = workers_.Worker(0);
  ASSERT_TRUE(w->WaitReceived(1));
  ASSERT_TRUE(submitter_->Cancel(r.get(), /*force=*/true).ok());
  absl::Status s = Error(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(s.message(), "task f: cancelled (its worker was stopped)");
  std::vector<std::pair<std::string, std::string>> kills = agents_.Kills();
  ASSERT_EQ(kills.size(), 1u);
  EXPECT_EQ(kills[0].first, "worker-of-lease-1");
  EXPECT_EQ(kills[0].second, "drover::Cancel(force) of f");
  EXPECT_EQ(TotalReceived(), 1u);  // not retried although retries were left
}

TEST_F(TaskSubmitterTest, CancelWhileArgumentsResolveNeverSendsTheTask) {
  Start();
  std::shared_ptr<RefState> dep = table_.NewPending("job1.dep");
  std::shared_ptr<RefState> r = Submit("f", {RefArg(dep)});
  ASSERT_TRUE(submitter_->Cancel(r.get(), false).ok());
  table_.Complete(dep, ObjectValue{std::make_shared<const std::string>("v"), std::nullopt, {}});
  absl::Status s = Error(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(workers_.connects(), 0);
}

TEST_F(TaskSubmitterTest, CancelOfAnUnknownOrFinishedTaskIsNotFound) {
  Start();
  std::shared_ptr<RefState> other = table_.NewPending("job1.other");
  EXPECT_EQ(submitter_->Cancel(other.get(), false).code(), absl::StatusCode::kNotFound);
  std::shared_ptr<RefState> r = Submit("f");
  ASSERT_EQ(Value(r), "ok:f");
  EXPECT_EQ(submitter_->Cancel(r.get(), false).code(), absl::StatusCode::kNotFound);
}

TEST_F(TaskSubmitterTest, CancelledReplyOfATaskNotCancelledRunsItAgain) {
  Start();
  hold_ = true;
  std::shared_ptr<RefState> r = Submit("f");
  std::shared_ptr<FakeWorker> w = workers_.Worker(0);
  ASSERT_TRUE(w->WaitReceived(1));
  // The worker cancelled an earlier attempt on its own (e.g. its lease moved).
  ASSERT_TRUE(w->Fail(0, absl::StatusCode::kCancelled, "cancelled"));
  ASSERT_TRUE(WaitFor([&] { return TotalReceived() == 2; }));
  std::shared_ptr<FakeWorker> again = workers_.Workers().back();
  ASSERT_TRUE(WaitFor([&] { return again->Held() == 1; }));
  ASSERT_TRUE(again->Release(0, "second"));
  EXPECT_EQ(Value(r), "second");
}

// --- Leases handed back ---

TEST_F(TaskSubmitterTest, IdleWorkerIsHandedBackAfterTheIdleTime) {
  FakeClock& clock = fake_clock_;
  Start(&clock);
  ASSERT_EQ(Value(Submit("f")), "ok:f");
  EXPECT_EQ(submitter_->LeasedWorkers(), 1);
  clock.Advance(TaskSubmitter::kIdleReturn / 2);
  AwaitHousekeeping();
  EXPECT_EQ(submitter_->LeasedWorkers(), 1);
  clock.Advance(TaskSubmitter::kIdleReturn);
  EXPECT_TRUE(WaitFor([&] { return submitter_->LeasedWorkers() == 0; }));
  EXPECT_TRUE(workers_.Worker(0)->WaitDead());  // handing back is closing the connection
}

TEST_F(TaskSubmitterTest, BusyWorkerIsKept) {
  FakeClock& clock = fake_clock_;
  Start(&clock);
  hold_ = true;
  std::shared_ptr<RefState> r = Submit("f");
  ASSERT_TRUE(workers_.Worker(0)->WaitReceived(1));
  clock.Advance(absl::Seconds(10));
  AwaitHousekeeping();
  EXPECT_EQ(submitter_->LeasedWorkers(), 1);
  EXPECT_FALSE(workers_.Worker(0)->dead());
}

TEST_F(TaskSubmitterTest, RevokedLeaseIsHandedBackOnceItsTasksFinish) {
  FakeClock& clock = fake_clock_;  // never advanced: no idle return
  Start(&clock);
  hold_ = true;
  std::shared_ptr<RefState> r = Submit("f");
  std::shared_ptr<FakeWorker> w = workers_.Worker(0);
  ASSERT_TRUE(w->WaitReceived(1));
  w->Revoke("a pending job claims it");
  ASSERT_TRUE(WaitFor([&] { return submitter_->ProgressForTest().revoked_workers == 1; }));
  EXPECT_FALSE(w->dead());  // a task is still in flight on it
  ASSERT_TRUE(w->Release(0, "v"));
  EXPECT_EQ(Value(r), "v");
  EXPECT_TRUE(w->WaitDead());
  EXPECT_EQ(submitter_->LeasedWorkers(), 0);
}

// The revoke frame of a worker can come before the worker is listed (its connection is
// read from the moment it is watched). It is handed back at once, not listed and held
// (it would take no tasks, yet count as the key's worker while tasks wait).
TEST_F(TaskSubmitterTest, LeaseRevokedBeforeItsWorkerIsListedIsHandedBackAtOnce) {
  FakeClock& clock = fake_clock_;  // never advanced: no idle return
  std::atomic<int> grants{0};
  Start(&clock, nullptr, [&] {
    if (grants++ != 0) return;
    workers_.Worker(0)->Revoke("a pending job claims it");
    ASSERT_TRUE(WaitFor([&] { return submitter_->ProgressForTest().revoke_frames >= 1; }));
  });
  std::shared_ptr<RefState> r = Submit("f");
  EXPECT_EQ(Value(r), "ok:f");
  EXPECT_TRUE(workers_.Worker(0)->WaitDead());
  EXPECT_TRUE(workers_.Worker(0)->Received().empty());
  ASSERT_EQ(workers_.Workers().size(), 2u);
  EXPECT_EQ(workers_.Worker(1)->Received().size(), 1u);
  EXPECT_EQ(submitter_->LeasedWorkers(), 1);
}

// --- Shutdown ---

TEST_F(TaskSubmitterTest, ShutdownFailsWhatIsQueuedOrInFlight) {
  Start();
  hold_ = true;
  std::shared_ptr<RefState> r = Submit("f");
  ASSERT_TRUE(workers_.Worker(0)->WaitReceived(1));
  submitter_->Shutdown();
  absl::Status s = Error(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(s.message(), "task f: drover::Shutdown was called before it finished");
  EXPECT_TRUE(scheduler_.cancelled());
  EXPECT_TRUE(workers_.Worker(0)->WaitDead());
}

TEST_F(TaskSubmitterTest, SubmitAfterShutdownFails) {
  Start();
  submitter_->Shutdown();
  absl::Status s = Error(Submit("f"));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "drover::Shutdown was called");
}

// A lease request answered ends an outage another part told (the session, an actor
// call): one "back" line, and none from failed requests.
TEST_F(TaskSubmitterTest, AnAnsweredLeaseRequestEndsAnOutageToldElsewhere) {
  absl::Mutex mu;
  std::vector<std::string> lines;
  SchedulerOutage outage("head:7000", [&](const std::string& line) {
    absl::MutexLock l(&mu);
    lines.push_back(line);
  });
  OwnerIdentity id = testing::TestIdentity(&ids_);
  submitter_ = std::make_unique<TaskSubmitter>(TaskSubmitter::Deps{
      std::move(id), &scheduler_, &workers_, &agents_, &table_, Clock::Real(), &outage});
  outage.Away(absl::UnavailableError("Socket closed"), "job job1");
  std::atomic<int> calls{0};
  scheduler_.SetLeasePolicy([&](const proto::RequestLeaseRequest&, proto::RequestLeaseReply* reply) {
    if (calls.fetch_add(1) < 2) return absl::UnavailableError("connection refused");
    reply->set_granted(true);
    reply->set_lease_id("lease-1");
    reply->set_worker_id("worker-of-lease-1");
    reply->set_node_id("n1");
    return absl::OkStatus();
  });
  EXPECT_EQ(Value(Submit("f")), "ok:f");
  EXPECT_FALSE(outage.away());
  // The submitter uses `outage` and `calls`, which die with this body: stop it first.
  submitter_.reset();
  absl::MutexLock l(&mu);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_THAT(lines[0], HasSubstr("does not answer (Socket closed)"));
  EXPECT_EQ(lines[1], "the scheduler at head:7000 is back");
}

// --- Lease requests across keys ---

// The submitter's threads do not grow with its worker connections: one loop reads
// them all (a reader thread each would add 31 here).
TEST_F(TaskSubmitterTest, ThreadsDoNotGrowWithWorkerConnections) {
  testing::SilentWorkerConnector silent;
  OwnerIdentity id = testing::TestIdentity(&ids_);
  TaskSubmitter submitter(TaskSubmitter::Deps{std::move(id), &scheduler_, &silent, &agents_,
                                              &table_, Clock::Real()});
  std::vector<std::shared_ptr<RefState>> refs;
  auto submit = [&] {
    std::shared_ptr<TaskRecord> t = NewTask("f");
    refs.push_back(t->result);
    submitter.Submit(std::move(t));
  };
  submit();
  ASSERT_TRUE(WaitFor([&] { return submitter.LeasedWorkers() == 1; }));
  const int base = testing::ThreadCount();
  // Each task waits on its own worker (none answers), so each asks for a lease.
  for (int i = 1; i < 32; ++i) submit();
  ASSERT_TRUE(WaitFor([&] { return submitter.LeasedWorkers() == 32; }, kWait));
  EXPECT_EQ(silent.connects(), 32);
  EXPECT_LE(testing::ThreadCount(), base + 2)
      << testing::ThreadCount() << " threads, " << base << " with one connection";
  submitter.Shutdown();
  for (auto& r : refs) EXPECT_EQ(table_.Read(r).state, RefState::State::kFailed);
}

// Lease requests run on a fixed pool: tasks of 24 functions whose leases stay pending
// (no node has room) use no more threads than one (a thread each would add 23 here).
TEST_F(TaskSubmitterTest, ThreadsDoNotGrowWithLeaseRequests) {
  Start();
  scheduler_.SetLeasePolicy([](const proto::RequestLeaseRequest&, proto::RequestLeaseReply* reply) {
    absl::SleepFor(absl::Milliseconds(1));  // the scheduler holds it a while
    reply->set_granted(false);
    reply->set_pending_reason("waiting for 1 CPU");
    return absl::OkStatus();
  });
  std::vector<std::shared_ptr<RefState>> refs;
  refs.push_back(Submit("f0"));
  ASSERT_TRUE(scheduler_.WaitLeaseRequests(1));
  const int base = testing::ThreadCount();
  for (int i = 1; i < 24; ++i) refs.push_back(Submit(absl::StrCat("f", i)));
  // Every function's request is answered (again and again, in turn).
  ASSERT_TRUE(WaitFor([&] {
    for (auto& r : refs) {
      if (!absl::StrContains(table_.PendingReason(r), "waiting for 1 CPU")) return false;
    }
    return true;
  }, kWait));
  std::set<std::string> ids;
  for (const auto& r : scheduler_.LeaseRequests()) ids.insert(r.request_id());
  EXPECT_EQ(ids.size(), 24u);
  // (+1: the lease pool may not have made all its threads when `base` was read.)
  EXPECT_LE(testing::ThreadCount(), base + 1) << base << " threads with one request";
}

// At most kMaxLeaseRequestsTotal requests are out across all keys, and a slot freed
// goes to a key with the fewest out: six functions wanting four each (24) share eight.
// The first two take all eight; as answers come back the other four get a slot each,
// and from then on every function always has a request asked (its place in the
// scheduler's queue kept), whichever answers come back. A first-come pool would hand
// the slots to one function after another, leaving some unasked for rounds.
TEST_F(TaskSubmitterTest, LeaseRequestsAreCappedInTotalAndEveryKeyKeepsOneAsked) {
  Start();
  LeaseGate gate;
  scheduler_.SetLeasePolicy([&](const proto::RequestLeaseRequest& req, proto::RequestLeaseReply* reply) {
    return gate.Hold(req, reply);
  });
  constexpr int kCap = TaskSubmitter::kMaxLeaseRequestsTotal;
  std::vector<std::shared_ptr<RefState>> refs;
  for (int f = 0; f < 6; ++f) {
    for (int i = 0; i < 4; ++i) refs.push_back(Submit(absl::StrCat("f", f)));
  }
  ASSERT_TRUE(WaitFor([&] { return gate.held() == kCap; }, kWait)) << gate.held();
  // Lets one request answer; its slot is asked again at once.
  auto pass_one = [&] {
    const size_t asked = scheduler_.LeaseRequests().size();
    gate.PassOne();
    ASSERT_TRUE(scheduler_.WaitLeaseRequests(asked + 1));
    ASSERT_TRUE(WaitFor([&] { return gate.held() == kCap; }, kWait)) << gate.held();
  };
  int passes = 0;
  while (gate.Asking().size() < 6u && passes < 8) {
    pass_one();
    ++passes;
  }
  EXPECT_EQ(gate.Asking().size(), 6u) << "after " << passes << " answers";
  for (int i = 0; i < 16; ++i) {
    pass_one();
    EXPECT_EQ(gate.Asking().size(), 6u) << "after " << i + 1 << " more answers";
  }
  EXPECT_EQ(gate.max_held(), kCap);
  gate.Open();
  submitter_->Shutdown();
}

// A key backing off after failed requests holds no thread and no slot: while eight
// functions' requests fail and wait out their back-off (the fake clock never moves),
// a ninth function's task still gets a worker and runs.
TEST_F(TaskSubmitterTest, KeysBackingOffDoNotHoldUpOtherKeys) {
  FakeClock& clock = fake_clock_;
  Start(&clock);
  scheduler_.SetLeasePolicy([](const proto::RequestLeaseRequest& req, proto::RequestLeaseReply* reply) {
    if (FunctionOf(req) != "good") return absl::UnavailableError("connection refused");
    reply->set_granted(true);
    reply->set_lease_id("lease-good");
    reply->set_worker_id("worker-of-lease-good");
    reply->set_node_id("n1");
    return absl::OkStatus();
  });
  std::vector<std::shared_ptr<RefState>> bad;
  for (int f = 0; f < TaskSubmitter::kMaxLeaseRequestsTotal; ++f) {
    bad.push_back(Submit(absl::StrCat("bad", f)));
  }
  ASSERT_TRUE(WaitFor([&] {
    return submitter_->ProgressForTest().lease_backoffs >=
           static_cast<uint64_t>(TaskSubmitter::kMaxLeaseRequestsTotal);
  }, kWait));
  EXPECT_EQ(Value(Submit("good")), "ok:good");
  for (auto& r : bad) {
    EXPECT_THAT(table_.PendingReason(r), HasSubstr("cannot get a worker: connection refused"));
  }
}

}  // namespace
}  // namespace drover::internal
