// ObjectTransfer over real gRPC on loopback: several "nodes" in one process, each its
// own grpc::Server (port 0, the token) serving the ObjectTransfer service over a fake
// store, and a real SchedulerCore + SchedulerService as the object directory.
#include "node_agent/object_transfer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/auth.h"
#include "common/rpc.h"
#include "node_agent/object_transfer_raw.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "node_agent/object_transfer_service.h"
#include "node_agent/testing/fake_local_objects.h"
#include "proto/node_agent.grpc.pb.h"
#include "proto/scheduler.grpc.pb.h"
#include "scheduler/agent_client.h"
#include "scheduler/scheduler_core.h"
#include "scheduler/scheduler_service.h"
#include "scheduler/state_store.h"
#include "tests/util/test_util.h"

namespace drover {
namespace {

constexpr char kToken[] = "transfer-test-token";
constexpr int64_t kMiB = 1 << 20;

// Deterministic pseudo-random bytes (splitmix64), fast enough for 64 MiB.
std::string Pattern(int64_t n, uint64_t seed) {
  std::string out(n, '\0');
  uint64_t x = seed;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    std::memcpy(&out[i], &z, 8);
  }
  for (; i < n; ++i) out[i] = static_cast<char>(i * 131 + seed);
  return out;
}

// FNV-1a over 64-bit words (and the tail bytes).
uint64_t Checksum(const std::string& s) {
  uint64_t h = 14695981039346656037ULL;
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 1099511628211ULL;
  }
  for (; i < s.size(); ++i) h = (h ^ static_cast<uint8_t>(s[i])) * 1099511628211ULL;
  return h;
}

// A holder that sends the first `chunks` chunks of a `total`-byte object, then hangs
// (as a node whose process died would, from the reader's side) until the test kills
// its server, which cancels the call.
class StallingHolder final : public proto::ObjectTransfer::Service {
 public:
  StallingHolder(int64_t total, int chunks) : total_(total), chunks_(chunks) {}

  grpc::Status ReadObject(grpc::ServerContext* ctx, const proto::ReadObjectRequest* req,
                          grpc::ServerWriter<proto::ObjectChunk>* writer) override {
    std::string data(4 * kMiB, 'x');
    for (int i = 0; i < chunks_; ++i) {
      proto::ObjectChunk c;
      c.set_offset(i * 4 * kMiB);
      c.set_total_size(total_);
      c.set_data(data);
      if (i == 0) c.set_metadata("stalling-meta");
      if (!writer->Write(c)) return grpc::Status::CANCELLED;
    }
    absl::MutexLock lock(&mu_);
    stalled_ = true;
    // Not a fixed sleep: re-checks the cancellation every 10 ms.
    while (!ctx->IsCancelled()) cv_.WaitWithTimeout(&mu_, absl::Milliseconds(10));
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "holder process died");
  }
  grpc::Status FetchObject(grpc::ServerContext*, const proto::FetchObjectRequest*,
                           proto::FetchObjectReply*) override {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "stalling holder");
  }

  bool WaitStalled(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&stalled_), timeout);
  }

 private:
  const int64_t total_;
  const int chunks_;
  absl::Mutex mu_;
  absl::CondVar cv_;  // never signalled: only a bounded wait between checks
  bool stalled_ ABSL_GUARDED_BY(mu_) = false;
};

struct Node {
  std::string node_id;
  std::string address;
  std::unique_ptr<testing::FakeLocalObjects> store;
  std::unique_ptr<ObjectTransfer> transfer;
  std::unique_ptr<grpc::Service> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<proto::ObjectTransfer::Stub> stub;

  void Kill() {
    if (server) server->Shutdown(std::chrono::system_clock::now());
  }
};

class ObjectTransferTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SchedulerOptions so;
    so.node_timeout = absl::Minutes(5);  // the fake nodes send no heartbeats
    core_ = std::make_unique<SchedulerCore>(so, NewMemoryStateStore(),
                                            NewGrpcAgentClient(kToken));
    ASSERT_TRUE(core_->Start().ok());
    scheduler_service_ = std::make_unique<SchedulerService>(core_.get(), kToken);
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(scheduler_service_.get());
    scheduler_server_ = b.BuildAndStart();
    ASSERT_GT(port, 0);
    scheduler_address_ = absl::StrCat("127.0.0.1:", port);
    core_->SetAddress(scheduler_address_);
    scheduler_ = proto::Scheduler::NewStub(MakeChannel(scheduler_address_));
  }

  void TearDown() override {
    for (auto& n : nodes_) n->Kill();
    for (auto& n : nodes_) {
      if (n->server) n->server->Wait();
      if (n->transfer) n->transfer->Shutdown();
    }
    nodes_.clear();
    scheduler_server_->Shutdown(std::chrono::system_clock::now());
    core_->Stop();
  }

  // A node with a fake store (`capacity` < 0: unbounded) serving ObjectTransfer, or
  // serving `custom` instead; registered with the scheduler.
  Node* AddNode(int64_t capacity = -1, std::unique_ptr<grpc::Service> custom = nullptr,
                ObjectTransferOptions o = ObjectTransferOptions()) {
    auto n = std::make_unique<Node>();
    n->store = std::make_unique<testing::FakeLocalObjects>(capacity);
    o.token = kToken;
    o.scheduler_address = scheduler_address_;
    n->transfer = std::make_unique<ObjectTransfer>(o, n->store.get());
    n->service = custom ? std::move(custom)
                        : std::make_unique<ObjectTransferService>(kToken, n->transfer.get());
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    ObjectTransfer::ConfigureServer(&b);
    b.RegisterService(n->service.get());
    n->server = b.BuildAndStart();
    EXPECT_GT(port, 0);
    n->address = absl::StrCat("127.0.0.1:", port);
    n->stub = proto::ObjectTransfer::NewStub(MakeChannel(n->address));

    proto::RegisterNodeRequest req;
    req.set_hostname(absl::StrCat("host-", nodes_.size()));
    req.set_agent_address(n->address);
    req.set_node_ip("127.0.0.1");
    req.mutable_total()->set_cpus(1);
    proto::RegisterNodeReply reply;
    grpc::ClientContext ctx;
    PrepareContext(&ctx, kToken);
    grpc::Status s = scheduler_->RegisterNode(&ctx, req, &reply);
    EXPECT_TRUE(s.ok()) << s.error_message();
    n->node_id = reply.node_id();
    n->transfer->SetNodeId(n->node_id);
    nodes_.push_back(std::move(n));
    return nodes_.back().get();
  }

  // A holder of `id` (`total` bytes, announced) that sends its first `chunks` chunks
  // and then stalls; `*service` is its StallingHolder.
  Node* AddStallingHolder(const std::string& id, int64_t total, int chunks,
                          StallingHolder** service) {
    auto stalling = std::make_unique<StallingHolder>(total, chunks);
    *service = stalling.get();
    Node* n = AddNode(-1, std::move(stalling));
    Announce(n, id, total);
    return n;
  }

  // Tells the directory that `n` holds `id` (`size` bytes).
  void Announce(Node* n, const std::string& id, int64_t size) {
    proto::AddObjectLocationsRequest req;
    req.set_node_id(n->node_id);
    auto* o = req.add_objects();
    o->set_object_id(id);
    o->set_size(size);
    proto::AddObjectLocationsReply reply;
    grpc::ClientContext ctx;
    PrepareContext(&ctx, kToken);
    grpc::Status s = scheduler_->AddObjectLocations(&ctx, req, &reply);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  void Put(Node* n, const std::string& id, const std::string& data,
           const std::string& metadata = "") {
    ASSERT_TRUE(n->store->Put(id, data, metadata).ok());
    Announce(n, id, static_cast<int64_t>(data.size()));
  }

  grpc::Status Fetch(Node* n, const std::string& id, proto::FetchObjectReply* reply,
                     std::chrono::milliseconds timeout = std::chrono::milliseconds(30000),
                     const std::string& token = kToken, bool wait_for_holder = false) {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, token, timeout + kServerAnswerGrace);  // as the SDK calls it
    proto::FetchObjectRequest req;
    req.set_object_id(id);
    req.set_timeout_ms(timeout.count());
    req.set_wait_for_holder(wait_for_holder);
    return n->stub->FetchObject(&ctx, req, reply);
  }

  std::vector<std::string> Holders(const std::string& id) {
    proto::GetObjectLocationsRequest req;
    req.set_object_id(id);
    proto::GetObjectLocationsReply reply;
    grpc::ClientContext ctx;
    PrepareContext(&ctx, kToken);
    EXPECT_TRUE(scheduler_->GetObjectLocations(&ctx, req, &reply).ok());
    std::vector<std::string> out;
    for (const auto& l : reply.locations()) out.push_back(l.node_id());
    return out;
  }

  std::unique_ptr<SchedulerCore> core_;
  std::unique_ptr<SchedulerService> scheduler_service_;
  std::unique_ptr<grpc::Server> scheduler_server_;
  std::string scheduler_address_;
  std::unique_ptr<proto::Scheduler::Stub> scheduler_;
  std::vector<std::unique_ptr<Node>> nodes_;
};

