// LeaseManager's memory of requests and its queue, over fake books and workers that
// always answer.
#include "scheduler/lease_manager.h"

#include <algorithm>
#include <atomic>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "scheduler/testing/lease_fakes.h"
#include "tests/util/test_util.h"

namespace drover {
namespace {

// One node with room for anything.
class RoomyBook : public ResourceBook {
 public:
  absl::StatusOr<std::optional<Grant>> Reserve(const proto::Resources& shape,
                                               const proto::PlacementHint&, std::string*) override {
    return Grant{"node-1", "10.0.0.1:7000", shape, {}};
  }
  void Release(const Grant&) override {}
  absl::Status CheckJobRunning(const std::string&) override { return absl::OkStatus(); }
  std::vector<std::string> AliveAgents() override { return {"10.0.0.1:7000"}; }
  std::string SchedulerAddress() override { return "10.0.0.9:7070"; }
};

proto::RequestLeaseRequest Ask(const std::string& request_id) {
  proto::RequestLeaseRequest req;
  req.set_job_id("job-1");
  req.set_request_id(request_id);
  req.mutable_package()->set_hash("abc");
  req.mutable_shape()->set_cpus(1);
  return req;
}

TEST(LeaseManagerTest, ARequestIsRememberedForAMinuteAfterItWasLastAsked) {
  FakeClock clock;
  RoomyBook book;
  LeaseManager leases(&book, std::make_unique<FakeWorkers>(), &clock);
  auto first = leases.RequestLease(Ask("a"));
  ASSERT_TRUE(first.ok() && first->granted()) << first.status();
  // Asked again within the minute (a retry): the same lease, however many others came.
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(leases.RequestLease(Ask(absl::StrCat("x", i))).ok());
  clock.Advance(absl::Seconds(50));
  EXPECT_EQ(leases.RequestLease(Ask("a"))->lease_id(), first->lease_id());
  // 50 s after that retry it is still remembered; the others (asked 100 s ago) are not.
  clock.Advance(absl::Seconds(50));
  EXPECT_EQ(leases.RequestLease(Ask("a"))->lease_id(), first->lease_id());
  EXPECT_NE(leases.RequestLease(Ask("x0"))->lease_id(), "");
  EXPECT_EQ(leases.counts().leases_granted, 1002);  // x0 again is a new request
  // Not asked for over a minute: a new request under the same id.
  clock.Advance(absl::Seconds(61));
  auto again = leases.RequestLease(Ask("a"));
  ASSERT_TRUE(again.ok() && again->granted());
  EXPECT_NE(again->lease_id(), first->lease_id());
  leases.Stop();
}

// Regression: lease ids restarted at lease-1 with every scheduler, so an agent returning
// a lease of the scheduler before a restart (its holder disconnected later) freed the
// resources of the new scheduler's lease of the same id.
TEST(LeaseManagerTest, LeaseIdsAreNotReusedAcrossSchedulerLifetimes) {
  FakeClock clock;
  RoomyBook book;
  std::set<std::string> ids;
  for (int life = 0; life < 3; ++life) {
    LeaseManager leases(&book, std::make_unique<FakeWorkers>(), &clock);
    for (int i = 0; i < 3; ++i) {
      auto r = leases.RequestLease(Ask(absl::StrCat("r", i)));
      ASSERT_TRUE(r.ok() && r->granted()) << r.status();
      EXPECT_TRUE(ids.insert(r->lease_id()).second) << r->lease_id() << " again";
    }
    leases.Stop();
  }
}

// RoomyBook whose store keeps actors' records (or not: `keeps`), saving them in memory.
// A save reads the lease manager's counts, which take its lock: a save made under that
// lock would deadlock (the deadlock detection aborts the test).
class SavingBook : public RoomyBook {
 public:
  explicit SavingBook(bool keeps) : keeps_(keeps) {}
  void Set(LeaseManager* leases) { leases_ = leases; }
  bool SavesActors() override { return keeps_; }
  void SaveActor(const std::string& actor_id, int64_t version, std::string record) override {
    if (leases_ != nullptr) leases_->counts();
    absl::MutexLock l(&mu_);
    ++saves_;
    version_ = std::max(version_, version);
  }
  int saves() {
    absl::MutexLock l(&mu_);
    return saves_;
  }
  int64_t version() {
    absl::MutexLock l(&mu_);
    return version_;
  }

