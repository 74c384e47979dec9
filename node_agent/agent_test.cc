// NodeAgent against a fake scheduler: registration (also when the scheduler comes up
// late), ready file, heartbeats with the process table, ReportExit, re-registration
// with the same id when the scheduler forgets the node, forget, shutdown.
#include "node_agent/agent.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/auth.h"
#include "common/clock.h"
#include "common/files.h"
#include "common/net.h"
#include "common/rpc.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"
#include "proto/node_agent.grpc.pb.h"
#include "proto/scheduler.grpc.pb.h"
#include "node_agent/testing/fake_local_objects.h"
#include "node_agent/worker_pool.h"

namespace drover {
namespace {

using testing::WaitFor;

constexpr char kToken[] = "agent-test-token";

class FakeScheduler final : public proto::Scheduler::Service {
 public:
  grpc::Status RegisterNode(grpc::ServerContext* ctx, const proto::RegisterNodeRequest* req,
                            proto::RegisterNodeReply* reply) override {
    if (auto s = CheckToken(*ctx, kToken); !s.ok()) return s;
    absl::MutexLock lock(&mu);
    registrations.push_back(*req);
    reply->set_node_id(req->node_id().empty() ? absl::StrCat("node-", next_id++) : req->node_id());
    reply->set_heartbeat_interval_ms(heartbeat_interval_ms);
    known = true;
    return grpc::Status::OK;
  }
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const proto::HeartbeatRequest* req,
                         proto::HeartbeatReply* reply) override {
    if (auto s = CheckToken(*ctx, kToken); !s.ok()) return s;
    absl::MutexLock lock(&mu);
    heartbeats.push_back(*req);
    reply->set_known(known);
    for (const auto& f : forget) *reply->add_forget() = f;
    return grpc::Status::OK;
  }
  grpc::Status GetJob(grpc::ServerContext* ctx, const proto::GetJobRequest* req,
                      proto::GetJobReply* reply) override {
    if (auto s = CheckToken(*ctx, kToken); !s.ok()) return s;
    absl::MutexLock lock(&mu);
    auto it = job_states.find(req->job_id());
    if (it == job_states.end()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such job");
    reply->mutable_job()->set_job_id(req->job_id());
    reply->mutable_job()->set_state(it->second);
    return grpc::Status::OK;
  }
  grpc::Status ReportExit(grpc::ServerContext* ctx, const proto::ReportExitRequest* req,
                          proto::ReportExitReply*) override {
    if (auto s = CheckToken(*ctx, kToken); !s.ok()) return s;
    absl::MutexLock lock(&mu);
    exits.push_back(*req);
    mu.Await(absl::Condition(+[](bool* hold) { return !*hold; }, &hold_reports));
    return grpc::Status::OK;
  }

  absl::Mutex mu;
  int64_t heartbeat_interval_ms = 30;
  int next_id = 7;  // ids given to agents that ask for none
  std::map<std::string, proto::JobState> job_states;  // for GetJob
  bool known = true;
  std::vector<proto::JobGeneration> forget;
  std::vector<proto::RegisterNodeRequest> registrations;
  std::vector<proto::HeartbeatRequest> heartbeats;
  std::vector<proto::ReportExitRequest> exits;
  bool hold_reports = false;  // ReportExit answers once this is false again
};

std::unique_ptr<grpc::Server> Serve(FakeScheduler* s, int port) {
  grpc::ServerBuilder b;
  int selected = 0;
  b.AddListeningPort(absl::StrCat("127.0.0.1:", port), grpc::InsecureServerCredentials(),
                     &selected);
  b.RegisterService(s);
  auto server = b.BuildAndStart();
  EXPECT_EQ(selected, port);
  return server;
}

AgentOptions Options(int sched_port, const std::string& name) {
  AgentOptions o;
  o.scheduler_address = absl::StrCat("127.0.0.1:", sched_port);
  o.token = kToken;
  o.token_file = "/dev/null";
  o.dir = absl::StrCat(testing::TestTmpDir(), "/", name);
  o.launcher_path = testing::Runfile("node_agent/drover-launch");
  o.kill_grace = absl::Milliseconds(200);
  o.ready_file = absl::StrCat(testing::TestTmpDir(), "/", name, ".ready.json");
  o.resources.num_gpus = 2;
  o.resources.custom["ssd"] = 1;
  o.discovery.adjust_nofile = false;
  return o;
}

TEST(NodeAgentTest, RegistersLateHeartbeatsReportsExitsAndReregisters) {
  int sched_port = *PickFreePort();
  // The agent starts first: the scheduler is down and it must keep retrying.
  NodeAgent agent(Options(sched_port, "agent-a"));
  ASSERT_TRUE(agent.Start().ok());
  EXPECT_EQ(agent.address().rfind("127.0.0.1:", 0), 0u) << agent.address();
  EXPECT_FALSE(agent.WaitRegistered(absl::Milliseconds(150)));

  FakeScheduler sched;
  auto server = Serve(&sched, sched_port);
  ASSERT_TRUE(agent.WaitRegistered(absl::Seconds(15)));
  EXPECT_EQ(agent.node_id(), "node-7");
  {
    absl::MutexLock lock(&sched.mu);
    const auto& reg = sched.registrations.front();
    EXPECT_EQ(reg.agent_address(), agent.address());
    EXPECT_EQ(reg.node_ip(), "127.0.0.1");
    EXPECT_EQ(reg.total().gpus(), 2);
    EXPECT_EQ(reg.gpu_names_size(), 2);
    EXPECT_EQ(reg.gpu_names(0), "declared");
    EXPECT_EQ(reg.total().custom().at("ssd"), 1);
  }
  std::string ready_path = absl::StrCat(testing::TestTmpDir(), "/agent-a.ready.json");
  ASSERT_TRUE(WaitFor([&] { return ReadFile(ready_path).ok(); }));
  EXPECT_EQ(*ReadFile(ready_path),
            absl::StrCat("{\"node_id\":\"node-7\",\"address\":\"", agent.address(),
                         "\",\"pid\":", ::getpid(), "}\n"));

  // Start a process through the agent's own gRPC service.
  auto stub = proto::NodeAgent::NewStub(MakeChannel(agent.address()));
  proto::StartProcessesRequest req;
  req.set_job_id("job-1");
  req.add_command("sh");
  req.add_command("-c");
  req.add_command("echo bye >&2; exit 5");
  req.set_world_size(1);
  req.add_processes()->set_rank(0);
  proto::StartProcessesReply reply;
  {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, kToken);
    ASSERT_TRUE(stub->StartProcesses(&ctx, req, &reply).ok());
  }
  ASSERT_TRUE(WaitFor([&] {
    absl::MutexLock lock(&sched.mu);
    return !sched.exits.empty();
  }));
  {
    absl::MutexLock lock(&sched.mu);
    const auto& e = sched.exits.front();
    EXPECT_EQ(e.node_id(), "node-7");
    EXPECT_EQ(e.job_id(), "job-1");
    EXPECT_EQ(e.exit().exit_code(), 5);
    EXPECT_EQ(e.exit().stderr_tail(), "bye\n");
    EXPECT_EQ(e.exit().node_id(), "node-7");
  }
  // Heartbeats carry the process table.
  ASSERT_TRUE(WaitFor([&] {
    absl::MutexLock lock(&sched.mu);
    return !sched.heartbeats.empty() && sched.heartbeats.back().processes_size() == 1 &&
           !sched.heartbeats.back().processes(0).running();
  }));