TEST_F(ObjectTransferTest, Pulls64MiBByteForByteAndReportsTheNewCopy) {
  Node* a = AddNode();
  Node* b = AddNode();
  const std::string data = Pattern(64 * kMiB, 7);
  Put(a, "obj-64m", data, "dtype=f32;shape=16777216");

  proto::FetchObjectReply reply;
  absl::Time start = absl::Now();
  grpc::Status s = Fetch(b, "obj-64m", &reply);
  absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(s.ok()) << s.error_message();
  double gbps = static_cast<double>(data.size()) / absl::ToDoubleSeconds(took) / 1e9;
  std::printf("BENCH pull_64MiB loopback: %.1f ms, %.2f GB/s\n",
              absl::ToDoubleMilliseconds(took), gbps);
  RecordProperty("pull_64MiB_GBps", absl::StrCat(gbps));

  EXPECT_EQ(reply.size(), 64 * kMiB);
  EXPECT_EQ(reply.source_node(), a->node_id);
  ASSERT_TRUE(b->store->Sealed("obj-64m"));
  std::string got = b->store->Data("obj-64m");
  EXPECT_EQ(Checksum(got), Checksum(data));
  EXPECT_TRUE(got == data);
  EXPECT_EQ(b->store->Metadata("obj-64m"), "dtype=f32;shape=16777216");
  // The holder's pin was dropped when the stream ended.
  EXPECT_EQ(a->store->Pins("obj-64m"), 0);
  EXPECT_EQ(a->transfer->stats().reads_completed, 1);
  EXPECT_EQ(a->transfer->stats().bytes_served, 64 * kMiB);
  // The new copy is in the directory.
  EXPECT_EQ(Holders("obj-64m"), (std::vector<std::string>{a->node_id, b->node_id}));

  // Fetching again is answered locally: no second stream.
  proto::FetchObjectReply again;
  ASSERT_TRUE(Fetch(b, "obj-64m", &again).ok());
  EXPECT_EQ(again.source_node(), b->node_id);
  EXPECT_EQ(again.size(), 64 * kMiB);
  EXPECT_EQ(a->transfer->stats().reads_started, 1);
}

TEST_F(ObjectTransferTest, ConcurrentFetchesOfOneObjectShareOneStream) {
  Node* a = AddNode();
  Node* b = AddNode();
  const std::string data = Pattern(32 * kMiB, 11);
  Put(a, "obj-shared", data);

  constexpr int kFetchers = 8;
  std::vector<grpc::Status> results(kFetchers);
  std::vector<proto::FetchObjectReply> replies(kFetchers);
  std::vector<std::thread> threads;
  for (int i = 0; i < kFetchers; ++i) {
    threads.emplace_back([&, i] { results[i] = Fetch(b, "obj-shared", &replies[i]); });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kFetchers; ++i) {
    ASSERT_TRUE(results[i].ok()) << i << ": " << results[i].error_message();
    EXPECT_EQ(replies[i].size(), 32 * kMiB);
  }
  EXPECT_EQ(a->transfer->stats().reads_started, 1);
  EXPECT_EQ(b->transfer->stats().pulls_started, 1);
  EXPECT_EQ(b->store->Count(), 1);
  EXPECT_EQ(Checksum(b->store->Data("obj-shared")), Checksum(data));
  std::printf("concurrent fetches: %lld joined the running pull\n",
              static_cast<long long>(b->transfer->stats().fetches_joined));
}

