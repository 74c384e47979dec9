// The agent's SchedulerSession against the real scheduler service (core and gRPC
// server in this process, on loopback): it opens a session after each registration,
// opens one again when the stream breaks, waits for a registration when the scheduler
// does not know the node, and its Stop is seen by the scheduler as the agent's end.
#include "node_agent/scheduler_session.h"

#include <atomic>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/net.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "scheduler/scheduler_core.h"
#include "scheduler/scheduler_service.h"
#include "scheduler/testing/core_fakes.h"
#include "tests/util/test_util.h"

namespace drover {
namespace {

using testing::WaitFor;

constexpr char kToken[] = "scheduler-session-token";

class SchedulerSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SchedulerOptions o;
    o.node_timeout = absl::Hours(1);  // only sessions can kill a node here
    o.session_grace = absl::Seconds(1);
    o.clock = &clock_;
    core_ = std::make_unique<SchedulerCore>(o, NewMemoryStateStore(),
                                            std::make_unique<testing::FakeAgents>());
    ASSERT_TRUE(core_->Start().ok());
    port_ = *PickFreePort();
    Serve();
    SchedulerSessionOptions so;
    so.scheduler_address = absl::StrCat("127.0.0.1:", port_);
    so.token = kToken;
    session_ = std::make_unique<SchedulerSession>(so, [this] { ++settled_; });
    session_->Start();
  }

  void TearDown() override {
    session_->Stop();
    StopServing();
  }

  // A scheduler service over core_ on port_ (again, after StopServing).
  void Serve() {
    service_ = std::make_unique<SchedulerService>(core_.get(), kToken);
    grpc::ServerBuilder b;
    int selected = 0;
    b.AddListeningPort(absl::StrCat("127.0.0.1:", port_), grpc::InsecureServerCredentials(),
                       &selected);
    b.RegisterService(service_.get());
    server_ = b.BuildAndStart();
    ASSERT_EQ(selected, port_);
  }
  void StopServing() {
    if (server_ == nullptr) return;
    service_->BeginShutdown();
    server_->Shutdown();
    server_.reset();
  }

  std::string Register(const std::string& id = "") {
    proto::RegisterNodeRequest req;
    req.set_node_id(id);
    req.set_agent_address("127.0.0.1:7000");
    req.set_node_ip("127.0.0.1");
    req.mutable_total()->set_cpus(1);
    auto r = core_->RegisterNode(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->node_id() : "";
  }

  proto::NodeState NodeState() { return core_->ClusterStatus().nodes(0).state(); }
  int open_sessions() { return service_->sessions().open_sessions(); }

  FakeClock clock_;
  int port_ = 0;
  std::unique_ptr<SchedulerCore> core_;
  std::unique_ptr<SchedulerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<SchedulerSession> session_;
  std::atomic<int> settled_{0};
};

TEST_F(SchedulerSessionTest, OpensAfterEachRegistrationReplacingTheOldOne) {
  EXPECT_EQ(session_->session_id(), 0);
  std::string node = Register();
  session_->Registered(node);
  ASSERT_TRUE(WaitFor([&] { return session_->session_id() > 0; }));
  EXPECT_EQ(settled_, 1);
  EXPECT_EQ(open_sessions(), 1);
  const int64_t first = session_->session_id();
  // Registered again (the scheduler had forgotten it): a new session replaces the old.
  ASSERT_EQ(Register(node), node);
  session_->Registered(node);
  ASSERT_TRUE(WaitFor([&] { return session_->session_id() > first; }));
  EXPECT_EQ(open_sessions(), 1);
  EXPECT_EQ(settled_, 1);  // once only
  clock_.Advance(absl::Seconds(10));
  EXPECT_FALSE(WaitFor([&] { return NodeState() != proto::ALIVE; }, absl::Milliseconds(200)));
}

TEST_F(SchedulerSessionTest, OpensAgainWhenTheStreamBreaks) {
  std::string node = Register();
  session_->Registered(node);
  ASSERT_TRUE(WaitFor([&] { return session_->session_id() > 0; }));
  const int64_t first = session_->session_id();
  // The scheduler's server goes and comes back on the same port (the core stays).
  StopServing();
  ASSERT_TRUE(WaitFor([&] { return session_->session_id() == 0; }));
  Serve();
  ASSERT_TRUE(WaitFor([&] { return session_->session_id() > first; }));
  EXPECT_EQ(open_sessions(), 1);
  EXPECT_EQ(NodeState(), proto::ALIVE);
}

TEST_F(SchedulerSessionTest, UnknownNodeWaitsForTheNextRegistration) {
  session_->Registered("node-404");  // the scheduler does not know it: refused
  EXPECT_FALSE(WaitFor([&] { return session_->session_id() > 0; }, absl::Milliseconds(300)));
  EXPECT_EQ(settled_, 0);
  std::string node = Register();
  session_->Registered(node);
  ASSERT_TRUE(WaitFor([&] { return session_->session_id() > 0; }));
  EXPECT_EQ(settled_, 1);
}

TEST_F(SchedulerSessionTest, StopIsSeenAsTheAgentsEnd) {
  std::string node = Register();
  session_->Registered(node);
  ASSERT_TRUE(WaitFor([&] { return open_sessions() == 1; }));
  session_->Stop();
  ASSERT_TRUE(WaitFor([&] { return open_sessions() == 0; }));
  EXPECT_EQ(NodeState(), proto::ALIVE);  // within the grace
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(WaitFor([&] { return NodeState() == proto::DEAD; }));
  EXPECT_NE(core_->ClusterStatus().nodes(0).reason().find("closed its connection"),
            std::string::npos)
      << core_->ClusterStatus().nodes(0).reason();
}

}  // namespace
}  // namespace drover
