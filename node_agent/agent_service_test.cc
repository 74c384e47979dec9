// The NodeAgent service over a real gRPC server, with real processes; and the
// scheduler's client of it (scheduler/agent_client.h).
#include "node_agent/agent_service.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/rpc.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"
#include "node_agent/process_manager.h"
#include "proto/node_agent.grpc.pb.h"
#include "scheduler/agent_client.h"

namespace drover {
namespace {

constexpr char kToken[] = "test-token";

class AgentServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ProcessManagerOptions o;
    o.launcher_path = testing::Runfile("node_agent/drover-launch");
    o.log_dir = absl::StrCat(testing::TestTmpDir(), "/svc-logs");
    o.node_id = "node-svc";
    pm_ = std::make_unique<ProcessManager>(o, nullptr);
    service_ = std::make_unique<AgentService>(kToken, pm_.get(), absl::Milliseconds(200));
    service_->SetNodeId("node-svc");
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(service_.get());
    server_ = b.BuildAndStart();
    ASSERT_GT(port, 0);
    address_ = absl::StrCat("127.0.0.1:", port);
    stub_ = proto::NodeAgent::NewStub(MakeChannel(address_));
  }
  void TearDown() override {
    pm_->StopAllAndWait(absl::Milliseconds(100));
    server_->Shutdown(std::chrono::system_clock::now());
    pm_.reset();
  }

  proto::StartProcessesRequest Request(const std::string& job, const std::string& script,
                                       int nproc = 1) {
    proto::StartProcessesRequest req;
    req.set_job_id(job);
    req.add_command("sh");
    req.add_command("-c");
    req.add_command(script);
    req.set_world_size(nproc);
    req.set_local_world_size(nproc);
    req.set_master_addr("127.0.0.1");
    for (int r = 0; r < nproc; ++r) req.add_processes()->set_rank(r);
    return req;
  }

  grpc::Status Start(const proto::StartProcessesRequest& req,
                     proto::StartProcessesReply* reply, const std::string& token = kToken) {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, token);
    return stub_->StartProcesses(&ctx, req, reply);
  }

  // Reads the whole stream; returns the concatenated data per (rank, stream).
  grpc::Status ReadLogs(const proto::StreamLogsRequest& req,
                        std::map<std::pair<int, int>, std::string>* out,
                        std::chrono::milliseconds timeout = std::chrono::milliseconds(20000)) {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, kToken, timeout);
    auto reader = stub_->StreamLogs(&ctx, req);
    proto::LogChunk chunk;
    std::map<std::pair<int, int>, int64_t> next;
    for (const auto& o : req.offsets()) next[std::make_pair(o.rank(), o.stream())] = o.offset();
    while (reader->Read(&chunk)) {
      auto key = std::make_pair(chunk.rank(), chunk.stream());
      EXPECT_EQ(chunk.offset(), next[key]) << "chunks must be contiguous";
      EXPECT_LE(chunk.data().size(), AgentService::kMaxChunkBytes);
      next[key] = chunk.offset() + chunk.data().size();
      (*out)[key] += chunk.data();
    }
    return reader->Finish();
  }

  std::unique_ptr<ProcessManager> pm_;
  std::unique_ptr<AgentService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<proto::NodeAgent::Stub> stub_;
  std::string address_;
};

TEST_F(AgentServiceTest, RejectsCallsWithoutTheToken) {
  proto::StartProcessesReply reply;
  grpc::Status s = Start(Request("job-auth", "true"), &reply, "wrong");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_FALSE(pm_->JobActive("job-auth"));
  EXPECT_TRUE(pm_->Snapshot().empty());
}