TEST_F(ObjectTransferTest, HolderDyingMidTransferFailsClearlyAndAbortsThePartialCopy) {
  StallingHolder* holder_service = nullptr;
  Node* holder = AddStallingHolder("obj-doomed", 64 * kMiB, 2, &holder_service);
  Node* b = AddNode();

  grpc::Status result;
  absl::Time failed_at;
  std::atomic<bool> done{false};
  std::thread fetcher([&] {
    proto::FetchObjectReply reply;
    result = Fetch(b, "obj-doomed", &reply, std::chrono::milliseconds(60000));
    failed_at = absl::Now();
    done = true;
  });
  absl::Cleanup join = [&] {
    holder->Kill();
    if (fetcher.joinable()) fetcher.join();
  };
  ASSERT_TRUE(holder_service->WaitStalled(absl::Seconds(10)));
  // The partial copy exists while the transfer hangs.
  ASSERT_TRUE(testing::WaitFor([&] { return b->store->Count() == 1 || done; }));
  ASSERT_FALSE(done) << result.error_message();
  EXPECT_FALSE(b->store->Sealed("obj-doomed"));
  absl::Time killed_at = absl::Now();
  holder->Kill();
  fetcher.join();
  std::move(join).Cancel();

  EXPECT_LT(failed_at - killed_at, absl::Seconds(5));
  EXPECT_EQ(result.error_code(), grpc::StatusCode::UNAVAILABLE) << result.error_message();
  const std::string& msg = result.error_message();
  std::printf("error: %s\n", msg.c_str());
  EXPECT_TRUE(absl::StrContains(msg, "pull of obj-doomed from " + holder->node_id + " (" +
                                         holder->address + ") failed after 8388608 of 67108864 bytes"))
      << msg;
  EXPECT_EQ(b->store->Count(), 0);  // aborted
  EXPECT_EQ(b->store->used(), 0);
}

TEST_F(ObjectTransferTest, GetFetchProgressFollowsARunningPull) {
  StallingHolder* holder_service = nullptr;
  Node* holder = AddStallingHolder("obj-slow", 64 * kMiB, 2, &holder_service);
  Node* b = AddNode();
  // GetFetchProgress on b; its status is the pair's first.
  auto progress = [&](const std::string& id, const std::string& token = kToken) {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, token);
    proto::GetFetchProgressRequest req;
    req.set_object_id(id);
    proto::GetFetchProgressReply reply;
    grpc::Status s = b->stub->GetFetchProgress(&ctx, req, &reply);
    return std::make_pair(s, reply);
  };
  EXPECT_FALSE(progress("obj-slow").second.pulling()) << "no pull has started";

  std::thread fetcher([&] {
    proto::FetchObjectReply reply;
    Fetch(b, "obj-slow", &reply, std::chrono::milliseconds(60000));
  });
  absl::Cleanup join = [&] {
    holder->Kill();
    fetcher.join();
  };
  ASSERT_TRUE(holder_service->WaitStalled(absl::Seconds(10)));
  // Two 4 MiB chunks of 64 MiB have arrived, from the stalling holder.
  proto::GetFetchProgressReply mid;
  ASSERT_TRUE(testing::WaitFor([&] {
    mid = progress("obj-slow").second;
    return mid.received_bytes() == 8 * kMiB;
  })) << mid.DebugString();
  EXPECT_TRUE(mid.pulling());
  EXPECT_EQ(mid.total_bytes(), 64 * kMiB);
  EXPECT_EQ(mid.source_node(), holder->node_id);
  EXPECT_FALSE(progress("obj-other").second.pulling());
  EXPECT_EQ(progress("obj-slow", "wrong-token").first.error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(progress("").first.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  holder->Kill();
  fetcher.join();
  std::move(join).Cancel();
  EXPECT_FALSE(progress("obj-slow").second.pulling()) << "the pull failed: none runs";
}

TEST_F(ObjectTransferTest, HolderDyingMidTransferFailsOverToTheNextHolder) {
  auto stalling = std::make_unique<StallingHolder>(16 * kMiB, 1);
  StallingHolder* holder_service = stalling.get();
  Node* bad = AddNode(-1, std::move(stalling));  // first in the directory's order
  Node* good = AddNode();
  Node* b = AddNode();
  const std::string data = Pattern(16 * kMiB, 3);
  Announce(bad, "obj-two", 16 * kMiB);
  Put(good, "obj-two", data, "good-meta");

  grpc::Status result;
  proto::FetchObjectReply reply;
  std::thread fetcher([&] { result = Fetch(b, "obj-two", &reply); });
  ASSERT_TRUE(holder_service->WaitStalled(absl::Seconds(10)));
  bad->Kill();
  fetcher.join();
  ASSERT_TRUE(result.ok()) << result.error_message();
  EXPECT_EQ(reply.source_node(), good->node_id);
  EXPECT_TRUE(b->store->Data("obj-two") == data);
  EXPECT_EQ(b->store->Metadata("obj-two"), "good-meta");
  EXPECT_EQ(b->store->Count(), 1);
}

TEST_F(ObjectTransferTest, NoRoomInTheStoreIsResourceExhaustedAndReleasesTheHolder) {
  Node* a = AddNode();
  Node* b = AddNode(/*capacity=*/1 * kMiB);
  Put(a, "obj-big", Pattern(8 * kMiB, 5));
  proto::FetchObjectReply reply;
  grpc::Status s = Fetch(b, "obj-big", &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "obj-big")) << s.error_message();
  EXPECT_EQ(b->store->Count(), 0);
  EXPECT_TRUE(testing::WaitFor([&] { return a->store->Pins("obj-big") == 0; }));
}

