// SchedulerCore over a real redis-server that goes away and comes back: changes made
// meanwhile stand and are stored once Redis answers again; a Redis gone for long makes
// new submissions fail at once, naming it. Time is a FakeClock: the store's back-off,
// the durability wait and the outage's length pass only when the test says so.
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "scheduler/scheduler_core.h"
#include "tests/util/redis_server.h"
#include "tests/util/test_util.h"

namespace drover {
namespace {

using testing::RedisServer;
using testing::WaitFor;

class NoAgents : public AgentClient {
 public:
  absl::StatusOr<int> StartProcesses(const std::string&,
                                     const proto::StartProcessesRequest&) override {
    return 29500;
  }
  absl::Status StopJob(const std::string&, const proto::StopJobRequest&) override {
    return absl::OkStatus();
  }
};

proto::JobSpec OneProcess() {
  proto::JobSpec spec;
  spec.add_command("train");
  spec.set_nproc(1);
  spec.mutable_per_process()->set_cpus(1);
  return spec;
}

// job id -> version, as stored in Redis.
std::map<std::string, int64_t> StoredVersions(StateStore& store) {
  std::map<std::string, int64_t> out;
  auto jobs = store.LoadJobs();
  if (!jobs.ok()) return out;
  for (const auto& j : *jobs) out[j.job_id()] = j.version();
  return out;
}

// A SchedulerCore over a real redis-server (append-only file on), on a FakeClock, with
// one 8-CPU node registered.
class SchedulerPersistenceTest : public ::testing::Test {
 protected:
  void StartCore(const std::string& name, const std::string& prefix) {
    auto server = RedisServer::Start(testing::TestTmpDir() + "/" + name, /*appendonly=*/true);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    auto store = NewRedisStateStore(server_->host(), server_->port(), prefix);
    ASSERT_TRUE(store.ok()) << store.status();
    SchedulerOptions o;
    o.clock = &clock_;
    o.node_timeout = absl::Hours(1);
    o.durable_wait = absl::Seconds(1);
    core_ = std::make_unique<SchedulerCore>(o, std::move(*store), std::make_unique<NoAgents>());
    ASSERT_TRUE(core_->Start().ok());
    proto::RegisterNodeRequest reg;
    reg.set_agent_address("10.0.0.1:7000");
    reg.set_node_ip("10.0.0.1");
    reg.mutable_total()->set_cpus(8);
    auto node = core_->RegisterNode(reg);
    ASSERT_TRUE(node.ok()) << node.status();
    node_id_ = node->node_id();
  }
  void TearDown() override {
    if (core_) core_->Stop();
  }

  FakeClock clock_;
  std::unique_ptr<RedisServer> server_;
  std::unique_ptr<SchedulerCore> core_;
  std::string node_id_;
};

TEST_F(SchedulerPersistenceTest, ChangesWhileRedisIsDownStandAndAreStoredWhenItReturns) {
  ASSERT_NO_FATAL_FAILURE(StartCore("redis-down", "t:"));
  auto first = core_->SubmitJob(OneProcess());
  ASSERT_TRUE(first.ok()) << first.status();

  server_->Stop();
  // A submission while Redis is down: the job is created and placed (ids are reserved
  // ahead), but the reply cannot promise it is stored; it says so when the durability
  // wait ends.
  absl::StatusOr<proto::JobInfo> second;
  std::atomic<bool> answered{false};
  std::thread submitter([&] {
    second = core_->SubmitJob(OneProcess());
    answered = true;
  });
  EXPECT_TRUE(WaitFor([&] { return core_->ListJobs({}).size() == 2; }));
  // Time passes until the wait ends (its deadline is set when the thread gets there).
  EXPECT_TRUE(WaitFor([&] {
    clock_.Advance(absl::Milliseconds(100));
    return answered.load();
  }));
  submitter.join();
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
  EXPECT_TRUE(absl::StrContains(second.status().message(),
                                absl::StrCat("redis 127.0.0.1:", server_->port())))
      << second.status();
  // Down for longer than JobPersister::kDownAfter: new submissions fail at once.
  clock_.Advance(JobPersister::kDownAfter + absl::Seconds(1));
  ASSERT_TRUE(WaitFor([&] {
    auto refused = core_->SubmitJob(OneProcess());
    return !refused.ok() && absl::StrContains(refused.status().message(), "failed every call");
  }));
  EXPECT_EQ(core_->ListJobs({}).size(), 2u);

  // Redis returns (with its AOF): every change is stored, newest version of each job.
  ASSERT_TRUE(server_->Restart().ok());
  auto reader = NewRedisStateStore(server_->host(), server_->port(), "t:");
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::map<std::string, int64_t> want;
  ASSERT_TRUE(WaitFor([&] {
    clock_.Advance(absl::Seconds(2));  // past the store's longest back-off
    want.clear();
    for (const auto& j : core_->ListJobs({})) want[j.job_id()] = j.version();
    return StoredVersions(**reader) == want;
  }));
  EXPECT_EQ(want.size(), 2u);
  auto after = core_->SubmitJob(OneProcess());
  EXPECT_TRUE(after.ok()) << after.status();
}

// An agent is told to forget a job generation only once the job's record with its
// exits is stored: a scheduler restarted from Redis before that would find the job
// RUNNING and its processes gone.
TEST_F(SchedulerPersistenceTest, AgentsForgetAJobOnlyOnceItsEndIsStored) {
  ASSERT_NO_FATAL_FAILURE(StartCore("redis-forget", "f:"));
  auto job = core_->SubmitJob(OneProcess());
  ASSERT_TRUE(job.ok()) << job.status();

  proto::HeartbeatRequest hb;
  hb.set_node_id(node_id_);
  proto::ProcessStatus* p = hb.add_processes();
  p->set_job_id(job->job_id());
  p->set_rank(0);
  p->set_running(false);
  p->mutable_exit()->set_exit_code(0);
  auto forgets = [](const proto::HeartbeatReply& r, const std::string& id) {
    for (const auto& f : r.forget()) {
      if (f.job_id() == id) return true;
    }
    return false;
  };
  server_->Stop();
  proto::HeartbeatReply reply = core_->Heartbeat(hb);
  ASSERT_TRUE(reply.known());
  ASSERT_EQ(core_->ListJobs({})[0].state(), proto::SUCCEEDED);
  EXPECT_FALSE(forgets(reply, job->job_id())) << "forgotten before its end was stored";
  clock_.Advance(absl::Seconds(2));
  EXPECT_FALSE(forgets(core_->Heartbeat(hb), job->job_id()));

  ASSERT_TRUE(server_->Restart().ok());
  EXPECT_TRUE(WaitFor([&] {
    clock_.Advance(absl::Seconds(2));  // past the store's longest back-off
    return forgets(core_->Heartbeat(hb), job->job_id());
  }));
}

}  // namespace
}  // namespace drover
