// The Leases service over a real gRPC server on loopback, with the real core and lease
// manager (fake agents): calls waiting for a lease hold no server thread, a returned
// lease answers the oldest, and a driver that goes away drops its queued requests.
#include "scheduler/leases_service.h"

#include <dirent.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/rpc.h"
#include "gtest/gtest.h"
#include "scheduler/testing/core_fakes.h"
#include "scheduler/testing/lease_fakes.h"
#include "tests/util/test_util.h"

namespace drover {
namespace {

constexpr char kToken[] = "leases-service-test";

int Threads() {
  int n = 0;
  DIR* d = opendir("/proc/self/task");
  while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

// A RequestLease in flight through the callback API.
struct Call {
  grpc::ClientContext ctx;
  proto::RequestLeaseRequest req;
  proto::RequestLeaseReply reply;
  grpc::Status status;
  bool done = false;
};

TEST(LeasesServiceTest, WaitingCallsHoldNoThreadAndEndWithTheirDriver) {
  SchedulerOptions o;
  auto core = std::make_unique<SchedulerCore>(o, NewMemoryStateStore(),
                                              std::make_unique<testing::FakeAgents>());
  ASSERT_TRUE(core->Start().ok());
  LeaseManager leases(core->resource_book(), std::make_unique<FakeWorkers>());
  core->SetLeaseManager(&leases);
  PackageStore packages(absl::StrCat(getenv("TEST_TMPDIR"), "/packages"));
  LeasesService service(core.get(), &leases, &packages, kToken);
  grpc::ServerBuilder builder;
  int port = 0;
  AddListeningPort(&builder, "127.0.0.1:0", &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(port, 0);
  auto stub = proto::Leases::NewStub(MakeChannel(absl::StrCat("127.0.0.1:", port)));

  proto::RegisterNodeRequest node;
  node.set_agent_address("10.0.0.1:7000");
  node.set_node_ip("10.0.0.1");
  node.mutable_total()->set_cpus(2);
  ASSERT_TRUE(core->RegisterNode(node).ok());
  proto::RegisterDriverRequest driver;
  driver.set_request_id("driver-1");
  absl::StatusOr<std::string> job = core->RegisterDriver(driver);
  ASSERT_TRUE(job.ok()) << job.status();

  auto ask = [&](const std::string& id, int64_t wait_ms) {
    proto::RequestLeaseRequest req;
    req.set_job_id(*job);
    req.set_request_id(id);
    req.set_wait_ms(wait_ms);
    req.mutable_shape()->set_cpus(1);
    req.mutable_package()->set_hash("abc");
    return req;
  };
  // The node's two CPUs are leased.
  std::vector<std::string> held;
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, kToken);
    proto::RequestLeaseReply reply;
    ASSERT_TRUE(stub->RequestLease(&ctx, ask(absl::StrCat("hold-", i), 0), &reply).ok());
    ASSERT_TRUE(reply.granted()) << reply.pending_reason();
    held.push_back(reply.lease_id());
  }

  // 200 calls wait for a lease, each in its RPC.
  constexpr int kWaiting = 200;
  const int threads_before = Threads();
  absl::Mutex mu;
  std::vector<std::unique_ptr<Call>> calls;
  for (int i = 0; i < kWaiting; ++i) {
    auto c = std::make_unique<Call>();
    PrepareContext(&c->ctx, kToken, std::chrono::seconds(60));
    c->req = ask(absl::StrCat("wait-", i), 30000);
    Call* p = c.get();
    calls.push_back(std::move(c));
    stub->async()->RequestLease(&p->ctx, &p->req, &p->reply, [&mu, p](grpc::Status s) {
      absl::MutexLock l(&mu);
      p->status = s;
      p->done = true;
    });
    // In order: each reaches the queue before the next is sent.
    ASSERT_TRUE(testing::WaitFor([&] { return leases.counts().waiting_calls == i + 1; }));
  }
  // No thread per waiting call (a sync server would hold 200 more).
  EXPECT_LT(Threads() - threads_before, 20);
  auto answered = [&] {
    absl::MutexLock l(&mu);
    int n = 0;
    for (const auto& c : calls) n += c->done;
    return n;
  };
  EXPECT_EQ(answered(), 0);

  // A lease comes back: the oldest call, and only it, is granted.
  {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, kToken);
    proto::ReturnWorkerLeaseRequest req;
    req.set_lease_id(held[0]);
    proto::ReturnWorkerLeaseReply reply;
    ASSERT_TRUE(stub->ReturnLease(&ctx, req, &reply).ok());
  }
  ASSERT_TRUE(testing::WaitFor([&] { return answered() == 1; }));
  {
    absl::MutexLock l(&mu);
    ASSERT_TRUE(calls[0]->done && calls[0]->status.ok()) << calls[0]->status.error_message();
    EXPECT_TRUE(calls[0]->reply.granted());
  }