TEST_F(ObjectTransferTest, UnknownObjectIsNotFoundNamingTheId) {
  Node* a = AddNode();
  Node* b = AddNode();
  proto::FetchObjectReply reply;
  grpc::Status s = Fetch(b, "no-such-object", &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "no-such-object")) << s.error_message();

  // A stale directory entry (the holder no longer has it) is NOT_FOUND too.
  Announce(a, "gone-object", 10);
  s = Fetch(b, "gone-object", &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "gone-object")) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), a->node_id)) << s.error_message();

  grpc::ClientContext ctx;
  PrepareContext(&ctx, kToken);
  proto::ReadObjectRequest req;
  req.set_object_id("no-such-object");
  auto reader = a->stub->ReadObject(&ctx, req);
  proto::ObjectChunk chunk;
  EXPECT_FALSE(reader->Read(&chunk));
  s = reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "no-such-object")) << s.error_message();
}

TEST_F(ObjectTransferTest, FetchWaitingForAHolderGetsTheObjectOnceACopyIsReported) {
  Node* a = AddNode();
  Node* b = AddNode();
  constexpr bool kWait = true;
  // Nobody ever holds it: the waiting fetch ends at its timeout, not at once.
  proto::FetchObjectReply reply;
  // DEADLINE_EXCEEDED (a fetch that does not wait says NOT_FOUND): it waited.
  grpc::Status s = Fetch(b, "obj-never", &reply, std::chrono::milliseconds(400), kToken, kWait);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "obj-never")) << s.error_message();

  // Put on another node while the fetch waits: pulled here.
  const std::string data = Pattern(kMiB, 11);
  grpc::Status late;
  auto fetch_waiting = [&](const std::string& id) {
    return std::thread(
        [&, id] { late = Fetch(b, id, &reply, std::chrono::seconds(30), kToken, kWait); });
  };
  std::thread fetcher = fetch_waiting("obj-later");
  Put(a, "obj-later", data);
  fetcher.join();
  ASSERT_TRUE(late.ok()) << late.error_message();
  EXPECT_EQ(reply.source_node(), a->node_id);
  EXPECT_TRUE(b->store->Data("obj-later") == data);

  // Put on the fetching node itself: the fetch answers with this node, pulling nothing.
  const int64_t reads = a->transfer->stats().reads_started;
  fetcher = fetch_waiting("obj-here");
  Put(b, "obj-here", data);
  fetcher.join();
  ASSERT_TRUE(late.ok()) << late.error_message();
  EXPECT_EQ(reply.source_node(), b->node_id);
  EXPECT_EQ(a->transfer->stats().reads_started, reads);
}

