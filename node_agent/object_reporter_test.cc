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

// A real store holding `ids`, a fake directory and a reporter between them.
class ObjectReporterTest : public ::testing::Test {
 protected:
  // `hold_adds`: the directory holds its answers to adds from the first one on.
  void StartWith(const std::vector<std::string>& ids, bool hold_adds) {
    ASSERT_TRUE(store_.StartAndWait());
    auto client = object_store::Client::Connect(socket_);
    ASSERT_TRUE(client.ok()) << client.status();
    for (const std::string& id : ids) ASSERT_TRUE((*client)->Put(id, "bytes of " + id).ok());
    Hold(hold_adds);
    int port = 0;
    server_ = Serve(&directory_, &port);
    ASSERT_NE(server_, nullptr);
    ObjectReporterOptions o;
    o.socket_path = socket_;
    o.scheduler_address = absl::StrCat("127.0.0.1:", port);
    o.token = kToken;
    reporter_ = std::make_unique<ObjectReporter>(o);
    reporter_->SetNodeId("node-1");
    reporter_->Start();
  }
  void TearDown() override {
    Hold(false);  // a held answer would keep Stop and Shutdown waiting
    if (reporter_) reporter_->Stop();
    if (server_) server_->Shutdown();
  }
  void Hold(bool hold) {
    absl::MutexLock lock(&directory_.mu);
    directory_.hold_adds = hold;
  }

  object_store::testing::ScratchDir dir_;
  const std::string socket_ = dir_.path() + "/store.sock";
  object_store::testing::RestartableStore store_{socket_};
  FakeDirectory directory_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<ObjectReporter> reporter_;
};

// The scheduler may forget this node (a restart, or the node declared dead and back)
// after it took an add but before the agent heard the answer; the agent then resyncs.
// The late answer must not cancel the resync's add: the new directory has never seen it.
TEST_F(ObjectReporterTest, AnAddAnsweredAfterAResyncIsSentAgain) {
  ASSERT_NO_FATAL_FAILURE(StartWith({"obj-x"}, /*hold_adds=*/true));
  ASSERT_TRUE(WaitFor([&] { return directory_.Adds("obj-x") == 1; }, absl::Seconds(30)));
  // The add is taken and its answer held: the directory forgets, the agent resyncs.
  reporter_->Resync();
  Hold(false);
  EXPECT_TRUE(WaitFor([&] { return directory_.Adds("obj-x") >= 2; }, absl::Seconds(30)))
      << "the resynced directory never heard of obj-x";
}

// Nothing held: an object is added once, and a plain Resync adds it again.
TEST_F(ObjectReporterTest, AResyncAddsEveryHeldObjectAgain) {
  ASSERT_NO_FATAL_FAILURE(StartWith({"obj-a", "obj-b"}, /*hold_adds=*/false));
  ASSERT_TRUE(WaitFor(
      [&] { return directory_.Adds("obj-a") == 1 && directory_.Adds("obj-b") == 1; },
      absl::Seconds(30)));
  reporter_->Resync();
  EXPECT_TRUE(WaitFor(
      [&] { return directory_.Adds("obj-a") == 2 && directory_.Adds("obj-b") == 2; },
      absl::Seconds(30)));
}

}  // namespace
}  // namespace drover