  // The driver goes away: its job ends and every waiting call is told why.
  core->EndDriver(*job, "its driver disconnected");
  ASSERT_TRUE(testing::WaitFor([&] { return answered() == kWaiting; }));
  {
    absl::MutexLock l(&mu);
    for (int i = 1; i < kWaiting; ++i) {
      ASSERT_EQ(calls[i]->status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << i;
      EXPECT_NE(calls[i]->status.error_message().find("has ended"), std::string::npos)
          << calls[i]->status.error_message();
      EXPECT_NE(calls[i]->status.error_message().find("was dropped"), std::string::npos)
          << calls[i]->status.error_message();
    }
  }
  EXPECT_EQ(leases.counts().pending_requests, 0);
  service.BeginShutdown();
  server->Shutdown();
  core->SetLeaseManager(nullptr);
  core->Stop();
}

// A node's death reaches the driver over its session as it happens: the driver needs
// no GetClusterStatus poll to learn that its objects there are lost.
TEST(LeasesServiceTest, DriverSessionPushesANodesDeathToItsDriver) {
  FakeClock clock;
  SchedulerOptions o;
  o.clock = &clock;
  o.node_timeout = absl::Seconds(10);
  auto core = std::make_unique<SchedulerCore>(o, NewMemoryStateStore(),
                                              std::make_unique<testing::FakeAgents>());
  ASSERT_TRUE(core->Start().ok());
  LeaseManager leases(core->resource_book(), std::make_unique<FakeWorkers>());
  core->SetLeaseManager(&leases);
  PackageStore packages(absl::StrCat(getenv("TEST_TMPDIR"), "/packages-push"));
  LeasesService service(core.get(), &leases, &packages, kToken);
  grpc::ServerBuilder builder;
  int port = 0;
  AddListeningPort(&builder, "127.0.0.1:0", &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(port, 0);
  auto stub = proto::Leases::NewStub(MakeChannel(absl::StrCat("127.0.0.1:", port)));

  proto::RegisterNodeRequest node;
  node.set_agent_address("10.0.0.1:7000");
  node.set_node_ip("10.0.0.1");
  node.mutable_total()->set_cpus(2);
  absl::StatusOr<proto::RegisterNodeReply> registered = core->RegisterNode(node);
  ASSERT_TRUE(registered.ok()) << registered.status();
  proto::RegisterDriverRequest driver;
  driver.set_request_id("driver-push");
  absl::StatusOr<std::string> job = core->RegisterDriver(driver);
  ASSERT_TRUE(job.ok()) << job.status();

  grpc::ClientContext ctx;
  PrepareContext(&ctx, kToken, std::chrono::seconds(30));
  proto::DriverSessionRequest req;
  req.set_job_id(*job);
  std::unique_ptr<grpc::ClientReader<proto::DriverNotice>> reader = stub->DriverSession(&ctx, req);
  proto::DriverNotice notice;
  ASSERT_TRUE(reader->Read(&notice));
  EXPECT_TRUE(notice.attached());
  ASSERT_EQ(notice.nodes_size(), 1);
  EXPECT_EQ(notice.nodes(0).node_id(), registered->node_id());
  EXPECT_TRUE(notice.nodes(0).alive());
  EXPECT_EQ(notice.nodes(0).agent_address(), "10.0.0.1:7000");

  // The node falls silent past the node timeout: the monitor declares it dead and the
  // session tells the driver, unasked.
  clock.Advance(absl::Seconds(11));
  ASSERT_TRUE(reader->Read(&notice)) << "no notice of the node's death";
  EXPECT_FALSE(notice.attached());
  ASSERT_EQ(notice.nodes_size(), 1);
  EXPECT_EQ(notice.nodes(0).node_id(), registered->node_id());
  EXPECT_FALSE(notice.nodes(0).alive());
  EXPECT_NE(notice.nodes(0).reason().find("no heartbeat"), std::string::npos)
      << notice.nodes(0).reason();

  ctx.TryCancel();
  reader->Finish();
  service.BeginShutdown();
  server->Shutdown();
  core->SetLeaseManager(nullptr);
  core->Stop();
}

}  // namespace
}  // namespace drover