TEST_F(ObjectTransferTest, MissingOrWrongTokenIsUnauthenticated) {
  Node* a = AddNode();
  Put(a, "obj-secret", "bytes");
  for (const std::string token : {"", "wrong-token"}) {
    grpc::ClientContext ctx;
    if (!token.empty()) ctx.AddMetadata(kTokenMetadataKey, token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    proto::ReadObjectRequest req;
    req.set_object_id("obj-secret");
    auto reader = a->stub->ReadObject(&ctx, req);
    proto::ObjectChunk chunk;
    EXPECT_FALSE(reader->Read(&chunk));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);

    grpc::ClientContext fctx;
    if (!token.empty()) fctx.AddMetadata(kTokenMetadataKey, token);
    fctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    proto::FetchObjectRequest freq;
    freq.set_object_id("obj-secret");
    proto::FetchObjectReply freply;
    EXPECT_EQ(a->stub->FetchObject(&fctx, freq, &freply).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);

    grpc::ClientContext sctx;
    if (!token.empty()) sctx.AddMetadata(kTokenMetadataKey, token);
    sctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    proto::GetObjectLocationsRequest sreq;
    sreq.set_object_id("obj-secret");
    proto::GetObjectLocationsReply sreply;
    EXPECT_EQ(scheduler_->GetObjectLocations(&sctx, sreq, &sreply).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_EQ(a->store->Pins("obj-secret"), 0);
}

TEST_F(ObjectTransferTest, ReadObjectResumesFromAnOffsetAndReleasesOnCancel) {
  Node* a = AddNode();
  const std::string data = Pattern(10 * kMiB + 3, 9);
  Put(a, "obj-r", data, "m");
  {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, kToken);
    proto::ReadObjectRequest req;
    req.set_object_id("obj-r");
    req.set_offset(9 * kMiB);
    auto reader = a->stub->ReadObject(&ctx, req);
    proto::ObjectChunk chunk;
    std::string got;
    bool first = true;
    while (reader->Read(&chunk)) {
      EXPECT_EQ(chunk.offset(), 9 * kMiB + static_cast<int64_t>(got.size()));
      EXPECT_EQ(chunk.total_size(), static_cast<int64_t>(data.size()));
      EXPECT_EQ(chunk.metadata(), first ? "m" : "");
      first = false;
      got += chunk.data();
    }
    ASSERT_TRUE(reader->Finish().ok());
    EXPECT_TRUE(got == data.substr(9 * kMiB));
  }
  {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, kToken);
    proto::ReadObjectRequest req;
    req.set_object_id("obj-r");
    req.set_offset(static_cast<int64_t>(data.size()) + 1);
    auto reader = a->stub->ReadObject(&ctx, req);
    proto::ObjectChunk chunk;
    EXPECT_FALSE(reader->Read(&chunk));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    // A reader that goes away mid-stream: the pin is dropped. (An object much larger
    // than the stream's flow-control window, so that the holder cannot have handed
    // all of it to the kernel before the first chunk is read.)
    Put(a, "obj-r-big", Pattern(128 * kMiB, 4), "m");
    grpc::ClientContext ctx;
    PrepareContext(&ctx, kToken);
    proto::ReadObjectRequest req;
    req.set_object_id("obj-r-big");
    auto reader = a->stub->ReadObject(&ctx, req);
    proto::ObjectChunk chunk;
    ASSERT_TRUE(reader->Read(&chunk));
    EXPECT_EQ(a->store->Pins("obj-r-big"), 1);
    ctx.TryCancel();
    reader->Finish();
  }
  EXPECT_TRUE(testing::WaitFor([&] { return a->store->Pins("obj-r-big") == 0; }));
  EXPECT_EQ(a->store->Pins("obj-r"), 0);
}