 private:
  const bool keeps_;
  LeaseManager* leases_ = nullptr;
  absl::Mutex mu_;
  int saves_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
};

proto::CreateActorRequest Actor(const std::string& id) {
  proto::CreateActorRequest req;
  req.set_job_id("job-1");
  req.set_owner("job-1/1@here");
  req.mutable_creation()->set_actor_id(id);
  req.mutable_creation()->set_factory("MakeCounter");
  req.mutable_shape()->set_cpus(1);
  req.mutable_package()->set_hash("abc");
  return req;
}

TEST(LeaseManagerTest, ActorsRecordsAreSavedWithoutTheLockAndOnlyWhereKept) {
  FakeClock clock;
  SavingBook book(/*keeps=*/true);
  LeaseManager leases(&book, std::make_unique<FakeWorkers>(), &clock);
  book.Set(&leases);
  absl::StatusOr<proto::ActorInfo> made = leases.CreateActor(Actor("actor-1"));
  ASSERT_TRUE(made.ok()) << made.status();
  ASSERT_TRUE(leases.KillActor("actor-1", "done with it").ok());
  proto::GetActorRequest get;
  get.set_actor_id("actor-1");
  absl::StatusOr<proto::ActorInfo> dead = leases.GetActor(get);
  ASSERT_TRUE(dead.ok()) << dead.status();
  // The last record saved is the newest (saves may coalesce, never go back).
  EXPECT_TRUE(testing::WaitFor([&] { return book.version() == dead->version(); }))
      << book.version() << " saved, " << dead->version() << " now";
  EXPECT_GE(book.saves(), 1);
  leases.Stop();

  // A store that keeps nothing: nothing is encoded or saved.
  SavingBook dropping(/*keeps=*/false);
  LeaseManager other(&dropping, std::make_unique<FakeWorkers>(), &clock);
  ASSERT_TRUE(other.CreateActor(Actor("actor-2")).ok());
  ASSERT_TRUE(other.KillActor("actor-2", "done with it").ok());
  other.Stop();
  EXPECT_EQ(dropping.saves(), 0);
}

// One node with `slots` one-CPU slots; jobs run until ended; counts what the grant
// passes ask of it.
class SlotBook : public ResourceBook {
 public:
  explicit SlotBook(int slots) : slots_(slots) {}
  absl::StatusOr<std::optional<Grant>> Reserve(const proto::Resources& shape,
                                               const proto::PlacementHint& hint,
                                               std::string* reason) override {
    std::optional<Grant> g = TryReserve(shape, hint);
    if (!g) *reason = "no free slot";
    return g;
  }
  std::optional<Grant> TryReserve(const proto::Resources& shape, const proto::PlacementHint&) override {
    absl::MutexLock l(&mu_);
    ++tries_;
    if (used_ >= slots_) return std::nullopt;
    ++used_;
    return Grant{"node-1", "10.0.0.1:7000", shape, {}};
  }
  std::string Explain(const proto::Resources&, const proto::PlacementHint&) override {
    return "all 4 slots are taken";
  }
  void Release(const Grant&) override {
    absl::MutexLock l(&mu_);
    --used_;
  }
  absl::Status CheckJobRunning(const std::string& job_id) override {
    absl::MutexLock l(&mu_);
    if (ended_.count(job_id)) {
      return absl::FailedPreconditionError(absl::StrCat("job ", job_id, " has ended (SUCCEEDED)"));
    }
    return absl::OkStatus();
  }
  std::vector<std::string> AliveAgents() override { return {"10.0.0.1:7000"}; }
  std::string SchedulerAddress() override { return "10.0.0.9:7070"; }

  void End(const std::string& job_id) {
    absl::MutexLock l(&mu_);
    ended_.insert(job_id);
  }
  int tries() {
    absl::MutexLock l(&mu_);
    return tries_;
  }

