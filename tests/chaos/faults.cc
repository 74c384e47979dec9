#include "tests/chaos/faults.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "cli/cluster_file.h"
#include "common/files.h"
#include "nlohmann/json.hpp"
#include "tests/chaos/check_util.h"
#include "tests/chaos/cluster_env.h"
#include "tests/chaos/procs.h"

namespace drover::chaos {
namespace {

constexpr char kFiller[] = "zz-chaos-filler";

// How long after its store answers again an SDK client must have put and got an
// object: the SDK reconnects within ~0.1 s on a quiet machine; the bound allows for a
// loaded 2-core one.
constexpr absl::Duration kStoreClientBound = absl::Seconds(10);

// The command line of `pid`, one string per argument; empty if it is gone.
std::vector<std::string> CmdlineOf(pid_t pid) {
  auto raw = ReadFile(absl::StrCat("/proc/", pid, "/cmdline"));
  if (!raw.ok()) return {};
  return absl::StrSplit(*raw, '\0', absl::SkipEmpty());
}

// Lines of a file ("" entries dropped); empty if it is missing.
std::vector<std::string> FileLines(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return {};
  return absl::StrSplit(*text, '\n', absl::SkipEmpty());
}

}  // namespace

FaultInjector::FaultInjector(testing::TestCluster& cluster, testing::NetnsNetwork* net,
                             std::vector<std::string> spill_dirs, InjectorOptions options)
    : cluster_(cluster),
      net_(net),
      spill_dirs_(std::move(spill_dirs)),
      options_(std::move(options)) {}

FaultRecord FaultInjector::Inject(const Fault& f) {
  FaultRecord r;
  r.fault = f;
  r.start = absl::Now();
  switch (f.kind) {
    case FaultKind::kKillAgent:
      KillAgent(f, r);
      break;
    case FaultKind::kKillStore:
      KillStore(f, r);
      break;
    case FaultKind::kKillScheduler:
      KillScheduler(f, r);
      break;
    case FaultKind::kKillRedis:
      KillRedis(f, r);
      break;
    case FaultKind::kKillWorker:
    case FaultKind::kStopWorker:
      WorkerFault(f, r);
      break;
    case FaultKind::kStopAgent:
      r.target = AgentTarget(f.node);
      r.nodes.insert(cluster_.agent_node_id(f.node));
      Stop(cluster_.agent_pid(f.node), f, r);
      break;
    case FaultKind::kStopStore: {
      pid_t store = StoreOf(f.node);
      r.target = absl::StrCat("store of ", AgentTarget(f.node), " (pid ", store, ")");
      r.nodes.insert(cluster_.agent_node_id(f.node));
      Stop(store, f, r);
      break;
    }
    case FaultKind::kStopScheduler:
      r.target = absl::StrCat("scheduler (pid ", cluster_.scheduler_pid(), ")");
      Stop(cluster_.scheduler_pid(), f, r);
      break;
    case FaultKind::kStopRedis:
      r.target = absl::StrCat("redis-server (pid ", cluster_.redis()->pid(), ")");
      Stop(cluster_.redis()->pid(), f, r);
      break;
    case FaultKind::kCutNode:
      CutNode(f, r);
      break;
    case FaultKind::kFillSpill:
      FillSpill(f, r);
      break;
    case FaultKind::kRestartHead:
      RestartHead(f, r);
      break;
  }
  r.end = absl::Now();
  return r;
}

std::string FaultInjector::AgentTarget(int node) {
  return absl::StrCat("agent ", node, " (", cluster_.agent_node_id(node), ", pid ",
                      cluster_.agent_pid(node), ")");
}

pid_t FaultInjector::StoreOf(int node) {
  std::vector<pid_t> stores = ChildrenOf(cluster_.agent_pid(node), "drover-object");
  return stores.empty() ? 0 : stores.front();
}

void FaultInjector::KillAgent(const Fault& f, FaultRecord& r) {
  r.target = AgentTarget(f.node);
  r.nodes.insert(cluster_.agent_node_id(f.node));
  cluster_.SignalAgent(f.node, SIGKILL);
  r.injected = true;
  absl::SleepFor(f.hold);
  r.recovery = cluster_.RestartAgent(f.node);
  const std::string now = cluster_.agent_node_id(f.node);  // the id it registered with
  if (r.nodes.insert(now).second) r.note = absl::StrCat("registered again as ", now);
}

void FaultInjector::KillStore(const Fault& f, FaultRecord& r) {
  const std::string node = cluster_.agent_node_id(f.node);
  r.nodes.insert(node);
  // An SDK client on the node, putting and getting in a loop, to see it recover.
  std::string client_job, why;
  const std::string dir = absl::StrCat(options_.work_dir, "/store-", ++serial_);
  const std::string client_dir =
      options_.store_client.empty() ? "" : StartStoreClients(dir, node, client_job, why);
  const pid_t store = StoreOf(f.node);
  r.target = absl::StrCat("store of ", AgentTarget(f.node), " (pid ", store, ")");
  if (!client_job.empty()) absl::StrAppend(&r.target, " under SDK client job ", client_job);
  auto stop_clients = [&] {
    if (!client_job.empty()) (void)WriteFileAtomic(dir + "/stop", "", 0644);
  };
  if (store <= 0) {
    r.note = "the node runs no store now";
    stop_clients();
    return;
  }
  ::kill(store, SIGKILL);
  r.injected = true;
  // Its agent restarts it: wait for the new one to run.
  const bool back = testing::WaitFor(
      [&] {
        pid_t now = StoreOf(f.node);
        return now > 0 && now != store;
      },
      absl::Seconds(20));
  if (!back) {
    r.recovery = absl::DeadlineExceededError(
        absl::StrCat("the agent did not restart its store within 20 s (pid ", store, " killed)"));
  }
  if (!client_dir.empty() && back) {
    JudgeStoreClient(client_dir, node, absl::Now(), r);
  } else if (!why.empty() && options_.report != nullptr) {
    options_.report->Note("store kills without an SDK client under them", why);
  }
  stop_clients();
}

std::string FaultInjector::StartStoreClients(const std::string& dir, const std::string& node,
                                             std::string& job, std::string& why) {
  if (absl::Status s = MakeDirs(dir, 0777); !s.ok()) {
    why = std::string(s.message());
    return "";
  }
  const int nodes = static_cast<int>(spill_dirs_.size());
  JobSpec spec = testing::TestCluster::JobOf({options_.store_client, dir}, nodes, 1);
  spec.name = "chaos-store-client";
  spec.idempotency_key = absl::StrCat("chaos-store-client-", ::getpid(), "-", serial_);
  absl::StatusOr<JobInfo> info = cluster_.client().Submit(spec);
  for (int i = 0; !info.ok() && absl::IsUnavailable(info.status()) && i < 20; ++i) {
    absl::SleepFor(absl::Milliseconds(500));
    info = cluster_.client().Submit(spec);
  }
  if (!info.ok()) {
    why = absl::StrCat("its job was not made: ", info.status().ToString());
    return "";
  }
  job = info->job_id;
  const std::string out = absl::StrCat(dir, "/", node, ".out");
  const bool ready = testing::WaitFor(
      [&] {
        for (const std::string& l : FileLines(out)) {
          if (absl::StartsWith(l, "ready")) return true;
        }
        return false;
      },
      absl::Seconds(30));
  if (!ready) {
    why = absl::StrCat("its rank on ", node, " (job ", job, ") was not ready in 30 s");
    return "";
  }
  return dir;
}

// The client's rank on the killed store's node wrote (chaos_store_client.cc):
// "recovered MS" when its first put+get started after `go` succeeded, then "anchor
// WHAT" for the object it put before the kill.
void FaultInjector::JudgeStoreClient(const std::string& dir, const std::string& node,
                                     absl::Time back, FaultRecord& r) {
  (void)WriteFileAtomic(dir + "/go", "", 0644);
  const std::string out = absl::StrCat(dir, "/", node, ".out");
  std::string recovered, anchor, unstored;
  testing::WaitFor(
      [&] {
        for (const std::string& l : FileLines(out)) {
          if (absl::StartsWith(l, "recovered ")) recovered = l.substr(10);
          if (absl::StartsWith(l, "anchor ")) anchor = l.substr(7);
          if (absl::StartsWith(l, "unstored ")) unstored = l.substr(9);
        }
        return !anchor.empty();
      },
      kStoreClientBound + absl::Seconds(20));
  Report* report = options_.report;
  if (report == nullptr) return;
  const std::string where = absl::StrCat("the SDK client on ", node, " (", dir, ")");
  int64_t ms = 0;
  if (recovered.empty() || !absl::SimpleAtoi(recovered, &ms)) {
    report->Violated("store-client-recovers",
                     absl::StrCat(where, " did not put and get again within ",
                                  absl::FormatDuration(kStoreClientBound + absl::Seconds(20)),
                                  " of its store's restart; it wrote: ",
                                  absl::StrJoin(FileLines(out), " | ")));
    return;
  }
  const absl::Duration took = absl::FromUnixMillis(ms) - back;
  r.note = absl::StrCat("SDK client back ", absl::FormatDuration(absl::Trunc(took, absl::Milliseconds(1))),
                        " after the store");
  if (took > kStoreClientBound) {
    report->Violated("store-client-recovers",
                     absl::StrCat(where, " put and got again only ", absl::FormatDuration(took),
                                  " after its store was back (bound ",
                                  absl::FormatDuration(kStoreClientBound), ")"));
  } else {
    report->Held("store-client-recovers");
  }
  // The object put before the kill went with the store: NOT_FOUND, naming the node
  // and the restart. An anchor the store refused before the kill (full) proves nothing
  // either way: its Get answers the put's failure.
  if (!unstored.empty()) {
    report->Note("store kills whose SDK client could not put its anchor first",
                 absl::StrCat(where, ": ", unstored));
  } else if (absl::StartsWith(anchor, "NOT_FOUND") && absl::StrContains(anchor, node) &&
      absl::StrContains(anchor, "restarted")) {
    report->Held("store-client-recovers");
  } else {
    report->Violated("store-client-recovers",
                     absl::StrCat(where, ": the Get of an object put before the store's "
                                         "restart said \"", anchor,
                                  "\", not NOT_FOUND naming ", node, " and its restart"));
  }
}

void FaultInjector::KillScheduler(const Fault& f, FaultRecord& r) {
  r.target = absl::StrCat("scheduler (pid ", cluster_.scheduler_pid(), ")");
  ::kill(cluster_.scheduler_pid(), SIGKILL);
  r.injected = true;
  absl::SleepFor(f.hold);
  r.recovery = cluster_.RestartScheduler(SIGKILL);  // reaps the dead one, starts anew
}

void FaultInjector::KillRedis(const Fault& f, FaultRecord& r) {
  testing::RedisServer* redis = cluster_.redis();
  r.target = absl::StrCat("redis-server (pid ", redis->pid(), ")");
  // Submits in flight as it dies: bursts from a few clients at once, going on until
  // it is back.
  constexpr int kSubmitters = 3;
  std::atomic<bool> stop{false};
  std::vector<std::vector<SubmitProbe>> bursts(kSubmitters);
  std::vector<std::thread> submitters;
  for (int t = 0; t < kSubmitters; ++t) {
    const int serial = ++serial_;
    submitters.emplace_back([&, t, serial] { SubmitBurst(serial, stop, bursts[t]); });
  }
  absl::SleepFor(absl::Milliseconds(100));  // let the first submits leave
  ::kill(redis->pid(), SIGKILL);
  r.injected = true;
  absl::SleepFor(f.hold);
  r.recovery = redis->Restart();  // same port and AOF: the data written before stays
  stop = true;
  size_t n = 0;
  for (int t = 0; t < kSubmitters; ++t) {
    submitters[t].join();
    n += bursts[t].size();
    probes_.insert(probes_.end(), bursts[t].begin(), bursts[t].end());
  }
  r.note = absl::StrCat(n, " submits in flight");
}

void FaultInjector::SubmitBurst(int serial, const std::atomic<bool>& stop,
                                std::vector<SubmitProbe>& out) {
  const std::string dir = absl::StrCat(options_.work_dir, "/submits-", serial);
  if (!MakeDirs(dir, 0777).ok()) return;
  for (int i = 0; !stop.load() && i < 50; ++i) {
    SubmitProbe p;
    p.key = absl::StrCat("chaos-burst-", ::getpid(), "-", serial, "-", i);
    p.runs_file = absl::StrCat(dir, "/", i, ".runs");
    p.submitted = absl::Now();
    JobSpec spec = testing::TestCluster::JobOf(
        {"/bin/sh", "-c", absl::StrCat("echo \"$DROVER_JOB_ID\" >> ", p.runs_file)}, 1);
    spec.name = "chaos-burst";
    spec.idempotency_key = p.key;
    // Every attempt with the same key, whatever the error (a retry with the key is
    // always safe: that is the contract under test), until one is acknowledged.
    const absl::Time give_up = p.submitted + absl::Seconds(60);
    while (true) {
      absl::StatusOr<JobInfo> job = cluster_.client().Submit(spec);
      if (job.ok()) {
        p.acked.insert(job->job_id);
        // Once more: the answer must name the same job.
        absl::StatusOr<JobInfo> again = cluster_.client().Submit(spec);
        if (again.ok()) p.acked.insert(again->job_id);
        break;
      }
      p.last_error = job.status();
      if (absl::Now() >= give_up) {
        p.gave_up = true;
        break;
      }
      absl::SleepFor(absl::Milliseconds(200));
    }
    out.push_back(std::move(p));
  }
}

void FaultInjector::CheckSubmits(Client& client, const std::vector<FaultRecord>& faults,
                                 Report& report) {
  absl::StatusOr<std::vector<JobInfo>> all = client.ListJobs();
  if (!all.ok()) {
    report.Violated("submit-once", absl::StrCat("ListJobs: ", all.status().ToString()));
    return;
  }
  std::map<std::string, std::vector<const JobInfo*>> by_key;
  for (const JobInfo& j : *all) {
    if (!j.spec.idempotency_key.empty()) by_key[j.spec.idempotency_key].push_back(&j);
  }
  for (const auto& [key, jobs] : by_key) {
    if (jobs.size() == 1) continue;
    std::vector<std::string> ids;
    for (const JobInfo* j : jobs) ids.push_back(j->job_id);
    report.Violated("submit-once", absl::StrCat("idempotency key ", key, " made ", jobs.size(),
                                                " jobs: ", absl::StrJoin(ids, ", ")));
  }
  for (const SubmitProbe& p : probes_) {
    const std::string what = absl::StrCat("burst submit ", p.key);
    if (p.acked.size() > 1) {
      report.Violated("submit-once", absl::StrCat(what, " was answered with ", p.acked.size(),
                                                  " jobs: ", absl::StrJoin(p.acked, ", ")));
      continue;
    }
    const std::vector<std::string> runs = FileLines(p.runs_file);
    if (p.acked.empty()) {
      // Never acknowledged (Redis down past the retries): it may still have made a job,
      // but only one, and run it once.
      if (runs.size() > 1) {
        report.Violated("submit-once", absl::StrCat(what, " (never acknowledged: ",
                                                    p.last_error.ToString(), ") ran ",
                                                    runs.size(), " times"));
      } else {
        report.Note("burst submits never acknowledged", absl::StrCat(what, ": ", p.last_error.ToString()));
      }
      continue;
    }
    const std::string& job = *p.acked.begin();
    absl::StatusOr<JobInfo> info = client.GetJob(job);
    if (!info.ok()) {
      report.Violated("submit-once", absl::StrCat(what, " was acknowledged as ", job,
                                                  " but the cluster has no such job: ",
                                                  info.status().ToString()));
      continue;
    }
    if (runs.size() > 1) {
      // The known start race (a scheduler killed between a start and its record) runs
      // a job twice under one id: that issue's, not a second job from a retry.
      bool same = std::all_of(runs.begin(), runs.end(), [&](const std::string& l) { return l == job; });
      bool scheduler_killed = false;
      for (const FaultRecord& f : faults) {
        scheduler_killed |= f.injected && f.end >= p.submitted &&
                            (f.fault.kind == FaultKind::kKillScheduler ||
                             f.fault.kind == FaultKind::kRestartHead);
      }
      report.Violated(same && scheduler_killed ? "starts-exactly-once" : "submit-once",
                      absl::StrCat(what, " (", job, ") ran ", runs.size(), " times: ",
                                   absl::StrJoin(runs, ", ")));
    } else if (info->state == JobState::kSucceeded && (runs.empty() || runs[0] != job)) {
      report.Violated("submit-once", absl::StrCat(what, ": ", job, " SUCCEEDED but its run wrote ",
                                                  runs.empty() ? "nothing" : runs[0]));
    } else {
      report.Held("submit-once");
    }
  }
}

void FaultInjector::RestartHead(const Fault& f, FaultRecord& r) {
  testing::RedisServer* redis = cluster_.redis();
  const bool with_redis = redis != nullptr && (f.pick & 1) != 0;
  const pid_t scheduler = cluster_.scheduler_pid();
  std::vector<std::string> scheduler_argv = CmdlineOf(scheduler);
  // Brought back, it must listen where the agents and clients look for it (as `drover
  // up` records its scheduler's command line: with the port it got).
  const std::string port = cluster_.address().substr(cluster_.address().rfind(':') + 1);
  for (size_t i = 0; i + 1 < scheduler_argv.size(); ++i) {
    if (scheduler_argv[i] == "--port") scheduler_argv[i + 1] = port;
  }
  r.target = absl::StrCat("scheduler (pid ", scheduler, ")");
  if (with_redis) absl::StrAppend(&r.target, " and redis-server (pid ", redis->pid(), ")");
  absl::StrAppend(&r.target, ", brought back by `drover up`");
  // The record `drover up` keeps of a cluster it started, written for this one: `up`
  // then finds it partly alive and brings back what is dead, in place.
  const std::string home = options_.work_dir + "/up-home";
  // The keys are cli/cluster_file.h's (ParseClusterRecord reads them back below).
  nlohmann::json record;
  record["address"] = cluster_.address();
  record["token_file"] = cluster_.token_file();
  record["dir"] = cluster_.dir();
  record["scheduler_pid"] = scheduler;
  record["scheduler_argv"] = scheduler_argv;
  record["agent_pids"] = nlohmann::json::array();
  for (size_t i = 0; i < spill_dirs_.size(); ++i) record["agent_pids"].push_back(cluster_.agent_pid(static_cast<int>(i)));
  if (redis != nullptr) {
    record["redis"] = redis->address();
    record["redis_pid"] = redis->pid();
    record["redis_argv"] = redis->argv();
    if (!redis->password_file().empty()) record["redis_password_file"] = redis->password_file();
  }
  if (absl::Status s = MakeDirs(home, 0700); !s.ok()) {
    r.recovery = s;
    return;
  }
  if (absl::Status s = WriteFileAtomic(home + "/cluster.json", record.dump(2) + "\n", 0600); !s.ok()) {
    r.recovery = s;
    return;
  }
  cluster_.StopScheduler(SIGKILL);
  if (with_redis) {
    ::kill(redis->pid(), SIGKILL);
    redis->Stop();  // reaps it
  }
  r.injected = true;
  absl::SleepFor(f.hold);
  ClusterEnv env{cluster_.address(), cluster_.token_file(), home, options_.work_dir};
  std::vector<std::string> argv = {options_.drover, "up", "--nodes",
                                   absl::StrCat(spill_dirs_.size()), "--timeout", "120"};
  if (redis != nullptr) argv.push_back("--redis");
  RunResult up = RunWithCluster(env, argv, absl::Seconds(150));
  const std::string path = home + "/cluster.json";
  const absl::StatusOr<cli::ClusterRecord> after = cli::ParseClusterRecord(ReadFile(path).value_or(""), path);
  const pid_t new_scheduler = after.ok() ? after->scheduler_pid : 0;
  const pid_t new_redis = after.ok() ? after->redis_pid : 0;
  if (new_scheduler > 0 && new_scheduler != scheduler) cluster_.AdoptScheduler(new_scheduler);
  if (with_redis && new_redis > 0) redis->Adopt(new_redis);
  std::vector<std::string> said = absl::StrSplit(up.err, '\n', absl::SkipEmpty());
  r.note = said.empty() ? "" : said.back();
  if (up.exit != 0 || new_scheduler <= 0 || new_scheduler == scheduler ||
      (with_redis && new_redis <= 0)) {
    r.recovery = absl::InternalError(absl::StrCat("`drover up` exited ", up.exit,
                                                  up.timed_out ? " (timed out)" : "", ": ",
                                                  Tail(up.err, 600)));
    // The campaign goes on with a head brought back the test cluster's way.
    if (with_redis && !redis->running()) (void)redis->Restart();
    if (cluster_.scheduler_pid() <= 0 || ::kill(cluster_.scheduler_pid(), 0) != 0) {
      (void)cluster_.RestartScheduler(SIGKILL);
    }
  }
}

void FaultInjector::Stop(pid_t pid, const Fault& f, FaultRecord& r) {
  if (pid <= 0) {
    r.note = "no such process now";
    return;
  }
  if (::kill(pid, SIGSTOP) != 0) {
    r.note = absl::StrCat("SIGSTOP: ", std::strerror(errno));
    return;
  }
  r.injected = true;
  absl::SleepFor(f.hold);
  ::kill(pid, SIGCONT);
}

void FaultInjector::WorkerFault(const Fault& f, FaultRecord& r) {
  // Between jobs nothing may run for a moment, and a process may exit between the scan
  // and the signal: look again for a while.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  for (int attempt = 0; absl::Now() < give_up; ++attempt) {
    std::vector<Proc> procs = JobProcesses(cluster_.token_file());
    procs.erase(std::remove_if(procs.begin(), procs.end(),
                               [](const Proc& p) { return p.launcher || p.state == 'T'; }),
                procs.end());
    if (procs.empty()) {
      absl::SleepFor(absl::Milliseconds(50));
      continue;
    }
    std::sort(procs.begin(), procs.end(), [](const Proc& a, const Proc& b) {
      return std::tie(a.job, a.pid) < std::tie(b.job, b.pid);
    });
    const Proc& p = procs[(f.pick + attempt) % procs.size()];
    r.job = p.job;
    r.nodes = {p.node};
    r.target = absl::StrCat(p.task_worker ? "task worker " : "rank ", Show(p), " on ", p.node);
    if (f.kind == FaultKind::kStopWorker) {
      if (::kill(p.pid, SIGSTOP) != 0) continue;  // gone meanwhile
      r.injected = true;
      absl::SleepFor(f.hold);
      ::kill(p.pid, SIGCONT);
      return;
    }
    if (::kill(p.pid, SIGKILL) == 0) {
      r.injected = true;
      return;
    }
  }
  r.note = "no job process ran long enough to be hit in 10 s";
}

