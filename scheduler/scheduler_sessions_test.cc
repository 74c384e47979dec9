// SchedulerCore's failure detection through agents' sessions, on a FakeClock: a closed
// session kills its node after the grace, and nothing else does (a re-registering
// agent, a restarted scheduler, a session replaced by a newer one).
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "scheduler/scheduler_core.h"
#include "scheduler/testing/core_fakes.h"
#include "tests/util/test_util.h"

namespace drover {
namespace {

using testing::FakeAgents;
using testing::SharedStore;
using testing::WaitFor;

constexpr absl::Duration kGrace = absl::Seconds(1);

class SchedulerSessionsTest : public ::testing::Test {
 protected:
  void SetUp() override { Make(); }

  // A new core over the same store; heartbeats never time out here.
  void Make() {
    core_.reset();
    SchedulerOptions o;
    o.node_timeout = absl::Hours(1);
    o.session_grace = kGrace;
    o.clock = &clock_;
    core_ = std::make_unique<SchedulerCore>(o, std::make_unique<SharedStore>(store_.get()),
                                            std::make_unique<FakeAgents>());
    ASSERT_TRUE(core_->Start().ok());
  }

  // Registers (or re-registers) the node; `running_job`'s rank 0 is reported as held.
  std::string Register(const std::string& id = "", const std::string& running_job = "") {
    proto::RegisterNodeRequest req;
    req.set_node_id(id);
    req.set_agent_address("10.0.0.1:7000");
    req.set_node_ip("10.0.0.1");
    req.mutable_total()->set_cpus(8);
    if (!running_job.empty()) {
      auto* p = req.add_processes();
      p->set_job_id(running_job);
      p->set_rank(0);
      p->set_running(true);
    }
    auto r = core_->RegisterNode(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->node_id() : "";
  }

  int64_t Open(const std::string& node) {
    auto notice = core_->OpenAgentSession(node);
    EXPECT_TRUE(notice.ok()) << notice.status();
    if (!notice.ok()) return 0;
    EXPECT_GT(notice->session_id(), 0);
    EXPECT_EQ(notice->grace_ms(), absl::ToInt64Milliseconds(kGrace));
    return notice->session_id();
  }

  std::string SubmitRunning() {
    auto j = core_->SubmitJob(testing::OneCpuJob());
    EXPECT_TRUE(j.ok()) << j.status();
    if (!j.ok()) return "";
    EXPECT_TRUE(WaitFor([&] { return Job(j->job_id()).state() == proto::RUNNING; }));
    return j->job_id();
  }

  proto::JobInfo Job(const std::string& id) { return *core_->GetJob(id, 0, absl::ZeroDuration()); }
  proto::NodeState NodeState() { return core_->ClusterStatus().nodes(0).state(); }

  // Move time on by `d`; the monitor wakes a few ms after an Advance. Whether the job
  // then stays RUNNING (watched for 300 ms) or FAILS (within 10 s).
  bool StaysRunningAfter(absl::Duration d, const std::string& job) {
    clock_.Advance(d);
    return !WaitFor([&] { return Job(job).state() != proto::RUNNING; }, absl::Milliseconds(300));
  }
  bool FailsAfter(absl::Duration d, const std::string& job) {
    clock_.Advance(d);
    return WaitFor([&] { return Job(job).state() == proto::FAILED; });
  }

  FakeClock clock_;
  std::unique_ptr<StateStore> store_ = NewMemoryStateStore();
  std::unique_ptr<SchedulerCore> core_;
};

TEST_F(SchedulerSessionsTest, ClosedSessionFailsTheJobAfterTheGraceNamingTheAgent) {
  std::string node = Register();
  std::string job = SubmitRunning();
  int64_t session = Open(node);
  core_->AgentSessionClosed(node, session);
  EXPECT_TRUE(StaysRunningAfter(kGrace - absl::Milliseconds(1), job));
  EXPECT_EQ(NodeState(), proto::ALIVE);
  ASSERT_TRUE(FailsAfter(absl::Milliseconds(1), job));
  const std::string reason = Job(job).reason();
  EXPECT_TRUE(absl::StrContains(reason, "rank 0 on node " + node)) << reason;
  EXPECT_TRUE(absl::StrContains(reason, "declared dead (the agent of " + node +
                                            " (10.0.0.1) closed its connection"))
      << reason;
  EXPECT_TRUE(absl::StrContains(reason, "the agent process exited or was killed")) << reason;
  EXPECT_EQ(NodeState(), proto::DEAD);
  proto::HeartbeatRequest hb;
  hb.set_node_id(node);
  EXPECT_FALSE(core_->Heartbeat(hb).known());  // the agent, if alive, must register again
}

TEST_F(SchedulerSessionsTest, HeartbeatDoesNotCancelTheLoss) {
  // A heartbeat sent just before the kill may be handled after the close was noticed.
  std::string node = Register();
  std::string job = SubmitRunning();
  core_->AgentSessionClosed(node, Open(node));
  proto::HeartbeatRequest hb;
  hb.set_node_id(node);
  ASSERT_TRUE(core_->Heartbeat(hb).known());
  EXPECT_TRUE(FailsAfter(kGrace, job));
}

TEST_F(SchedulerSessionsTest, ReRegisteringAgentKeepsItsNodeWhicheverOrderTheSessionsCome) {
  std::string node = Register();
  std::string job = SubmitRunning();
  // The agent re-registers and replaces its session; the old one's close arrives late.
  int64_t first = Open(node);
  ASSERT_EQ(Register(node, job), node);
  int64_t second = Open(node);
  core_->AgentSessionClosed(node, first);
  EXPECT_TRUE(StaysRunningAfter(10 * kGrace, job));
  // The old session's close arrives first, the new session within the grace.
  ASSERT_EQ(Register(node, job), node);
  core_->AgentSessionClosed(node, second);
  EXPECT_TRUE(StaysRunningAfter(kGrace / 2, job));
  int64_t third = Open(node);
  EXPECT_TRUE(StaysRunningAfter(10 * kGrace, job));
  EXPECT_EQ(NodeState(), proto::ALIVE);
  // The current session still counts.
  core_->AgentSessionClosed(node, third);
  EXPECT_TRUE(FailsAfter(kGrace, job));
}

TEST_F(SchedulerSessionsTest, RestartedSchedulerDeclaresNoHealthyNodeDead) {
  std::string node = Register();
  std::string job = SubmitRunning();
  int64_t session = Open(node);
  // The old scheduler stops; its sessions end as it goes (a close seen after Stop began
  // is not the agent's death).
  core_->Stop();
  core_->AgentSessionClosed(node, session);
  Make();  // a new scheduler over the same state
  EXPECT_EQ(NodeState(), proto::RECONNECTING);
  // Until the agent registers again, it cannot hold a session.
  auto refused = core_->OpenAgentSession(node);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "register")) << refused.status();
  ASSERT_EQ(Register(node, job), node);
  // A close of the old scheduler's session id means nothing to the new one.
  core_->AgentSessionClosed(node, session);
  Open(node);
  EXPECT_TRUE(StaysRunningAfter(10 * kGrace, job));
  EXPECT_EQ(NodeState(), proto::ALIVE);
  EXPECT_EQ(Job(job).live_processes(), 1);
}

TEST_F(SchedulerSessionsTest, SessionsAreRefusedForNodesNotAlive) {
  EXPECT_EQ(core_->OpenAgentSession("node-404").status().code(),
            absl::StatusCode::kFailedPrecondition);
  std::string node = Register();
  std::string job = SubmitRunning();
  core_->AgentSessionClosed(node, Open(node));
  ASSERT_TRUE(FailsAfter(kGrace, job));
  auto refused = core_->OpenAgentSession(node);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "DEAD")) << refused.status();
  // Registered again, it is ALIVE and holds a session again.
  ASSERT_EQ(Register(node), node);
  EXPECT_GT(Open(node), 0);
}

}  // namespace
}  // namespace drover
