// ObjectReporter against a real object store and a fake scheduler's object directory.
#include "node_agent/object_reporter.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/auth.h"
#include "common/rpc.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "object_store/client.h"
#include "object_store/testing/store_process.h"
#include "proto/scheduler.grpc.pb.h"
#include "tests/util/test_util.h"

namespace drover {
namespace {

using testing::WaitFor;

constexpr char kToken[] = "reporter-test-token";

// The directory's side: records every AddObjectLocations, and can hold its answer.
class FakeDirectory final : public proto::Scheduler::Service {
 public:
  grpc::Status AddObjectLocations(grpc::ServerContext* ctx,
                                  const proto::AddObjectLocationsRequest* req,
                                  proto::AddObjectLocationsReply*) override {
    if (auto s = CheckToken(*ctx, kToken); !s.ok()) return s;
    absl::MutexLock lock(&mu);
    for (const auto& o : req->objects()) added.push_back(o.object_id());
    mu.Await(absl::Condition(+[](bool* hold) { return !*hold; }, &hold_adds));
    return grpc::Status::OK;
  }
  grpc::Status RemoveObjectLocations(grpc::ServerContext* ctx,
                                     const proto::RemoveObjectLocationsRequest*,
                                     proto::RemoveObjectLocationsReply*) override {
    return CheckToken(*ctx, kToken);
  }
  int Adds(const std::string& id) {
    absl::MutexLock lock(&mu);
    return static_cast<int>(std::count(added.begin(), added.end(), id));
  }

  absl::Mutex mu;
  std::vector<std::string> added ABSL_GUARDED_BY(mu);
  bool hold_adds ABSL_GUARDED_BY(mu) = false;
};

std::unique_ptr<grpc::Server> Serve(FakeDirectory* directory, int* port) {
  grpc::ServerBuilder b;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), port);
  b.RegisterService(directory);
  return b.BuildAndStart();
}

// The scheduler may forget this node (a restart, or the node declared dead and back)
// after it took an add but before the agent heard the answer; the agent then resyncs.
// The late answer must not cancel the resync's add: the new directory has never seen it.
TEST(ObjectReporterTest, AnAddAnsweredAfterAResyncIsSentAgain) {
  object_store::testing::ScratchDir dir;
  const std::string socket = dir.path() + "/store.sock";
  object_store::testing::RestartableStore store(socket);
  ASSERT_TRUE(store.StartAndWait());
  auto client = object_store::Client::Connect(socket);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Put("obj-x", "some bytes").ok());

  FakeDirectory directory;
  {
    absl::MutexLock lock(&directory.mu);
    directory.hold_adds = true;
  }
  int port = 0;
  std::unique_ptr<grpc::Server> server = Serve(&directory, &port);
  ASSERT_NE(server, nullptr);

  ObjectReporterOptions o;
  o.socket_path = socket;
  o.scheduler_address = absl::StrCat("127.0.0.1:", port);
  o.token = kToken;
  ObjectReporter reporter(o);
  reporter.SetNodeId("node-1");
  reporter.Start();
  ASSERT_TRUE(WaitFor([&] { return directory.Adds("obj-x") == 1; }, absl::Seconds(30)));
  // The add is taken and its answer held: the directory forgets, the agent resyncs.
  reporter.Resync();
  {
    absl::MutexLock lock(&directory.mu);
    directory.hold_adds = false;
  }
  EXPECT_TRUE(WaitFor([&] { return directory.Adds("obj-x") >= 2; }, absl::Seconds(30)))
      << "the resynced directory never heard of obj-x";
  reporter.Stop();
  server->Shutdown();
}

// Nothing held: an object is added once, and a plain Resync adds it again.
TEST(ObjectReporterTest, AResyncAddsEveryHeldObjectAgain) {
  object_store::testing::ScratchDir dir;
  const std::string socket = dir.path() + "/store.sock";
  object_store::testing::RestartableStore store(socket);
  ASSERT_TRUE(store.StartAndWait());
  auto client = object_store::Client::Connect(socket);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Put("obj-a", "a").ok());
  ASSERT_TRUE((*client)->Put("obj-b", "b").ok());

  FakeDirectory directory;
  int port = 0;
  std::unique_ptr<grpc::Server> server = Serve(&directory, &port);
  ASSERT_NE(server, nullptr);

  ObjectReporterOptions o;
  o.socket_path = socket;
  o.scheduler_address = absl::StrCat("127.0.0.1:", port);
  o.token = kToken;
  ObjectReporter reporter(o);
  reporter.SetNodeId("node-1");
  reporter.Start();
  ASSERT_TRUE(WaitFor(
      [&] { return directory.Adds("obj-a") == 1 && directory.Adds("obj-b") == 1; },
      absl::Seconds(30)));
  reporter.Resync();
  EXPECT_TRUE(WaitFor(
      [&] { return directory.Adds("obj-a") == 2 && directory.Adds("obj-b") == 2; },
      absl::Seconds(30)));
  reporter.Stop();
  server->Shutdown();
}

}  // namespace
}  // namespace drover
