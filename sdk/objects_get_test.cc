// drover::Objects::Get's errors when the object never comes: a real store, and an agent
// whose fetches answer what the test scripts.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "drover/objects.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "object_store/testing/store_process.h"
#include "proto/node_agent.grpc.pb.h"

namespace drover {
namespace {

// Answers each FetchObject with the next scripted status (the last one from then on).
class ScriptedAgent final : public proto::ObjectTransfer::Service {
 public:
  explicit ScriptedAgent(std::vector<grpc::Status> answers) : answers_(std::move(answers)) {}

  grpc::Status FetchObject(grpc::ServerContext*, const proto::FetchObjectRequest*,
                           proto::FetchObjectReply*) override {
    absl::MutexLock lock(&mu_);
    const size_t i = std::min(calls_++, answers_.size() - 1);
    return answers_[i];
  }
  size_t calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  const std::vector<grpc::Status> answers_;
  absl::Mutex mu_;
  size_t calls_ ABSL_GUARDED_BY(mu_) = 0;
};

class ObjectsGetTest : public ::testing::Test {
 protected:
  absl::Status GetWith(std::vector<grpc::Status> answers, absl::Duration timeout) {
    agent_ = std::make_unique<ScriptedAgent>(std::move(answers));
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(agent_.get());
    server_ = b.BuildAndStart();
    if (port <= 0) return absl::InternalError("no port for the scripted agent");
    auto objects = Objects::Connect(store_.socket(), absl::StrCat("127.0.0.1:", port), "token");
    if (!objects.ok()) return objects.status();
    absl::Status s = (*objects)->Get("obj", timeout).status();
    server_->Shutdown();
    return s;
  }

  object_store::testing::StoreProcess store_{16 << 20};
  std::unique_ptr<ScriptedAgent> agent_;
  std::unique_ptr<grpc::Server> server_;
};

constexpr char kRefused[] =
    "pull of obj from node-1 (10.0.0.1:7001) failed after 0 of ? bytes: cannot allocate 1.5 "
    "MiB to restore spilled object 'obj'";
constexpr char kOutOfTime[] =
    "the fetch's deadline passed before node-1 (listed as a holder) was tried";

// A holder that refused, then fetches that only ran out of time: the error still names
// the refusal (it says what to do), not only that time ran out.
TEST_F(ObjectsGetTest, AFetchThatOnlyRanOutOfTimeDoesNotHideTheRefusalBeforeIt) {
  absl::Status s = GetWith({grpc::Status(grpc::StatusCode::UNAVAILABLE, kRefused),
                            grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, kOutOfTime)},
                           absl::Seconds(1));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), absl::StrCat("last fetch: ", kOutOfTime))) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), absl::StrCat("an earlier fetch: ", kRefused))) << s;
  EXPECT_GE(agent_->calls(), 2u) << "the fetch was not retried";
}

// The same failure each time is named once.
TEST_F(ObjectsGetTest, TheSameFailureEachTimeIsNamedOnce) {
  absl::Status s =
      GetWith({grpc::Status(grpc::StatusCode::UNAVAILABLE, kRefused)}, absl::Milliseconds(500));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), absl::StrCat("last fetch: ", kRefused))) << s;
  EXPECT_FALSE(absl::StrContains(s.message(), "an earlier fetch")) << s;
}

}  // namespace
}  // namespace drover