void FaultInjector::CutNode(const Fault& f, FaultRecord& r) {
  r.target = AgentTarget(f.node);
  r.nodes.insert(cluster_.agent_node_id(f.node));
  if (net_ != nullptr) {
    r.recovery = net_->SetNodeLink(f.node, false);
    if (!r.recovery.ok()) return;
    r.injected = true;
    absl::SleepFor(f.hold);
    r.recovery = net_->SetNodeLink(f.node, true);
    return;
  }
  // The substitute: the node's daemons stop answering (its workers run on).
  const pid_t agent = cluster_.agent_pid(f.node);
  const pid_t store = StoreOf(f.node);
  r.note = "no network namespaces: the agent and its store were stopped instead";
  ::kill(agent, SIGSTOP);
  if (store > 0) ::kill(store, SIGSTOP);
  r.injected = true;
  absl::SleepFor(f.hold);
  if (store > 0) ::kill(store, SIGCONT);
  ::kill(agent, SIGCONT);
}

void FaultInjector::FillSpill(const Fault& f, FaultRecord& r) {
  r.target = absl::StrCat("spill directory of ", AgentTarget(f.node));
  r.nodes.insert(cluster_.agent_node_id(f.node));
  if (f.node >= static_cast<int>(spill_dirs_.size()) || spill_dirs_[f.node].empty()) {
    r.note = "the spill directory is not a mount of its own (no permission to mount)";
    return;
  }
  const std::string filler = absl::StrCat(spill_dirs_[f.node], "/", kFiller);
  struct statvfs vfs;
  int fd = ::open(filler.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || ::fstatvfs(fd, &vfs) != 0) {
    r.note = absl::StrCat("cannot create ", filler, ": ", std::strerror(errno));
    if (fd >= 0) ::close(fd);
    return;
  }
  // Everything that is free, then whatever a racing spill freed meanwhile.
  off_t size = static_cast<off_t>(vfs.f_bavail) * static_cast<off_t>(vfs.f_frsize);
  while (size > 0 && ::fallocate(fd, 0, 0, size) != 0) size -= 64 << 10;
  ::close(fd);
  r.injected = true;
  r.note = absl::StrCat("filled with ", size >> 20, " MiB");
  absl::SleepFor(f.hold);
  ::unlink(filler.c_str());
}

}  // namespace drover::chaos