TEST_F(ObjectTransferTest, PullsOverRawTcpByDefaultAndOverGrpcWhenEitherSideOptsOut) {
  Node* a = AddNode();
  Node* b = AddNode();
  const std::string data = Pattern(24 * kMiB + 5, 11);
  Put(a, "obj-raw", data, "raw-meta");
  proto::FetchObjectReply reply;
  grpc::Status s = Fetch(b, "obj-raw", &reply);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(b->store->Data("obj-raw") == data);
  EXPECT_EQ(b->store->Metadata("obj-raw"), "raw-meta");
  EXPECT_EQ(a->transfer->stats().raw_reads, 1);
  EXPECT_EQ(b->transfer->stats().raw_pulls, 1);
  EXPECT_EQ(a->transfer->stats().bytes_served, static_cast<int64_t>(data.size()));
  EXPECT_EQ(b->transfer->stats().bytes_pulled, static_cast<int64_t>(data.size()));
  EXPECT_TRUE(testing::WaitFor([&] { return a->store->Pins("obj-raw") == 0; }));

  // A holder that does not offer raw TCP: chunks over gRPC, same bytes.
  ObjectTransferOptions no_raw;
  no_raw.raw_tcp = false;
  Node* c = AddNode(-1, nullptr, no_raw);
  Node* d = AddNode();
  Put(c, "obj-chunks", data, "chunk-meta");
  s = Fetch(d, "obj-chunks", &reply);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(d->store->Data("obj-chunks") == data);
  EXPECT_EQ(d->store->Metadata("obj-chunks"), "chunk-meta");
  EXPECT_EQ(c->transfer->stats().raw_reads, 0);
  EXPECT_EQ(d->transfer->stats().raw_pulls, 0);

  // A puller that does not ask for it: chunks over gRPC.
  Node* e = AddNode(-1, nullptr, no_raw);
  s = Fetch(e, "obj-raw", &reply);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(e->store->Data("obj-raw") == data);
  EXPECT_EQ(e->transfer->stats().raw_pulls, 0);
}

TEST_F(ObjectTransferTest, RawOfferNeedsItsTokenAndTheHoldersOwnAddress) {
  Node* a = AddNode();
  const std::string data = Pattern(1 * kMiB, 12);
  Put(a, "obj-tok", data, "m");
  auto offer = [&](const std::string& ip, proto::ObjectChunk* chunk, grpc::ClientContext* ctx)
      -> std::unique_ptr<grpc::ClientReader<proto::ObjectChunk>> {
    PrepareContext(ctx, kToken);
    proto::ReadObjectRequest req;
    req.set_object_id("obj-tok");
    req.set_raw_tcp_ip(ip);
    auto reader = a->stub->ReadObject(ctx, req);
    EXPECT_TRUE(reader->Read(chunk));
    return reader;
  };
  auto connect_to = [](int port) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons(static_cast<uint16_t>(port));
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
    return fd;
  };
  {
    // The right token: the bytes, then the stream ends OK. The offer comes at once
    // (it is written through to the socket before the holder waits in accept; it used
    // to sit in the transport until the next ping, seconds later).
    grpc::ClientContext ctx;
    proto::ObjectChunk chunk;
    absl::Time asked = absl::Now();
    auto reader = offer("127.0.0.1", &chunk, &ctx);
    EXPECT_LT(absl::Now() - asked, absl::Milliseconds(1500));
    ASSERT_GT(chunk.raw_port(), 0);
    EXPECT_EQ(chunk.raw_token().size(), 32u);
    EXPECT_EQ(chunk.total_size(), static_cast<int64_t>(data.size()));
    EXPECT_EQ(chunk.metadata(), "m");
    EXPECT_TRUE(chunk.data().empty());
    int fd = connect_to(chunk.raw_port());
    ASSERT_EQ(::send(fd, chunk.raw_token().data(), 32, 0), 32);
    // The holder's acknowledgement of the token comes first.
    std::string ack(sizeof(kRawAck) - 1, '\0');
    size_t acked = 0;
    while (acked < ack.size()) {
      ssize_t k = ::recv(fd, &ack[acked], ack.size() - acked, 0);
      if (k <= 0) break;
      acked += static_cast<size_t>(k);
    }
    EXPECT_EQ(ack, kRawAck);
    std::string got(data.size(), '\0');
    size_t have = 0;
    while (have < got.size()) {
      ssize_t k = ::recv(fd, &got[have], got.size() - have, 0);
      if (k <= 0) break;
      have += static_cast<size_t>(k);
    }
    char extra;
    EXPECT_EQ(::recv(fd, &extra, 1, 0), 0);  // closed after the data
    ::close(fd);
    EXPECT_EQ(have, data.size());
    EXPECT_TRUE(got == data);
    EXPECT_FALSE(reader->Read(&chunk));
    EXPECT_TRUE(reader->Finish().ok());
  }
  {
    // A wrong token: no data, the connection is closed, the stream fails.
    grpc::ClientContext ctx;
    proto::ObjectChunk chunk;
    auto reader = offer("127.0.0.1", &chunk, &ctx);
    ASSERT_GT(chunk.raw_port(), 0);
    int fd = connect_to(chunk.raw_port());
    std::string wrong = chunk.raw_token();
    wrong[0] ^= 1;
    ASSERT_EQ(::send(fd, wrong.data(), 32, 0), 32);
    char byte;
    EXPECT_LE(::recv(fd, &byte, 1, 0), 0);
    ::close(fd);
    EXPECT_FALSE(reader->Read(&chunk));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);
    // One connection per offer: the port is closed now.
    int again = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons(static_cast<uint16_t>(chunk.raw_port()));
    EXPECT_NE(::connect(again, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
    ::close(again);
  }
  {
    // An address that is not the holder's: no offer, chunks over gRPC.
    grpc::ClientContext ctx;
    proto::ObjectChunk chunk;
    auto reader = offer("192.0.2.1", &chunk, &ctx);
    EXPECT_EQ(chunk.raw_port(), 0);
    std::string got = chunk.data();
    while (reader->Read(&chunk)) got += chunk.data();
    EXPECT_TRUE(reader->Finish().ok());
    EXPECT_TRUE(got == data);
  }
  EXPECT_TRUE(testing::WaitFor([&] { return a->store->Pins("obj-tok") == 0; }));
}

