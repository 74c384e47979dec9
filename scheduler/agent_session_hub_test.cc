// Scheduler.AgentSession over a real gRPC server on loopback, with the core on a
// FakeClock: a session whose agent side goes away kills its node after the grace; a
// scheduler shutting down or a newer session of the node ends a session without that.
#include "scheduler/agent_session_hub.h"

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/clock.h"
#include "common/rpc.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "proto/scheduler.grpc.pb.h"
#include "scheduler/scheduler_service.h"
#include "scheduler/testing/core_fakes.h"
#include "tests/util/test_util.h"

namespace drover {
namespace {

using testing::FakeAgents;
using testing::WaitFor;

constexpr char kToken[] = "session-test-token";
constexpr absl::Duration kGrace = absl::Seconds(1);

// One AgentSession call from the client side.
struct ClientSession {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReader<proto::AgentSessionNotice>> reader;
  proto::AgentSessionNotice notice;
  bool opened = false;

  // Reads to the end of the stream: its status.
  grpc::Status End() {
    proto::AgentSessionNotice more;
    while (reader->Read(&more)) {
    }
    return reader->Finish();
  }
};

class AgentSessionHubTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SchedulerOptions o;
    o.node_timeout = absl::Hours(1);
    o.session_grace = kGrace;
    o.clock = &clock_;
    core_ = std::make_unique<SchedulerCore>(o, NewMemoryStateStore(),
                                            std::make_unique<FakeAgents>());
    ASSERT_TRUE(core_->Start().ok());
    service_ = std::make_unique<SchedulerService>(core_.get(), kToken);
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(service_.get());
    server_ = b.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = proto::Scheduler::NewStub(MakeChannel(absl::StrCat("127.0.0.1:", port)));

    proto::RegisterNodeRequest reg;
    reg.set_agent_address("10.0.0.1:7000");
    reg.set_node_ip("10.0.0.1");
    reg.mutable_total()->set_cpus(8);
    grpc::ClientContext ctx;
    PrepareContext(&ctx, kToken);
    proto::RegisterNodeReply reply;
    ASSERT_TRUE(stub_->RegisterNode(&ctx, reg, &reply).ok());
    node_ = reply.node_id();
    auto job = core_->SubmitJob(testing::OneCpuJob());
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = job->job_id();
    ASSERT_TRUE(WaitFor([&] { return JobState() == proto::RUNNING; }));
  }

  void TearDown() override {
    service_->BeginShutdown();
    server_->Shutdown();
  }

  std::unique_ptr<ClientSession> Open(const std::string& node_id,
                                      const std::string& token = kToken) {
    auto s = std::make_unique<ClientSession>();
    s->ctx.AddMetadata(kTokenMetadataKey, token);
    proto::AgentSessionRequest req;
    req.set_node_id(node_id);
    s->reader = stub_->AgentSession(&s->ctx, req);
    s->opened = s->reader->Read(&s->notice);
    return s;
  }

  proto::JobState JobState() { return core_->GetJob(job_, 0, absl::ZeroDuration())->state(); }
  proto::NodeState NodeState() { return core_->ClusterStatus().nodes(0).state(); }

  // Move time on by `d`; the monitor wakes a few ms after an Advance. Whether the job
  // then stays RUNNING (watched for 300 ms) or FAILS (within 10 s).
  bool StaysRunningAfter(absl::Duration d) {
    clock_.Advance(d);
    return !WaitFor([&] { return JobState() != proto::RUNNING; }, absl::Milliseconds(300));
  }
  bool FailsAfter(absl::Duration d) {
    clock_.Advance(d);
    return WaitFor([&] { return JobState() == proto::FAILED; });
  }

  FakeClock clock_;
  std::unique_ptr<SchedulerCore> core_;
  std::unique_ptr<SchedulerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<proto::Scheduler::Stub> stub_;
  std::string node_;
  std::string job_;
};

TEST_F(AgentSessionHubTest, RefusesWrongTokenMissingNodeAndUnknownNode) {
  auto wrong = Open(node_, "not-the-token");
  EXPECT_FALSE(wrong->opened);
  EXPECT_EQ(wrong->End().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  auto missing = Open("");
  EXPECT_FALSE(missing->opened);
  EXPECT_EQ(missing->End().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  auto unknown = Open("node-404");
  EXPECT_FALSE(unknown->opened);
  grpc::Status s = unknown->End();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "node-404 is not registered"))
      << s.error_message();
  EXPECT_EQ(service_->sessions().open_sessions(), 0);
}

TEST_F(AgentSessionHubTest, AgentSideGoneKillsTheNodeAfterTheGrace) {
  auto session = Open(node_);
  ASSERT_TRUE(session->opened);
  EXPECT_GT(session->notice.session_id(), 0);
  EXPECT_EQ(session->notice.grace_ms(), 1000);
  EXPECT_EQ(service_->sessions().open_sessions(), 1);
  session->ctx.TryCancel();  // as the kernel's close of a dead agent's connection does
  ASSERT_TRUE(WaitFor([&] { return service_->sessions().open_sessions() == 0; }));
  EXPECT_TRUE(StaysRunningAfter(kGrace - absl::Milliseconds(1)));
  EXPECT_TRUE(FailsAfter(absl::Milliseconds(1)));
  EXPECT_EQ(NodeState(), proto::DEAD);
}

TEST_F(AgentSessionHubTest, ShuttingDownEndsSessionsWithoutKillingTheirNodes) {
  auto session = Open(node_);
  ASSERT_TRUE(session->opened);
  service_->BeginShutdown();
  grpc::Status s = session->End();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "shutting down")) << s.error_message();
  auto late = Open(node_);  // the server still answers until its Shutdown
  EXPECT_FALSE(late->opened);
  EXPECT_EQ(late->End().error_code(), grpc::StatusCode::UNAVAILABLE);
  server_->Shutdown();
  EXPECT_TRUE(StaysRunningAfter(10 * kGrace));
  EXPECT_EQ(NodeState(), proto::ALIVE);
}

TEST_F(AgentSessionHubTest, NewerSessionReplacesTheOldOneWhoseEndKillsNothing) {
  auto first = Open(node_);
  ASSERT_TRUE(first->opened);
  auto second = Open(node_);
  ASSERT_TRUE(second->opened);
  EXPECT_GT(second->notice.session_id(), first->notice.session_id());
  grpc::Status s = first->End();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "replaced by a newer session of node " + node_))
      << s.error_message();
  EXPECT_EQ(service_->sessions().open_sessions(), 1);
  EXPECT_TRUE(StaysRunningAfter(10 * kGrace));
  // The newer one is the one that counts.
  second->ctx.TryCancel();
  ASSERT_TRUE(WaitFor([&] { return service_->sessions().open_sessions() == 0; }));
  EXPECT_TRUE(FailsAfter(kGrace));
}

}  // namespace
}  // namespace drover
