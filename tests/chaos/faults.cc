#include "tests/chaos/faults.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/chaos/procs.h"

namespace drover::chaos {
namespace {

constexpr char kFiller[] = "zz-chaos-filler";

}  // namespace

FaultInjector::FaultInjector(testing::TestCluster& cluster, testing::NetnsNetwork* net,
                             std::vector<std::string> spill_dirs)
    : cluster_(cluster), net_(net), spill_dirs_(std::move(spill_dirs)) {}

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
  const pid_t store = StoreOf(f.node);
  r.target = absl::StrCat("store of ", AgentTarget(f.node), " (pid ", store, ")");
  r.nodes.insert(cluster_.agent_node_id(f.node));
  if (store <= 0) {
    r.note = "the node runs no store now";
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
  ::kill(redis->pid(), SIGKILL);
  r.injected = true;
  absl::SleepFor(f.hold);
  r.recovery = redis->Restart();  // same port and AOF: the data written before stays
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