TEST_F(ObjectTransferTest, HolderKilledMidRawTransferFailsOverToTheNextHolder) {
  // The first holder in the directory's order serves over raw TCP and is killed while
  // the data flows (its send loop sees the cancelled call, closes the connection).
  Node* first = AddNode();
  Node* second = AddNode();
  Node* b = AddNode();
  const std::string data = Pattern(256 * kMiB, 13);
  Put(first, "obj-kill", data, "m1");
  Put(second, "obj-kill", data, "m2");
  grpc::Status result;
  proto::FetchObjectReply reply;
  std::thread fetcher([&] { result = Fetch(b, "obj-kill", &reply, std::chrono::seconds(60)); });
  ASSERT_TRUE(testing::WaitFor([&] { return first->transfer->stats().raw_reads == 1; }));
  first->Kill();
  fetcher.join();
  ASSERT_TRUE(result.ok()) << result.error_message();
  EXPECT_TRUE(b->store->Data("obj-kill") == data);
  EXPECT_EQ(b->store->Count(), 1);
  std::printf("raw pull failed over to %s (first holder %s): %lld raw pulls\n",
              reply.source_node().c_str(), first->node_id.c_str(),
              static_cast<long long>(b->transfer->stats().raw_pulls));
}

TEST(ObjectTransferServiceTest, NodeWithoutAStoreIsFailedPrecondition) {
  ObjectTransferService service(kToken, nullptr);
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  b.RegisterService(&service);
  auto server = b.BuildAndStart();
  ASSERT_GT(port, 0);
  auto stub = proto::ObjectTransfer::NewStub(MakeChannel(absl::StrCat("127.0.0.1:", port)));
  grpc::ClientContext ctx;
  PrepareContext(&ctx, kToken);
  proto::FetchObjectRequest req;
  req.set_object_id("x");
  proto::FetchObjectReply reply;
  grpc::Status s = stub->FetchObject(&ctx, req, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "this node runs no object store"));
  server->Shutdown(std::chrono::system_clock::now());
}

}  // namespace
}  // namespace drover
