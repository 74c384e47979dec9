// Tasks and actors on a real 2-node cluster: tests/task_program.cc runs as a plain
// driver (its own job) and, started by the agents, as its own workers.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/auth.h"
#include "common/files.h"
#include "common/rpc.h"
#include "proto/scheduler.grpc.pb.h"
#include "common/spawn.h"
#include "gtest/gtest.h"
#include "tests/util/driver_program.h"
#include "tests/util/test_cluster.h"

namespace drover::testing {
namespace {

class TasksTest : public TwoNodeClusterTest {
 protected:
  // Starts the program as a driver of this cluster; returns its pid.
  pid_t Start(const std::vector<std::string>& args, const std::string& base,
              const std::string& binary = "") {
    return StartDriver(*cluster_, binary.empty() ? "tests/task_program" : binary, args, base);
  }
  DriverRun Finish(pid_t pid, const std::string& base, absl::Duration timeout) {
    return FinishDriver(*cluster_, pid, base, timeout);
  }
  DriverRun RunProgram(const std::vector<std::string>& args, absl::Duration timeout = absl::Seconds(120)) {
    return RunDriver(*cluster_, "tests/task_program", args, timeout);
  }

  // The nodes the scheduler's directory lists for an object.
  std::vector<std::string> Holders(const std::string& id) {
    auto stub = proto::Scheduler::NewStub(MakeChannel(cluster_->address()));
    grpc::ClientContext ctx;
    PrepareContext(&ctx, ReadTokenFile(cluster_->token_file()).value_or(""));
    proto::GetObjectLocationsRequest req;
    req.set_object_id(id);
    proto::GetObjectLocationsReply reply;
    std::vector<std::string> out;
    if (!stub->GetObjectLocations(&ctx, req, &reply).ok()) return {"<error>"};
    for (const auto& l : reply.locations()) out.push_back(l.node_id());
    return out;
  }

};

TEST_F(TasksTest, TasksRunAndRefsResolve) {
  DriverRun r = RunProgram({"basic"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.Get("basic"), "ok") << r.out << r.err;
  EXPECT_TRUE(absl::StartsWith(r.Get("job"), "job-")) << r.out;
}

// Tensors travel as store objects when large (read in place by the task, and the
// result read in place by the caller), inline when small.
TEST_F(TasksTest, TensorsGoThroughTheStore) {
  DriverRun r = RunProgram({"tensors"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.Get("tensor_small"), "ok") << r.out;
  EXPECT_EQ(r.Get("tensor_large"), "ok") << r.out;
  EXPECT_EQ(r.Get("tensor_small_arg"), "inline");
  EXPECT_EQ(r.Get("tensor_large_arg"), "store");
  EXPECT_EQ(r.Get("tensor_small_result_in_store"), "no");
  EXPECT_EQ(r.Get("tensor_large_result_in_store"), "yes");
}

TEST_F(TasksTest, ErrorsComeBackWithTheirCause) {
  DriverRun r = RunProgram({"errors"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(r.Get("throws"), "Throws")) << r.Get("throws");
  EXPECT_TRUE(absl::StrContains(r.Get("throws"), "bad input 7")) << r.Get("throws");
  EXPECT_TRUE(absl::StrContains(r.Get("throws"), "std::runtime_error")) << r.Get("throws");
  EXPECT_TRUE(absl::StrContains(r.Get("throws"), "node ")) << r.Get("throws");
  EXPECT_TRUE(absl::StrContains(r.Get("fails"), "refusing 8")) << r.Get("fails");
  EXPECT_EQ(r.Get("fails_code"), "INVALID_ARGUMENT");
  // A segfault: the signal and the tail of the worker's stderr.
  EXPECT_TRUE(absl::StrContains(r.Get("crash"), "SIGSEGV")) << r.Get("crash");
  EXPECT_TRUE(absl::StrContains(r.Get("crash"), "about to crash on 9")) << r.Get("crash");
  EXPECT_TRUE(absl::StrContains(r.Get("crash"), "Crashes")) << r.Get("crash");
  EXPECT_TRUE(absl::StrContains(r.Get("unregistered"), "not registered")) << r.Get("unregistered");
  EXPECT_TRUE(absl::StrContains(r.Get("infeasible"), "pending")) << r.Get("infeasible");
  EXPECT_TRUE(absl::StrContains(r.Get("infeasible"), "1000")) << r.Get("infeasible");
  EXPECT_EQ(r.Get("infeasible_code"), "DEADLINE_EXCEEDED");
  EXPECT_EQ(r.Get("after_errors"), "2");
}

TEST_F(TasksTest, AWorkerKilledMidTaskIsRetried) {
  const std::string marker = absl::StrCat(cluster_->dir(), "/dies-once");
  DriverRun r = RunProgram({"retry", marker});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.Get("retried"), "42") << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(r.Get("no_retry"), "SIGKILL")) << r.Get("no_retry");
}

TEST_F(TasksTest, RefsCrossNodes) {
  DriverRun r = RunProgram({"nodes", cluster_->agent_node_id(0), cluster_->agent_node_id(1)});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(absl::StartsWith(r.Get("where_a"), cluster_->agent_node_id(0))) << r.out;
  EXPECT_TRUE(absl::StartsWith(r.Get("where_b"), cluster_->agent_node_id(1))) << r.out;
  EXPECT_EQ(r.Get("cross_node"), "ok") << r.out << r.err;
  EXPECT_EQ(r.Get("local_to_data"), cluster_->agent_node_id(1) + " bytes=3145728") << r.out;
  EXPECT_EQ(r.Get("warm_reuse"), "yes") << r.out;
}

TEST_F(TasksTest, ActorsKeepOrderAndReportDeath) {
  DriverRun r = RunProgram({"actors"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.Get("actor_order"), "ok") << r.out;
  EXPECT_EQ(r.Get("actor_add"), "105");
  EXPECT_EQ(r.Get("handle_in_task"), "105");
  EXPECT_EQ(r.Get("named_value"), "105");
  EXPECT_TRUE(absl::StrContains(r.Get("missing_actor"), "no-such-actor")) << r.Get("missing_actor");
  EXPECT_TRUE(absl::StrContains(r.Get("broken_factory"), "no counter today")) << r.Get("broken_factory");
  EXPECT_TRUE(absl::StrContains(r.Get("actor_death"), "exited with code 3")) << r.Get("actor_death");
  EXPECT_TRUE(absl::StrContains(r.Get("actor_death"), "counter exiting with 3")) << r.Get("actor_death");
  EXPECT_TRUE(absl::StrContains(r.Get("after_death"), "dead")) << r.Get("after_death");
}

TEST_F(TasksTest, ActorsRestartPerPolicy) {
  DriverRun r = RunProgram({"restart"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(r.Get("died"), "exited with code 4")) << r.Get("died");
  EXPECT_EQ(r.Get("restarted"), "ok") << r.out;
  EXPECT_EQ(r.Get("value_before"), "8");
  EXPECT_EQ(r.Get("value_after_restart"), "7");
  EXPECT_TRUE(absl::StrContains(r.Get("dead_for_good"), "no restarts left")) << r.Get("dead_for_good");
}

TEST_F(TasksTest, CancelStopsRunningAndQueuedTasks) {
  DriverRun r = RunProgram({"cancel"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.Get("cancel_running"), "OK");
  EXPECT_EQ(r.Get("running_code"), "CANCELLED");
  EXPECT_EQ(r.Get("cancel_queued"), "OK");
  EXPECT_EQ(r.Get("queued_code"), "CANCELLED");
  EXPECT_EQ(r.Get("others_run"), "300");
}

// Issue 20: a task's failure reaches its dependents, down a chain, with why, and nothing
// fails or completes a result under a lock (the driver aborted on absl's deadlock check).
TEST_F(TasksTest, FailuresReachChainsOfDependentsWithTheirCause) {
  DriverRun r = RunProgram({"chains"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  // A lease refused for good.
  EXPECT_TRUE(absl::StartsWith(r.Get("refused_chain"), "INVALID_ARGUMENT")) << r.Get("refused_chain");
  EXPECT_TRUE(absl::StrContains(r.Get("refused_chain"), "cannot get a worker")) << r.Get("refused_chain");
  EXPECT_TRUE(absl::StrContains(r.Get("refused_chain"), "negative")) << r.Get("refused_chain");
  // An argument that could not be encoded.
  EXPECT_TRUE(absl::StartsWith(r.Get("encoding_chain"), "INVALID_ARGUMENT")) << r.Get("encoding_chain");
  EXPECT_TRUE(absl::StrContains(r.Get("encoding_chain"), "empty ObjectRef")) << r.Get("encoding_chain");
  // A cancelled task.
  EXPECT_EQ(r.Get("cancel"), "OK");
  EXPECT_TRUE(absl::StartsWith(r.Get("cancel_chain"), "CANCELLED")) << r.Get("cancel_chain");
  EXPECT_TRUE(absl::StrContains(r.Get("cancel_chain"), "cancelled")) << r.Get("cancel_chain");
  // Calls on one actor, each waiting for the one before, when it is killed.
  EXPECT_EQ(r.Get("actor_up"), "1");
  EXPECT_EQ(r.Get("actor_killed"), "OK");
  EXPECT_TRUE(absl::StartsWith(r.Get("actor_chain"), "FAILED_PRECONDITION")) << r.Get("actor_chain");
  EXPECT_TRUE(absl::StrContains(r.Get("actor_chain"), "killed by drover::Kill")) << r.Get("actor_chain");
  EXPECT_EQ(r.Get("after_chains"), "5");
}

// Issue 19: once Kill returns, a call on the handle fails at once with the kill's
// reason (it used to race the worker's death and run); a task whose argument can never
// be made says which argument it waits for and why that one waits.
TEST_F(TasksTest, KilledActorsRefuseCallsAndDependentsSayWhatTheyWaitFor) {
  DriverRun r = RunProgram({"kill"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r.Get(absl::StrCat("kill_", i)), "OK");
    const std::string after = r.Get(absl::StrCat("after_kill_", i));
    EXPECT_TRUE(absl::StartsWith(after, "FAILED_PRECONDITION")) << after;
    EXPECT_TRUE(absl::StrContains(after, "killed by drover::Kill")) << after;
  }
  const std::string reason = r.Get("dependent_reason");
  EXPECT_TRUE(absl::StartsWith(reason, "DEADLINE_EXCEEDED")) << reason;
  EXPECT_TRUE(absl::StrContains(reason, "task dependent2 waits for its argument 1")) << reason;
  EXPECT_TRUE(absl::StrContains(reason, "task dependent waits for its argument 1")) << reason;
  EXPECT_TRUE(absl::StrContains(reason, r.Get("big_id"))) << reason;
  EXPECT_TRUE(absl::StrContains(reason, "1000")) << reason;
}

TEST_F(TasksTest, BadInputIsAClearError) {
  DriverRun r = RunProgram({"types"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(r.Get("wrong_type"), "argument 1 of Add")) << r.Get("wrong_type");
  EXPECT_TRUE(absl::StrContains(r.Get("wrong_type"), "got a string")) << r.Get("wrong_type");
  EXPECT_EQ(r.Get("wrong_type_code"), "INVALID_ARGUMENT");
  EXPECT_TRUE(absl::StrContains(r.Get("after_shutdown"), "Shutdown")) << r.Get("after_shutdown");
}

// A driver killed by SIGKILL leaves nothing behind: its job ends, its actor and task
// workers stop on every node.
TEST_F(TasksTest, NoWorkerOutlivesItsDriver) {
  const std::string base = absl::StrCat(cluster_->dir(), "/holder");
  pid_t pid = Start({"hold"}, base);
  std::string job;
  ASSERT_TRUE(WaitFor(
      [&] {
        auto out = ReadFile(base + ".out");
        size_t at = out.ok() ? out->find("holding=") : std::string::npos;
        if (at == std::string::npos) return false;
        job = out->substr(at + 8, out->find('\n', at) - at - 8);
        return true;
      },
      absl::Seconds(120)))
      << ReadFile(base + ".out").value_or("") << ReadFile(base + ".err").value_or("");
  ASSERT_FALSE(ProcessesOfJob(job).empty()) << "no worker of " << job << " is running";
  const std::string out = ReadFile(base + ".out").value_or("");
  auto value_of = [&](const std::string& key) {
    size_t at = out.find(key + "=");
    return at == std::string::npos ? "" : out.substr(at + key.size() + 1, out.find('\n', at) - at - key.size() - 1);
  };
  const std::vector<std::string> objects = {value_of("stored"), value_of("put")};
  for (const std::string& id : objects) {
    ASSERT_TRUE(absl::StartsWith(id, job + ".")) << id;
    EXPECT_TRUE(WaitFor([&] { return !Holders(id).empty(); }, absl::Seconds(10))) << id;
  }
  ::kill(pid, SIGKILL);
  int status;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WaitFor([&] { return ProcessesOfJob(job).empty(); }, absl::Seconds(30)))
      << ProcessesOfJob(job).size() << " processes of " << job << " are still alive";
  // Its objects are gone from every store.
  for (const std::string& id : objects) {
    EXPECT_TRUE(WaitFor([&] { return Holders(id).empty(); }, absl::Seconds(30))) << id << " is still held";
  }
  auto info = cluster_->client().GetJob(job);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_TRUE(WaitFor(
      [&] {
        auto j = cluster_->client().GetJob(job);
        return j.ok() && j->state == JobState::kSucceeded;
      },
      absl::Seconds(30)));
}

// Regression: a lease request that waited for room while its driver died was granted
// after the job had ended; when its worker started after the agent had stopped the
// job's workers, that lease (its CPUs) was never returned and the node stayed full for
// every later job.
TEST_F(TasksTest, ALeaseRequestWaitingWhenItsDriverDiesLeavesNoLeaseBehind) {
  const std::string a = cluster_->agent_node_id(0);
  const std::string base = absl::StrCat(cluster_->dir(), "/filler");
  pid_t pid = Start({"fill", a}, base);
  std::string job;
  ASSERT_TRUE(WaitFor(
      [&] {
        auto out = ReadFile(base + ".out");
        size_t at = out.ok() ? out->find("job=") : std::string::npos;
        if (at == std::string::npos || out->find("submitted=") == std::string::npos) return false;
        job = out->substr(at + 4, out->find('\n', at) - at - 4);
        return true;
      },
      absl::Seconds(60)))
      << ReadFile(base + ".err").value_or("");
  // Two tasks of 2 CPUs run on a (4 CPUs: two workers, each with its launcher); the
  // third's lease request waits for room. Only the job's end frees it.
  ASSERT_TRUE(WaitFor([&] { return ProcessesOfJob(job).size() >= 4; }, absl::Seconds(60)))
      << ProcessesOfJob(job).size() << " processes of " << job;
  ::kill(pid, SIGKILL);
  int status;
  ::waitpid(pid, &status, 0);
  auto ended = cluster_->client().WaitJob(job, absl::Seconds(30));
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_TRUE(WaitFor([&] { return ProcessesOfJob(job).empty(); }, absl::Seconds(30)))
      << ProcessesOfJob(job).size() << " processes of " << job << " outlived it";
  // No lease was granted to it after it ended.
  auto timeline = cluster_->client().Timeline(job);
  ASSERT_TRUE(timeline.ok()) << timeline.status();
  absl::Time end = absl::InfiniteFuture();
  for (const auto& e : timeline->events) {
    if (e.kind == TimelineEventKind::kEnded) end = e.time;
  }
  for (const auto& e : timeline->events) {
    EXPECT_FALSE(e.kind == TimelineEventKind::kLeaseGranted && e.time > end)
        << e.lease_id << " was granted " << absl::FormatDuration(e.time - end) << " after the job ended";
  }
  // All of a's CPUs are free again for the next driver.
  DriverRun r = RunProgram({"whole", a});
  EXPECT_EQ(r.Get("whole"), "3") << r.err << cluster_->DaemonLogs();
}

// Issue 19 item 7: a driver that keeps every CPU busy with 1-second tasks (16 in flight
// on 8 CPUs) no longer holds a gang needing all 8 back for ever: the gang's claim takes
// the task leases back as their tasks finish, it starts within the time they take, and
// the tasks go on after it.
TEST_F(TasksTest, AWaitingGangStartsWhileADriverStreamsTasks) {
  const std::string stop = absl::StrCat(cluster_->dir(), "/stop-stream");
  const std::string base = absl::StrCat(cluster_->dir(), "/streamer");
  pid_t pid = Start({"stream", "16", stop}, base);
  auto done = [&] {
    int64_t n = 0;
    return absl::SimpleAtoi(ReadDriverOutput(base).Get("done"), &n) ? n : int64_t{0};
  };
  // Every CPU is leased: a round of tasks on all of them has run.
  ASSERT_TRUE(WaitFor([&] { return done() >= 16; }, absl::Seconds(120)))
      << ReadDriverOutput(base).All() << cluster_->DaemonLogs();
  // A gang of every CPU of both nodes.
  auto gang = cluster_->RunJob(TestCluster::JobOf({"sleep", "1"}, 8, 4), absl::Seconds(120));
  ASSERT_TRUE(gang.ok()) << gang.status() << ReadDriverOutput(base).All();
  EXPECT_EQ(gang->state, JobState::kSucceeded) << gang->reason << cluster_->DaemonLogs();
  ASSERT_TRUE(gang->start_time.has_value()) << gang->reason;
  std::cout << "the gang waited " << absl::FormatDuration(*gang->start_time - gang->submit_time)
            << " behind tasks of 1 s" << std::endl;
  // Within the time the running tasks (1 s) take to finish, with room for a loaded machine.
  EXPECT_LT(*gang->start_time - gang->submit_time, absl::Seconds(10))
      << "the gang waited " << absl::FormatDuration(*gang->start_time - gang->submit_time);
  // The tasks go on after it.
  const int64_t after_gang = done();
  EXPECT_TRUE(WaitFor([&] { return done() >= after_gang + 16; }, absl::Seconds(120)))
      << ReadDriverOutput(base).All();
  ASSERT_TRUE(WriteFileAtomic(stop, "").ok());
  DriverRun r = Finish(pid, base, absl::Seconds(120));
  EXPECT_EQ(r.code, 0) << r.All();
  EXPECT_EQ(r.Get("stream"), "ok") << r.All();
}

// The workers run the program from the package the driver uploaded, not from its path:
// the driver's own file is gone before any worker starts.
TEST_F(TasksTest, TheBinaryIsShippedToTheAgents) {
  const std::string dir = absl::StrCat(cluster_->dir(), "/elsewhere");
  ASSERT_TRUE(MakeDirs(dir, 0700).ok());
  const std::string copy = dir + "/my_program";
  auto bytes = ReadFile(Runfile("tests/task_program"));
  ASSERT_TRUE(bytes.ok());
  ASSERT_TRUE(WriteFileAtomic(copy, *bytes, 0700).ok());
  const std::string base = absl::StrCat(cluster_->dir(), "/shipped");
  pid_t pid = Start({"shipped"}, base, copy);
  DriverRun r = Finish(pid, base, absl::Seconds(120));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(r.Get("worker_exe"), "/packages/")) << r.out;
  EXPECT_FALSE(absl::StrContains(r.Get("worker_exe"), "my_program")) << r.out;
  EXPECT_EQ(r.Get("removed"), "yes");
}

// A worker started from a program that is not the driver's (another build) refuses to
// serve, and the driver hears why instead of waiting forever. (A cluster of its own:
// its package cache is tampered with.)
TEST(TasksPackageTest, AWorkerOfAnotherBuildRefusesToServe) {
  TestClusterOptions o;
  o.nodes = 1;
  o.cpus_per_node = 2;
  auto c = TestCluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  TestCluster& cluster = **c;
  const std::vector<std::string> env = {"DROVER_ADDRESS=" + cluster.address(),
                                        "DROVER_TOKEN_FILE=" + cluster.token_file()};
  std::string out, err;
  ASSERT_EQ(RunProgram({Runfile("tests/task_program"), "one"}, env, cluster.dir(), &out, &err), 0)
      << out << err;
  ASSERT_TRUE(absl::StrContains(out, "one_task=3")) << out << err;
  // The node fetched the program once; replace it with another drover program.
  const std::string packages = cluster.dir() + "/agent-0/packages";
  std::string cached;
  for (const auto& e : std::filesystem::directory_iterator(packages)) cached = e.path().string() + "/program";
  ASSERT_FALSE(cached.empty());
  auto other = ReadFile(Runfile("tests/task_program_other"));
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(WriteFileAtomic(cached, *other, 0700).ok());
  ASSERT_EQ(RunProgram({Runfile("tests/task_program"), "one"}, env, cluster.dir(), &out, &err), 0)
      << out << err;
  EXPECT_TRUE(absl::StrContains(out, "refused to start")) << out;
  EXPECT_TRUE(absl::StrContains(out, "build id")) << out;
}

// An object kept on a node that dies is made again by running its task elsewhere; an
// actor's result cannot be, and Get says so. (A cluster of its own: a node dies.)
TEST(TasksLineageTest, ALostObjectIsRebuiltByItsTask) {
  TestClusterOptions o;
  o.nodes = 2;
  o.cpus_per_node = 4;
  auto c = TestCluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  TestCluster& cluster = **c;
  const std::string base = absl::StrCat(cluster.dir(), "/lineage");
  const std::string go = base + ".go";
  SpawnOptions so;
  so.argv = {Runfile("tests/task_program"), "lineage", cluster.agent_node_id(0),
             cluster.agent_node_id(1), go};
  for (char** e = environ; *e; ++e) {
    if (!absl::StartsWith(*e, "DROVER_")) so.env.push_back(*e);
  }
  so.env.push_back("DROVER_ADDRESS=" + cluster.address());
  so.env.push_back("DROVER_TOKEN_FILE=" + cluster.token_file());
  so.stdout_path = base + ".out";
  so.stderr_path = base + ".err";
  auto pid = Spawn(so);
  ASSERT_TRUE(pid.ok()) << pid.status();
  // The driver keeps its objects on the node it found on this machine; the other one
  // (the "victim") holds the blob and the actor.
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(ReadFile(base + ".out").value_or(""), "made=2"); },
                      absl::Seconds(60)))
      << ReadFile(base + ".out").value_or("") << ReadFile(base + ".err").value_or("");
  const std::string printed = ReadFile(base + ".out").value_or("");
  const bool victim_is_1 = absl::StrContains(printed, "victim=" + cluster.agent_node_id(1));
  cluster.SignalAgent(victim_is_1 ? 1 : 0, SIGKILL);
  ASSERT_TRUE(WriteFileAtomic(go, "go").ok());
  int status = 0;
  ASSERT_TRUE(WaitFor([&] { return ::waitpid(*pid, &status, WNOHANG) == *pid; }, absl::Seconds(120)));
  const std::string out = ReadFile(base + ".out").value_or("");
  EXPECT_TRUE(absl::StrContains(out, "rebuilt=ok")) << out << ReadFile(base + ".err").value_or("");
  EXPECT_TRUE(absl::StrContains(out, "actor_result=object")) << out;
  EXPECT_TRUE(absl::StrContains(out, "cannot be made again")) << out;
}

// One worker SIGSTOPped with megabytes of calls waiting for it (sent by the driver's
// connection loop as their arguments' tasks reply) holds up no other connection of the
// driver: another actor's calls and tasks are answered. drover::Shutdown returns while
// the worker is still stopped.
TEST_F(TasksTest, AStoppedWorkerHoldsUpNoOtherConnectionNorShutdown) {
  DriverRun r = RunProgram({"stopped"}, absl::Seconds(180));
  const std::string pid = r.Get("sink_pid");
  int64_t sink = 0;
  if (absl::SimpleAtoi(pid, &sink) && sink > 1) {
    ::kill(static_cast<pid_t>(sink), SIGCONT);  // the driver does, unless it hung
  }
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.Get("stuck_answered"), "no") << r.out;
  EXPECT_EQ(r.Get("others"), "ok") << r.out << r.err;
  EXPECT_EQ(r.Get("shutdown"), "returned") << r.out << r.err;
}

}  // namespace
}  // namespace drover::testing