  // The scheduler forgets the node: the agent re-registers with the same id and its
  // process table.
  {
    absl::MutexLock lock(&sched.mu);
    sched.known = false;
  }
  ASSERT_TRUE(WaitFor([&] {
    absl::MutexLock lock(&sched.mu);
    return sched.registrations.size() >= 2;
  }));
  {
    absl::MutexLock lock(&sched.mu);
    EXPECT_EQ(sched.registrations[1].node_id(), "node-7");
    ASSERT_EQ(sched.registrations[1].processes_size(), 1);
    EXPECT_EQ(sched.registrations[1].processes(0).job_id(), "job-1");
  }

  // Forget: the process table empties.
  {
    absl::MutexLock lock(&sched.mu);
    proto::JobGeneration g;
    g.set_job_id("job-1");
    g.set_generation(0);
    sched.forget.push_back(g);
  }
  ASSERT_TRUE(WaitFor([&] { return agent.process_manager()->Snapshot().empty(); }));

  agent.Shutdown();
  server->Shutdown(std::chrono::system_clock::now());
}

// The agent's timers follow its clock: with a fake one, heartbeats go out exactly when
// the interval the scheduler gave (10 s) has passed on it, and no real time is waited.
// Exits that come while a ReportExit is out go together in the next one: the first in
// job_id/exit (where an older scheduler reads it), the others in `exits`.
TEST(NodeAgentTest, ExitsThatComeWhileAReportIsOutGoTogether) {
  int sched_port = *PickFreePort();
  FakeScheduler sched;
  sched.hold_reports = true;
  auto server = Serve(&sched, sched_port);
  NodeAgent agent(Options(sched_port, "agent-batch"));
  ASSERT_TRUE(agent.Start().ok());
  ASSERT_TRUE(agent.WaitRegistered(absl::Seconds(15)));
  auto stub = proto::NodeAgent::NewStub(MakeChannel(agent.address()));
  auto start = [&](const std::string& job, int nproc) {
    proto::StartProcessesRequest req;
    req.set_job_id(job);
    req.add_command("sh");
    req.add_command("-c");
    req.add_command("exit $((10 + RANK))");
    req.set_world_size(nproc);
    for (int r = 0; r < nproc; ++r) req.add_processes()->set_rank(r);
    proto::StartProcessesReply reply;
    grpc::ClientContext ctx;
    PrepareContext(&ctx, kToken);
    return stub->StartProcesses(&ctx, req, &reply);
  };
  auto exits_of = [&](const std::string& job) {
    absl::MutexLock lock(&sched.mu);
    if (sched.heartbeats.empty()) return -1;
    int n = 0;
    for (const auto& p : sched.heartbeats.back().processes()) {
      n += p.job_id() == job && !p.running();
    }
    return n;
  };
  // The first exit's report is held by the scheduler...
  ASSERT_TRUE(start("job-1", 1).ok());
  ASSERT_TRUE(WaitFor([&] {
    absl::MutexLock lock(&sched.mu);
    return sched.exits.size() == 1;
  }));
  // ... while three more processes exit.
  ASSERT_TRUE(start("job-2", 3).ok());
  ASSERT_TRUE(WaitFor([&] { return exits_of("job-2") == 3; }));
  {
    absl::MutexLock lock(&sched.mu);
    sched.hold_reports = false;
  }
  std::map<int, int> codes;  // job-2's rank -> exit code, over every report
  ASSERT_TRUE(WaitFor([&] {
    absl::MutexLock lock(&sched.mu);
    codes.clear();
    for (size_t i = 1; i < sched.exits.size(); ++i) {
      const auto& r = sched.exits[i];
      EXPECT_EQ(r.node_id(), "node-7");
      EXPECT_EQ(r.job_id(), "job-2") << "the first exit of a report goes in job_id/exit";
      codes[r.exit().rank()] = r.exit().exit_code();
      for (const auto& e : r.exits()) {
        EXPECT_EQ(e.job_id(), "job-2");
        codes[e.exit().rank()] = e.exit().exit_code();
      }
    }
    return codes.size() == 3;
  }));
  EXPECT_EQ(codes, (std::map<int, int>{{0, 10}, {1, 11}, {2, 12}}));
  absl::MutexLock lock(&sched.mu);
  // Reaped together, reported in one call (two if one exit was queued only after the
  // reporter had taken the others), never one call each.
  EXPECT_LE(sched.exits.size(), 3u);
  EXPECT_EQ(sched.exits[0].job_id(), "job-1");
  EXPECT_EQ(sched.exits[0].exits_size(), 0);
}

TEST(NodeAgentTest, HeartbeatsAndReregistrationFollowTheClock) {
  FakeScheduler sched;
  sched.heartbeat_interval_ms = 10000;
  int sched_port = *PickFreePort();
  auto server = Serve(&sched, sched_port);
  FakeClock clock;
  AgentOptions o = Options(sched_port, "agent-clock");
  o.clock = &clock;
  NodeAgent agent(o);
  ASSERT_TRUE(agent.Start().ok());
  ASSERT_TRUE(agent.WaitRegistered(absl::Hours(1)));  // the first try needs no time
  auto count = [&](const auto& v) {
    absl::MutexLock lock(&sched.mu);
    return (sched.*v).size();
  };
  clock.Advance(absl::Seconds(10) - absl::Milliseconds(1));
  EXPECT_EQ(count(&FakeScheduler::heartbeats), 0u);
  clock.Advance(absl::Milliseconds(1));
  ASSERT_TRUE(WaitFor([&] { return count(&FakeScheduler::heartbeats) == 1; }));
  clock.Advance(absl::Seconds(10));
  ASSERT_TRUE(WaitFor([&] { return count(&FakeScheduler::heartbeats) == 2; }));
  // The scheduler forgets the node: the next heartbeat (after the interval) hears it and
  // the agent registers again at once, with its id.
  {
    absl::MutexLock lock(&sched.mu);
    sched.known = false;
  }
  EXPECT_EQ(count(&FakeScheduler::registrations), 1u);
  clock.Advance(absl::Seconds(10));
  ASSERT_TRUE(WaitFor([&] { return count(&FakeScheduler::registrations) == 2; }));
  EXPECT_EQ(count(&FakeScheduler::heartbeats), 3u);
  agent.Shutdown();
  server->Shutdown(std::chrono::system_clock::now());
}

TEST(NodeAgentTest, ShutdownStopsWorkers) {
  FakeScheduler sched;
  int sched_port = *PickFreePort();
  auto server = Serve(&sched, sched_port);
  auto agent = std::make_unique<NodeAgent>(Options(sched_port, "agent-b"));
  ASSERT_TRUE(agent->Start().ok());
  ASSERT_TRUE(agent->WaitRegistered(absl::Seconds(15)));
  proto::StartProcessesRequest req;
  req.set_job_id("job-2");
  req.add_command("sh");
  req.add_command("-c");
  req.add_command("trap '' TERM; echo up; while :; do sleep 1; done");
  req.set_world_size(1);
  req.add_processes()->set_rank(0);
  int port = 0;
  ASSERT_TRUE(agent->process_manager()->Start(req, &port).ok());
  std::string out_log = agent->process_manager()->LogPath("job-2", 0, 1);
  ASSERT_TRUE(WaitFor([&] { return ReadFile(out_log).value_or("") == "up\n"; }));
  int pid = agent->process_manager()->Snapshot().at(0).pid();
  absl::Time t0 = absl::Now();
  agent->Shutdown();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  EXPECT_NE(::kill(pid, 0), 0);  // reaped: gone
  agent.reset();
  server->Shutdown(std::chrono::system_clock::now());
}

// An agent killed and started again on its directory is the same node: as a new node,
// the old id would be dead (or, after a scheduler restart, unknown) to the scheduler,
// and `drover logs` would no longer show what the jobs that ran there wrote, though
// the files are still in <dir>/logs.
TEST(NodeAgentTest, AnAgentStartedAgainOnItsDirectoryIsTheSameNode) {
  FakeScheduler sched;
  int sched_port = *PickFreePort();
  auto server = Serve(&sched, sched_port);
  {
    NodeAgent first(Options(sched_port, "agent-again"));
    ASSERT_TRUE(first.Start().ok());
    ASSERT_TRUE(first.WaitRegistered(absl::Seconds(15)));
    EXPECT_EQ(first.node_id(), "node-7");
  }
  NodeAgent again(Options(sched_port, "agent-again"));
  ASSERT_TRUE(again.Start().ok());
  ASSERT_TRUE(again.WaitRegistered(absl::Seconds(15)));
  EXPECT_EQ(again.node_id(), "node-7");
  {
    absl::MutexLock lock(&sched.mu);
    ASSERT_EQ(sched.registrations.size(), 2u);
    EXPECT_EQ(sched.registrations[1].node_id(), "node-7") << "it asked for a new id";
  }
  // Another directory is another node; a directory holding garbage asks for nothing.
  NodeAgent other(Options(sched_port, "agent-other"));
  ASSERT_TRUE(other.Start().ok());
  ASSERT_TRUE(other.WaitRegistered(absl::Seconds(15)));
  EXPECT_EQ(other.node_id(), "node-8");
  AgentOptions bad = Options(sched_port, "agent-bad");
  ASSERT_TRUE(MakeDirs(bad.dir).ok());
  ASSERT_TRUE(WriteFileAtomic(bad.dir + "/node-id", "../../etc\n").ok());
  NodeAgent fresh(bad);
  ASSERT_TRUE(fresh.Start().ok());
  ASSERT_TRUE(fresh.WaitRegistered(absl::Seconds(15)));
  EXPECT_EQ(fresh.node_id(), "node-9");
  EXPECT_EQ(ReadFile(bad.dir + "/node-id").value_or(""), "node-9\n");
  fresh.Shutdown();
  other.Shutdown();
  again.Shutdown();
  server->Shutdown(std::chrono::system_clock::now());
}

// A driver's job can end while the scheduler is away (a restarted scheduler fails the
// drivers it finds running) or while this node is cut off, and the node never hears
// of it: its task workers must not run on. After a registration the scheduler asked
// for, the agent stops the workers of every job the scheduler says has ended or does
// not know.
TEST(NodeAgentTest, ReregistrationStopsTaskWorkersOfJobsThatEnded) {
  FakeScheduler sched;
  {
    absl::MutexLock lock(&sched.mu);
    sched.job_states["job-live"] = proto::RUNNING;
    sched.job_states["job-failed"] = proto::FAILED;
  }
  int sched_port = *PickFreePort();
  auto server = Serve(&sched, sched_port);
  NodeAgent agent(Options(sched_port, "agent-workers"));
  ASSERT_TRUE(agent.Start().ok());
  ASSERT_TRUE(agent.WaitRegistered(absl::Seconds(15)));
  int port = 0;
  for (const std::string job : {"job-live", "job-failed", "job-unknown"}) {
    proto::StartProcessesRequest req;
    req.set_job_id(job);
    req.set_generation(WorkerPool::kFirstWorkerGeneration);
    req.set_task_worker(true);
    req.add_command("sleep");
    req.add_command("1000");
    req.add_processes()->set_rank(0);
    ASSERT_TRUE(agent.process_manager()->Start(req, &port).ok()) << job;
  }
  auto running = [&] {
    std::set<std::string> jobs;
    for (const auto& p : agent.process_manager()->Snapshot()) {
      if (p.running()) jobs.insert(p.job_id());
    }
    return jobs;
  };
  ASSERT_EQ(running().size(), 3u);
  {
    absl::MutexLock lock(&sched.mu);
    sched.known = false;  // as a restarted scheduler answers a heartbeat
  }
  EXPECT_TRUE(WaitFor([&] { return running() == std::set<std::string>{"job-live"}; }))
      << running().size() << " job(s) still have workers";
  agent.Shutdown();
  server->Shutdown(std::chrono::system_clock::now());
}

// ReadObject is served on the agent's own server when it has a store, and refused
// with FAILED_PRECONDITION when it has none.
TEST(NodeAgentTest, ServesObjectTransferOnlyWithAStore) {
  FakeScheduler sched;
  int sched_port = *PickFreePort();
  auto server = Serve(&sched, sched_port);
  testing::FakeLocalObjects store;
  ASSERT_TRUE(store.Put("obj-1", "hello", "meta").ok());
  for (bool with_store : {true, false}) {
    AgentOptions o = Options(sched_port, with_store ? "agent-store" : "agent-nostore");
    if (with_store) o.local_objects = &store;
    NodeAgent agent(o);
    ASSERT_TRUE(agent.Start().ok());
    auto stub = proto::ObjectTransfer::NewStub(MakeChannel(agent.address()));
    grpc::ClientContext ctx;
    PrepareContext(&ctx, kToken);
    proto::ReadObjectRequest req;
    req.set_object_id("obj-1");
    auto reader = stub->ReadObject(&ctx, req);
    proto::ObjectChunk chunk;
    std::string got;
    while (reader->Read(&chunk)) got += chunk.data();
    grpc::Status s = reader->Finish();
    if (with_store) {
      EXPECT_TRUE(s.ok()) << s.error_message();
      EXPECT_EQ(got, "hello");
    } else {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    }
    agent.Shutdown();
  }
  EXPECT_EQ(store.Pins("obj-1"), 0);
  server->Shutdown(std::chrono::system_clock::now());
}


// A store that stops answering (SIGSTOP) must not hold up the heartbeat: the counters a
// heartbeat carries are skipped after a short wait, so the node is not declared dead.
TEST(NodeAgentTest, AStoppedStoreDoesNotHoldUpHeartbeats) {
  FakeScheduler sched;
  int sched_port = *PickFreePort();
  auto server = Serve(&sched, sched_port);
  AgentOptions o = Options(sched_port, "agent-stopped-store");
  o.object_store = true;
  o.object_store_binary = testing::Runfile("object_store/drover-object-store");
  o.object_store_memory = 16 << 20;
  NodeAgent agent(o);
  ASSERT_TRUE(agent.Start().ok());
  auto heartbeats = [&] {
    absl::MutexLock lock(&sched.mu);
    return sched.heartbeats.size();
  };
  auto carries_store = [&] {
    absl::MutexLock lock(&sched.mu);
    return !sched.heartbeats.empty() && sched.heartbeats.back().object_store().capacity_bytes() > 0;
  };
  ASSERT_TRUE(WaitFor(carries_store, absl::Seconds(30))) << [&] {
    absl::MutexLock lock(&sched.mu);
    return absl::StrCat(sched.heartbeats.size(), " heartbeats; the last carries ",
                        sched.heartbeats.empty() ? "none"
                                                 : sched.heartbeats.back().object_store().DebugString());
  }();
  const pid_t store = agent.object_store_pid();
  ASSERT_GT(store, 0);
  ASSERT_EQ(::kill(store, SIGSTOP), 0);
  const size_t before = heartbeats();
  const absl::Time stopped = absl::Now();
  // 30 ms apart normally; at most ~1.5 s each while the store is silent. Without the
  // bound none came for the client's whole call timeout (60 s).
  const bool kept_coming = WaitFor([&] { return heartbeats() >= before + 5; }, absl::Seconds(20));
  const absl::Duration took = absl::Now() - stopped;
  ::kill(store, SIGCONT);
  EXPECT_TRUE(kept_coming) << "5 heartbeats did not come within 20 s of the store stopping";
  std::printf("5 heartbeats with the store stopped took %s\n", absl::FormatDuration(took).c_str());
  agent.Shutdown();
  server->Shutdown(std::chrono::system_clock::now());
}

}  // namespace
}  // namespace drover
