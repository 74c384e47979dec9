// The progress bar of a long pull: PullProgress alone (a scripted agent answer, a fake
// clock, the terminal's bytes captured), and drover::Objects::Get showing it while a
// real store waits for an agent whose pull the test paces.
#include "sdk/internal/pull_progress.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/clock.h"
#include "common/progress_line.h"
#include "common/progress_line_testing.h"
#include "common/rpc.h"
#include "drover/objects.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "object_store/client.h"
#include "object_store/testing/store_process.h"
#include "proto/node_agent.grpc.pb.h"
#include "sdk/internal/objects_internal.h"
#include "tests/util/test_util.h"

namespace drover {
namespace {

using internal::FetchProgress;
using internal::PullProgress;
using internal::PullProgressOptions;
using Screen = testing::CapturedTerminal;
using testing::WaitFor;

constexpr int64_t kMiB = 1 << 20;

TEST(PullProgressTest, AsksOnlyAfterShowAfterThenDrawsABarAndErasesIt) {
  FakeClock clock;
  Screen screen;
  auto line = screen.Line(&clock);
  int polls = 0;
  FetchProgress answer{true, 16 * kMiB, 64 * kMiB, "node-7"};
  {
    PullProgress bar(line.get(), &clock, {absl::Seconds(1), absl::Milliseconds(250)}, "w",
                     [&]() -> absl::StatusOr<FetchProgress> {
                       ++polls;
                       return answer;
                     });
    bar.Tick();
    clock.Advance(absl::Milliseconds(900));
    bar.Tick();
    EXPECT_EQ(polls, 0) << "a pull shorter than show_after costs no call";
    EXPECT_EQ(screen.text(), "");
    clock.Advance(absl::Milliseconds(100));
    bar.Tick();
    EXPECT_EQ(polls, 1);
    EXPECT_TRUE(absl::StrContains(screen.text(), "\rdrover: pulling w from node-7 [")) << screen.text();
    EXPECT_TRUE(absl::StrContains(screen.text(), " 25%  16.0 MiB/64.0 MiB")) << screen.text();
    bar.Tick();  // not due yet
    EXPECT_EQ(polls, 1);
    clock.Advance(absl::Milliseconds(250));
    answer.received_bytes = 48 * kMiB;
    bar.Tick();
    EXPECT_EQ(polls, 2);
    EXPECT_TRUE(absl::StrContains(screen.text(), " 75%  48.0 MiB/64.0 MiB  128.0 MiB/s  ETA 0s"))
        << screen.text();
  }
  EXPECT_TRUE(absl::EndsWith(screen.text(), "\r\033[K")) << "erased when the Get ends";
}

TEST(PullProgressTest, NothingWhileNoPullRunsAndNoMoreAsksOfAnAgentWithoutTheRpc) {
  FakeClock clock;
  Screen screen;
  auto line = screen.Line(&clock);
  int polls = 0;
  absl::StatusOr<FetchProgress> answer = FetchProgress{};  // waiting for a holder
  PullProgress bar(line.get(), &clock, {absl::ZeroDuration(), absl::Milliseconds(100)}, "w",
                   [&] {
                     ++polls;
                     return answer;
                   });
  bar.Tick();
  EXPECT_EQ(polls, 1);
  answer = absl::UnimplementedError("an older agent");
  clock.Advance(absl::Seconds(1));
  bar.Tick();
  clock.Advance(absl::Seconds(1));
  bar.Tick();
  EXPECT_EQ(polls, 2);
  EXPECT_EQ(screen.text(), "");
}

// An agent whose FetchObject runs until the test lets it end (then it puts the object
// into the node's real store, as a finished pull does) and whose GetFetchProgress
// answers what the test says.
class PacedAgent final : public proto::ObjectTransfer::Service {
 public:
  explicit PacedAgent(std::string store_socket) : store_socket_(std::move(store_socket)) {}

  grpc::Status FetchObject(grpc::ServerContext*, const proto::FetchObjectRequest* req,
                           proto::FetchObjectReply* reply) override {
    fetching_.Notify();
    finish_.WaitForNotification();
    auto store = object_store::Client::Connect(store_socket_);
    if (!store.ok() || !(*store)->Put(req->object_id(), std::string("payload")).ok()) {
      return grpc::Status(grpc::StatusCode::INTERNAL, "cannot put the pulled copy");
    }
    reply->set_size(7);
    reply->set_source_node("node-7");
    return grpc::Status::OK;
  }
  grpc::Status GetFetchProgress(grpc::ServerContext*, const proto::GetFetchProgressRequest*,
                                proto::GetFetchProgressReply* reply) override {
    absl::MutexLock lock(&mu_);
    ++polls_;
    reply->set_pulling(true);
    reply->set_received_bytes(received_);
    reply->set_total_bytes(64 * kMiB);
    reply->set_source_node("node-7");
    return grpc::Status::OK;
  }

  void SetReceived(int64_t n) {
    absl::MutexLock lock(&mu_);
    received_ = n;
  }
  int polls() {
    absl::MutexLock lock(&mu_);
    return polls_;
  }
  absl::Notification& fetching() { return fetching_; }
  void Finish() { finish_.Notify(); }

 private:
  const std::string store_socket_;
  absl::Notification fetching_, finish_;
  absl::Mutex mu_;
  int64_t received_ ABSL_GUARDED_BY(mu_) = 0;
  int polls_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(ObjectsPullProgressTest, GetShowsTheBarOfALongPullAndNoneForALocalObject) {
  object_store::testing::StoreProcess store(64 * kMiB);
  PacedAgent agent(store.socket());
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  b.RegisterService(&agent);
  std::unique_ptr<grpc::Server> server = b.BuildAndStart();
  ASSERT_GT(port, 0);

  auto objects = Objects::Connect(store.socket(), absl::StrCat("127.0.0.1:", port), "token");
  ASSERT_TRUE(objects.ok()) << objects.status();
  FakeClock clock;
  Screen screen;
  internal::ObjectsAccess::ShowPullProgress(**objects, screen.Line(&clock), &clock,
                                            {absl::Seconds(1), absl::Milliseconds(250)});
  agent.SetReceived(16 * kMiB);
  absl::StatusOr<Buffer> got = absl::UnknownError("not yet");
  std::thread getter([&] { got = (*objects)->Get("big", absl::Seconds(60)); });
  ASSERT_TRUE(agent.fetching().WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(agent.polls(), 0) << "asked before the pull had lasted show_after";
  clock.Advance(absl::Seconds(1));
  EXPECT_TRUE(WaitFor([&] { return absl::StrContains(screen.text(), " 25%  16.0 MiB/64.0 MiB"); }))
      << screen.text();
  EXPECT_TRUE(absl::StrContains(screen.text(), "\rdrover: pulling big from node-7 [="))
      << screen.text();
  agent.SetReceived(48 * kMiB);
  clock.Advance(absl::Seconds(1));
  EXPECT_TRUE(WaitFor([&] { return absl::StrContains(screen.text(), " 75%  48.0 MiB/64.0 MiB"); }))
      << screen.text();
  agent.Finish();
  getter.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(absl::EndsWith(screen.text(), "\r\033[K")) << "the bar is erased: " << screen.text();

  // Here now: no fetch, no question, nothing drawn.
  const int polls = agent.polls();
  const std::string before = screen.text();
  clock.Advance(absl::Seconds(5));
  ASSERT_TRUE((*objects)->Get("big", absl::Seconds(5)).ok());
  EXPECT_EQ(agent.polls(), polls);
  EXPECT_EQ(screen.text(), before);
  server->Shutdown();
}

}  // namespace
}  // namespace drover