TEST_F(AgentServiceTest, ValidatesStartRequests) {
  proto::StartProcessesReply reply;
  auto req = Request("job-bad", "true");
  req.clear_command();
  grpc::Status s = Start(req, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("command is empty"), std::string::npos);

  req = Request("job-bad", "true", 2);
  req.set_world_size(1);
  s = Start(req, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("rank 1 is outside [0, 1)"), std::string::npos)
      << s.error_message();

  req = Request("", "true");
  EXPECT_EQ(Start(req, &reply).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  req = Request("../etc", "true");
  EXPECT_EQ(Start(req, &reply).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  req = Request("job-bad", "true");
  req.clear_processes();
  EXPECT_EQ(Start(req, &reply).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  req = Request("job-bad", "true");
  req.set_cwd("/no/such/cwd");
  s = Start(req, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("/no/such/cwd"), std::string::npos);
  EXPECT_TRUE(pm_->Snapshot().empty());
}

TEST_F(AgentServiceTest, StartIsIdempotentAndPicksAPort) {
  auto req = Request("job-idem", "sleep 1000");
  proto::StartProcessesReply r1, r2;
  ASSERT_TRUE(Start(req, &r1).ok());
  ASSERT_TRUE(Start(req, &r2).ok());
  EXPECT_GT(r1.master_port(), 0);
  EXPECT_EQ(r1.master_port(), r2.master_port());
  EXPECT_EQ(pm_->Snapshot().size(), 1u);

  proto::StopJobRequest stop;
  stop.set_job_id("job-idem");
  stop.set_generation(-1);
  proto::StopJobReply sr;
  {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, kToken);
    ASSERT_TRUE(stub_->StopJob(&ctx, stop, &sr).ok());
    EXPECT_EQ(sr.signalled(), 1);
  }
  {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, kToken);
    ASSERT_TRUE(stub_->StopJob(&ctx, stop, &sr).ok());
    EXPECT_EQ(sr.signalled(), 0);
  }
}

// A start held up by a cut link can arrive after the node registered again (the
// scheduler declared it dead and failed the job): it must not run the dead
// generation's processes. A start sent under an earlier registration is
// refused; one sent under this registration, a later one (its reply not read yet) or
// none (an older scheduler) runs.
TEST_F(AgentServiceTest, RefusesAStartSentBeforeItRegisteredAgain) {
  service_->SetRegistration(2000);
  auto late = Request("job-late", "echo late");
  late.set_node_registration(1000);
  proto::StartProcessesReply reply;
  grpc::Status s = Start(late, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_NE(s.error_message().find("registered again"), std::string::npos) << s.error_message();
  EXPECT_TRUE(pm_->Snapshot().empty()) << "the late start ran";

  for (int64_t registration : {0, 2000, 3000}) {
    auto req = Request(absl::StrCat("job-reg-", registration), "true");
    req.set_node_registration(registration);
    EXPECT_TRUE(Start(req, &reply).ok()) << registration;
  }
  EXPECT_EQ(pm_->Snapshot().size(), 3u);
}

// Once the agent takes the process table it registers again with, a start sent under
// the registration it held until then is refused too (its processes would be missing
// from the table: the scheduler would take its ranks as never started, and start them
// again, or as gone, while they run); one sent under the new registration runs.
TEST_F(AgentServiceTest, RefusesAStartSentUnderTheRegistrationBeingReplaced) {
  service_->SetRegistration(2000);
  service_->FenceStarts();  // registering again: the table is being taken
  auto late = Request("job-fenced", "echo late");
  late.set_node_registration(2000);
  proto::StartProcessesReply reply;
  grpc::Status s = Start(late, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_TRUE(pm_->Snapshot().empty()) << "the start sent before the registration ran";
  service_->SetRegistration(3000);
  for (int64_t registration : {0, 3000}) {
    auto req = Request(absl::StrCat("job-new-", registration), "true");
    req.set_node_registration(registration);
    EXPECT_TRUE(Start(req, &reply).ok()) << registration;
  }
  EXPECT_EQ(pm_->Snapshot().size(), 2u);
}

// Two placements of one generation (the scheduler placed it again after a restart that
// could not see the first's processes): the second's start is refused, naming both
// epochs, and starts nothing; a re-send of the first's start is answered as a repeat; a
// start without an epoch (an older scheduler) is too; a StopJob carrying the other
// epoch stops nothing, one carrying the held epoch stops its processes; once they have
// ended, a later placement's start runs.
TEST_F(AgentServiceTest, RefusesAStartOfAnotherPlacementEpoch) {
  auto first = Request("job-epoch", "sleep 1000");
  first.set_placement_epoch(7);
  proto::StartProcessesReply reply;
  ASSERT_TRUE(Start(first, &reply).ok());
  const int port = reply.master_port();
  ASSERT_EQ(pm_->Snapshot().size(), 1u);
  EXPECT_EQ(pm_->Snapshot()[0].placement_epoch(), 7);
  EXPECT_EQ(pm_->Snapshot()[0].exit().placement_epoch(), 7);

  auto other = Request("job-epoch", "sleep 1000");
  other.set_placement_epoch(9);
  grpc::Status s = Start(other, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_NE(s.error_message().find("placement epoch 9"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("placement epoch 7"), std::string::npos) << s.error_message();
  EXPECT_EQ(pm_->Snapshot().size(), 1u) << "the other placement's start ran";

  for (int64_t epoch : {int64_t{7}, int64_t{0}}) {
    auto again = Request("job-epoch", "sleep 1000");
    again.set_placement_epoch(epoch);
    proto::StartProcessesReply again_reply;
    ASSERT_TRUE(Start(again, &again_reply).ok()) << epoch;
    EXPECT_EQ(again_reply.master_port(), port) << epoch;
  }
  EXPECT_EQ(pm_->Snapshot().size(), 1u);

  auto negative = Request("job-epoch-bad", "true");
  negative.set_placement_epoch(-1);
  EXPECT_EQ(Start(negative, &reply).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  proto::StopJobRequest stop;
  stop.set_job_id("job-epoch");
  stop.set_generation(-1);
  stop.set_grace_ms(100);
  proto::StopJobReply sr;
  for (int64_t epoch : {int64_t{9}, int64_t{7}}) {
    stop.set_placement_epoch(epoch);
    grpc::ClientContext ctx;
    PrepareContext(&ctx, kToken);
    ASSERT_TRUE(stub_->StopJob(&ctx, stop, &sr).ok());
    EXPECT_EQ(sr.signalled(), epoch == 7 ? 1 : 0) << epoch;
    if (epoch == 9) EXPECT_TRUE(pm_->Snapshot()[0].running());
  }
  // Once nothing of epoch 7 runs, a later placement starts; an earlier one still does not.
  ASSERT_TRUE(testing::WaitFor([&] { return !pm_->Snapshot()[0].running(); }));
  auto earlier = Request("job-epoch", "sleep 1000");
  earlier.set_placement_epoch(6);
  EXPECT_EQ(Start(earlier, &reply).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  ASSERT_TRUE(Start(other, &reply).ok());
  ASSERT_EQ(pm_->Snapshot().size(), 1u);
  EXPECT_TRUE(pm_->Snapshot()[0].running());
  EXPECT_EQ(pm_->Snapshot()[0].placement_epoch(), 9);
}

// Several starts in one call: each answered as its own StartProcesses call would be,
// a refused one not stopping the others, a repeated one started once.
TEST_F(AgentServiceTest, BatchAnswersEachStartOnItsOwn) {
  service_->SetRegistration(2000);
  proto::StartProcessesBatchRequest batch;
  *batch.add_starts() = Request("job-b1", "sleep 1000");
  auto late = Request("job-b2", "echo late");
  late.set_node_registration(1000);
  *batch.add_starts() = late;
  auto bad = Request("job-b3", "true");
  bad.clear_command();
  *batch.add_starts() = bad;
  *batch.add_starts() = Request("job-b4", "sleep 1000", 2);
  *batch.add_starts() = Request("job-b1", "sleep 1000");  // a retry of the first
  proto::StartProcessesBatchReply reply;
  {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, kToken);
    ASSERT_TRUE(stub_->StartProcessesBatch(&ctx, batch, &reply).ok());
  }
  ASSERT_EQ(reply.results_size(), 5);
  EXPECT_EQ(reply.results(0).code(), 0) << reply.results(0).message();
  EXPECT_GT(reply.results(0).master_port(), 0);
  EXPECT_EQ(reply.results(1).code(), static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION));
  EXPECT_NE(reply.results(1).message().find("registered again"), std::string::npos)
      << reply.results(1).message();
  EXPECT_EQ(reply.results(2).code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_NE(reply.results(2).message().find("command is empty"), std::string::npos)
      << reply.results(2).message();
  EXPECT_EQ(reply.results(3).code(), 0) << reply.results(3).message();
  EXPECT_EQ(reply.results(4).code(), 0) << reply.results(4).message();
  EXPECT_EQ(reply.results(4).master_port(), reply.results(0).master_port());
  EXPECT_TRUE(pm_->JobActive("job-b1"));
  EXPECT_FALSE(pm_->JobActive("job-b2"));
  EXPECT_TRUE(pm_->JobActive("job-b4"));
  EXPECT_EQ(pm_->Snapshot().size(), 3u);  // job-b1's rank and job-b4's two

  proto::StartProcessesBatchRequest other;
  *other.add_starts() = Request("job-b5", "true");
  grpc::ClientContext ctx;
  PrepareContext(&ctx, "wrong");
  EXPECT_EQ(stub_->StartProcessesBatch(&ctx, other, &reply).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_FALSE(pm_->JobActive("job-b5"));
}

// The scheduler's client (GrpcAgentClient): the starts of one agent in one
// StartProcessesBatch call; to an agent without it (an older one, answering
// UNIMPLEMENTED), one StartProcesses call each. The same answers either way.
TEST_F(AgentServiceTest, SchedulerClientBatchesAndFallsBackForOlderAgents) {
  // An older agent: the same processes, but no StartProcessesBatch.
  class OlderAgent final : public proto::NodeAgent::Service {
   public:
    explicit OlderAgent(AgentService* real) : real_(real) {}
    grpc::Status StartProcesses(grpc::ServerContext* ctx, const proto::StartProcessesRequest* req,
                                proto::StartProcessesReply* reply) override {
      ++calls;
      return real_->StartProcesses(ctx, req, reply);
    }
    std::atomic<int> calls{0};

   private:
    AgentService* const real_;
  };
  OlderAgent older(service_.get());
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  b.RegisterService(&older);
  std::unique_ptr<grpc::Server> older_server = b.BuildAndStart();
  ASSERT_GT(port, 0);

  std::unique_ptr<AgentClient> client = NewGrpcAgentClient(kToken);
  const std::string addresses[] = {address_, absl::StrCat("127.0.0.1:", port)};
  for (int round = 0; round < 4; ++round) {
    const std::string& address = addresses[round % 2];
    auto bad = Request(absl::StrCat("job-c", round, "-bad"), "true");
    bad.clear_command();
    std::vector<proto::StartProcessesRequest> reqs = {
        Request(absl::StrCat("job-c", round, "-a"), "sleep 1000"), bad,
        Request(absl::StrCat("job-c", round, "-b"), "sleep 1000")};
    absl::Notification answered;
    std::vector<absl::StatusOr<int>> results;
    client->StartProcessesBatchAsync(address, std::move(reqs),
                                     [&](std::vector<absl::StatusOr<int>> r) {
                                       results = std::move(r);
                                       answered.Notify();
                                     });
    ASSERT_TRUE(answered.WaitForNotificationWithTimeout(absl::Seconds(30))) << address;
    ASSERT_EQ(results.size(), 3u) << address;
    ASSERT_TRUE(results[0].ok()) << results[0].status();
    EXPECT_GT(*results[0], 0);
    EXPECT_EQ(results[1].status().code(), absl::StatusCode::kInvalidArgument) << address;
    EXPECT_NE(results[1].status().message().find("node agent " + address), std::string::npos)
        << results[1].status();
    EXPECT_NE(results[1].status().message().find("command is empty"), std::string::npos)
        << results[1].status();
    EXPECT_TRUE(results[2].ok()) << results[2].status();
    EXPECT_TRUE(pm_->JobActive(absl::StrCat("job-c", round, "-a")));
    EXPECT_TRUE(pm_->JobActive(absl::StrCat("job-c", round, "-b")));
  }
  // Rounds 1 and 3 went to the older agent, one call per start.
  EXPECT_EQ(older.calls.load(), 6);
  older_server->Shutdown(std::chrono::system_clock::now());
}

TEST_F(AgentServiceTest, UnknownJobIsNotFound) {
  proto::StreamLogsRequest req;
  req.set_job_id("job-nobody");
  std::map<std::pair<int, int>, std::string> out;
  grpc::Status s = ReadLogs(req, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), "no logs for job job-nobody on node node-svc");
}

TEST_F(AgentServiceTest, FollowStreamsEverythingAndEndsWhenTheJobExits) {
  // Output arrives over time, from two ranks, on both streams, then the job exits.
  auto req = Request("job-follow",
                     "i=0; while [ $i -lt 50 ]; do echo out$RANK-$i; echo err$RANK-$i >&2; "
                     "i=$((i+1)); done; sleep 0.2; echo last$RANK",
                     2);
  proto::StartProcessesReply reply;
  ASSERT_TRUE(Start(req, &reply).ok());
  proto::StreamLogsRequest lreq;
  lreq.set_job_id("job-follow");
  lreq.set_follow(true);
  std::map<std::pair<int, int>, std::string> out;
  ASSERT_TRUE(ReadLogs(lreq, &out).ok());
  EXPECT_FALSE(pm_->JobActive("job-follow"));
  for (int rank = 0; rank < 2; ++rank) {
    std::string want_out, want_err;
    for (int i = 0; i < 50; ++i) {
      want_out += absl::StrCat("out", rank, "-", i, "\n");
      want_err += absl::StrCat("err", rank, "-", i, "\n");
    }
    want_out += absl::StrCat("last", rank, "\n");
    EXPECT_EQ(out[std::make_pair(rank, 1)], want_out);
    EXPECT_EQ(out[std::make_pair(rank, 2)], want_err);
  }

  // Resuming from offsets sends only the rest; without follow it ends at once.
  proto::StreamLogsRequest resume;
  resume.set_job_id("job-follow");
  auto* o = resume.add_offsets();
  o->set_rank(0);
  o->set_stream(1);
  o->set_offset(static_cast<int64_t>(out[std::make_pair(0, 1)].size()) - 6);
  std::map<std::pair<int, int>, std::string> rest;
  ASSERT_TRUE(ReadLogs(resume, &rest).ok());
  EXPECT_EQ(rest[std::make_pair(0, 1)], "last0\n");
  EXPECT_EQ(rest[std::make_pair(1, 1)], out[std::make_pair(1, 1)]);
}

TEST_F(AgentServiceTest, LargeOutputIsChunked) {
  auto req = Request("job-big", "head -c 3000000 /dev/zero");
  proto::StartProcessesReply reply;
  ASSERT_TRUE(Start(req, &reply).ok());
  proto::StreamLogsRequest lreq;
  lreq.set_job_id("job-big");
  lreq.set_follow(true);
  std::map<std::pair<int, int>, std::string> out;
  ASSERT_TRUE(ReadLogs(lreq, &out).ok());
  EXPECT_EQ(out[std::make_pair(0, 1)].size(), 3000000u);
}

TEST_F(AgentServiceTest, FollowEndsWhenTheClientGivesUp) {
  auto req = Request("job-forever", "echo hi; sleep 1000");
  proto::StartProcessesReply reply;
  ASSERT_TRUE(Start(req, &reply).ok());
  proto::StreamLogsRequest lreq;
  lreq.set_job_id("job-forever");
  lreq.set_follow(true);
  std::map<std::pair<int, int>, std::string> out;
  grpc::Status s = ReadLogs(lreq, &out, std::chrono::milliseconds(300));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(out[std::make_pair(0, 1)], "hi\n");
}

}  // namespace
}  // namespace drover