 private:
  absl::Mutex mu_;
  const int slots_;
  int used_ ABSL_GUARDED_BY(mu_) = 0;
  int tries_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<std::string> ended_ ABSL_GUARDED_BY(mu_);
};

// Calls answered so far, by request id, in the order they came.
class Answers {
 public:
  LeaseManager::LeaseDone For(const std::string& request_id) {
    return [this, request_id](absl::StatusOr<proto::RequestLeaseReply> r) {
      absl::MutexLock l(&mu_);
      order_.push_back(request_id);
      replies_.emplace(request_id, std::move(r));
    };
  }
  size_t count() {
    absl::MutexLock l(&mu_);
    return order_.size();
  }
  std::vector<std::string> order() {
    absl::MutexLock l(&mu_);
    return order_;
  }
  absl::StatusOr<proto::RequestLeaseReply> Of(const std::string& request_id) {
    absl::MutexLock l(&mu_);
    auto it = replies_.find(request_id);
    if (it == replies_.end()) return absl::NotFoundError("not answered");
    return it->second;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> order_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, absl::StatusOr<proto::RequestLeaseReply>> replies_ ABSL_GUARDED_BY(mu_);
};

proto::RequestLeaseRequest AskWaiting(const std::string& request_id, const std::string& job = "job-1") {
  proto::RequestLeaseRequest req = Ask(request_id);
  req.set_job_id(job);
  req.set_wait_ms(30000);
  return req;
}

// The cluster (4 slots) is full: its leases, in the order granted.
std::vector<std::string> Fill(LeaseManager& leases) {
  std::vector<std::string> held;
  for (int i = 0; i < 4; ++i) {
    auto r = leases.RequestLease(Ask(absl::StrCat("hold-", i)));
    EXPECT_TRUE(r.ok() && r->granted()) << r.status();
    held.push_back(r.ok() ? r->lease_id() : "");
  }
  return held;
}

TEST(LeaseQueueingTest, WaitingRequestsAreGrantedInOrderOneCallerPerReturnedLease) {
  SlotBook book(4);
  LeaseManager leases(&book, std::make_unique<FakeWorkers>());
  std::vector<std::string> held = Fill(leases);
  Answers answers;
  constexpr int kWaiting = 1000;
  for (int i = 0; i < kWaiting; ++i) {
    const std::string id = absl::StrCat("w", i);
    leases.RequestLease(AskWaiting(id), answers.For(id));
  }
  EXPECT_EQ(answers.count(), 0u);
  EXPECT_EQ(leases.counts().pending_requests, kWaiting);
  EXPECT_EQ(leases.counts().waiting_calls, kWaiting);
  // Each returned lease wakes exactly one caller, the oldest, and asks the book for
  // room at most twice (the grant, then the next that does not fit), however many wait.
  for (int k = 0; k < 3; ++k) {
    const int tries = book.tries();
    leases.ReturnLease(held[k], "done");
    ASSERT_TRUE(testing::WaitFor([&] { return answers.count() == static_cast<size_t>(k + 1); }));
    EXPECT_LE(book.tries() - tries, 2);
    auto got = answers.Of(absl::StrCat("w", k));
    ASSERT_TRUE(got.ok() && got->granted()) << got.status();
    held[k] = got->lease_id();
  }
  EXPECT_EQ(answers.order(), (std::vector<std::string>{"w0", "w1", "w2"}));
  EXPECT_EQ(leases.counts().waiting_calls, kWaiting - 3);
  leases.Stop();  // the rest are told it stops
  EXPECT_EQ(answers.count(), static_cast<size_t>(kWaiting));
  EXPECT_EQ(answers.Of("w999").status().code(), absl::StatusCode::kUnavailable);
}

TEST(LeaseQueueingTest, AWaitEndsPendingAtItsDeadlineAndTheRequestKeepsItsPlace) {
  FakeClock clock;
  SlotBook book(4);
  LeaseManager leases(&book, std::make_unique<FakeWorkers>(), &clock);
  std::vector<std::string> held = Fill(leases);
  Answers answers;
  proto::RequestLeaseRequest first = AskWaiting("first");
  first.set_wait_ms(2000);
  leases.RequestLease(first, answers.For("first"));
  auto second = leases.RequestLease(Ask("second"));  // wait 0: at once
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(second->granted());
  EXPECT_NE(second->pending_reason().find("all 4 slots are taken (2 lease requests"), std::string::npos)
      << second->pending_reason();
  clock.Advance(absl::Seconds(3));
  ASSERT_TRUE(testing::WaitFor([&] { return answers.count() == 1; }));
  auto r = answers.Of("first");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->granted());
  EXPECT_NE(r->pending_reason().find("all 4 slots are taken"), std::string::npos);
  // Nobody waits now; a lease comes back: "first" (the oldest) gets it and keeps it
  // until it asks again.
  leases.ReturnLease(held[0], "done");
  ASSERT_TRUE(testing::WaitFor([&] { return leases.counts().leases_granted == 5; }));
  EXPECT_FALSE(leases.RequestLease(Ask("second"))->granted());
  auto again = leases.RequestLease(first);
  ASSERT_TRUE(again.ok() && again->granted()) << again.status();
  leases.Stop();
}

TEST(LeaseQueueingTest, AnEndedJobsQueuedRequestsAreDroppedWithWhy) {
  SlotBook book(4);
  LeaseManager leases(&book, std::make_unique<FakeWorkers>());
  std::vector<std::string> held = Fill(leases);
  Answers answers;
  for (const char* id : {"a1", "a2"}) leases.RequestLease(AskWaiting(id, "job-a"), answers.For(id));
  leases.RequestLease(AskWaiting("b1", "job-b"), answers.For("b1"));
  leases.RequestLease(Ask("a3"), [](absl::StatusOr<proto::RequestLeaseReply>) {});  // wait 0
  EXPECT_EQ(leases.counts().pending_requests, 4);
  book.End("job-a");
  leases.JobEnded("job-a", {});
  ASSERT_TRUE(testing::WaitFor([&] { return answers.count() == 2; }));
  for (const char* id : {"a1", "a2"}) {
    auto r = answers.Of(id);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << id;
    EXPECT_NE(r.status().message().find("job job-a has ended (SUCCEEDED); its queued lease request"),
              std::string::npos)
        << r.status();
  }
  EXPECT_EQ(leases.counts().pending_requests, 2);  // b1, and a3 (of job-1)
  // job-a's dropped requests never take a slot: the next lease goes to b1.
  leases.ReturnLease(held[0], "done");
  ASSERT_TRUE(testing::WaitFor([&] { return answers.count() == 3; }));
  EXPECT_TRUE(answers.Of("b1")->granted());
  leases.Stop();
}

TEST(LeaseQueueingTest, AFullQueueRefusesWithResourceExhausted) {
  SlotBook book(4);
  LeaseManagerOptions options;
  options.max_queued = 3;
  LeaseManager leases(&book, std::make_unique<FakeWorkers>(), nullptr, options);
  Fill(leases);
  for (int i = 0; i < 3; ++i) ASSERT_FALSE(leases.RequestLease(Ask(absl::StrCat("q", i)))->granted());
  auto refused = leases.RequestLease(Ask("q3"));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("--max-queued-leases"), std::string::npos)
      << refused.status();
  // Those queued may still ask again.
  EXPECT_TRUE(leases.RequestLease(Ask("q0")).ok());
  leases.Stop();
}

TEST(LeaseQueueingTest, ALeaseNobodyCameForIsReturned) {
  FakeClock clock;
  SlotBook book(4);
  LeaseManager leases(&book, std::make_unique<FakeWorkers>(), &clock);
  std::vector<std::string> held = Fill(leases);
  ASSERT_FALSE(leases.RequestLease(Ask("gone"))->granted());  // its caller goes away
  leases.ReturnLease(held[0], "done");
  ASSERT_TRUE(testing::WaitFor([&] { return leases.counts().leases == 4; }));
  clock.Advance(absl::Seconds(61));
  ASSERT_TRUE(testing::WaitFor([&] { return leases.counts().leases == 3; }));
  EXPECT_EQ(leases.counts().pending_requests, 0);
  leases.Stop();
}

// proto/lease.proto: a request is forgotten once wait_ms passed twice without a retry.
// One whose caller gave up is not granted when its turn comes; the next one is.
TEST(LeaseQueueingTest, ARequestItsCallerGaveUpIsForgottenNotGranted) {
  FakeClock clock;
  SlotBook book(4);
  LeaseManager leases(&book, std::make_unique<FakeWorkers>(), &clock);
  std::vector<std::string> held = Fill(leases);
  ASSERT_FALSE(leases.RequestLease(Ask("gave-up"))->granted());  // wait 0, never again
  clock.Advance(absl::Seconds(3));
  ASSERT_FALSE(leases.RequestLease(Ask("asks-again"))->granted());
  leases.ReturnLease(held[0], "done");
  ASSERT_TRUE(testing::WaitFor([&] { return leases.counts().leases_granted == 5; }));
  EXPECT_EQ(leases.counts().leases, 4);
  EXPECT_EQ(leases.counts().pending_requests, 0);
  auto r = leases.RequestLease(Ask("asks-again"));
  ASSERT_TRUE(r.ok() && r->granted()) << r.status();
  leases.Stop();
}

}  // namespace
}  // namespace drover
