// The checks that watch processes: during the run (Monitor) and after the cluster
// stopped (CheckNothingLeft).
#include <dirent.h>

#include <algorithm>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "tests/chaos/checks.h"
#include "tests/chaos/procs.h"
#include "tests/util/test_util.h"

namespace drover::chaos {
namespace {

// A RUNNING job may have no process for a moment (between generations, while its
// node is declared dead); this long is a job stuck.
constexpr absl::Duration kRunningEmpty = absl::Seconds(30);
// A process may outlive its job while it is being stopped (SIGTERM, grace, SIGKILL).
// The time its node is cut off, stalled or restarting, or the head is, does not count
// (nothing can reach it then), nor kRegisterAgain after: the agent registers again
// (its back-off is at most 5 s) and checks the jobs of its workers.
constexpr absl::Duration kOutlive = absl::Seconds(20);
constexpr absl::Duration kRegisterAgain = absl::Seconds(8);

// Names in `dir` (without . and ..).
std::set<std::string> DirEntries(const std::string& dir) {
  std::set<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") out.insert(n);
  }
  ::closedir(d);
  return out;
}

}  // namespace

Monitor::Monitor(std::string address, std::string token_file, Report& report)
    : address_(std::move(address)), token_file_(std::move(token_file)), report_(report) {}

Monitor::~Monitor() { Stop(); }

void Monitor::Start() {
  auto client = Client::Connect({address_, token_file_});
  if (!client.ok()) {
    report_.Violated("no-running-without-processes",
                     absl::StrCat("the monitor cannot connect: ", client.status().message()));
    return;
  }
  client_ = std::move(*client);
  thread_ = std::thread([this] {
    while (!stop_.load()) {
      Sample();
      absl::SleepFor(absl::Milliseconds(500));
    }
  });
}

void Monitor::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void Monitor::FaultBegins(const std::string& node_id) {
  absl::MutexLock lock(&mu_);
  ++faults_now_[node_id];
}

void Monitor::FaultEnds(const std::string& node_id) {
  absl::MutexLock lock(&mu_);
  if (--faults_now_[node_id] <= 0) faults_now_.erase(node_id);
  reachable_from_[node_id] = absl::Now() + kRegisterAgain;
}

absl::Time Monitor::ReachableSince(const std::string& node_id) {
  absl::MutexLock lock(&mu_);
  absl::Time since = absl::InfinitePast();
  for (const std::string& scope : {node_id, std::string()}) {
    if (faults_now_.count(scope) > 0) return absl::InfiniteFuture();
    auto it = reachable_from_.find(scope);
    if (it != reachable_from_.end()) since = std::max(since, it->second);
  }
  return since;
}

std::set<pid_t> Monitor::pids_seen() const {
  absl::MutexLock lock(&mu_);
  return pids_;
}

void Monitor::Sample() {
  auto jobs = client_->ListJobs();
  std::vector<Proc> procs = JobProcesses(token_file_);
  const absl::Time now = absl::Now();
  std::map<std::string, std::vector<const Proc*>> by_job;
  {
    absl::MutexLock lock(&mu_);
    for (const Proc& p : procs) {
      pids_.insert(p.pid);
      by_job[p.job].push_back(&p);
    }
  }
  if (!jobs.ok()) return;  // the scheduler is down or stalled: nothing to compare with
  for (const JobInfo& j : *jobs) {
    auto procs_of = by_job.find(j.job_id);
    const bool has = procs_of != by_job.end();
    if (j.state == JobState::kRunning && !j.driver) {
      if (has) {
        running_empty_since_.erase(j.job_id);
        continue;
      }
      absl::Time since = running_empty_since_.try_emplace(j.job_id, now).first->second;
      if (now - since > kRunningEmpty && reported_.insert("running " + j.job_id).second) {
        report_.Violated("no-running-without-processes",
                         absl::StrCat(j.job_id, " (", j.spec.name, ") has been RUNNING with no "
                                      "process on any node for ",
                                      absl::FormatDuration(kRunningEmpty), ": ", j.reason));
      }
      continue;
    }
    running_empty_since_.erase(j.job_id);
    if (!IsTerminal(j.state) || j.live_processes > 0 || !has) continue;
    for (const Proc* p : procs_of->second) {
      absl::Time& first_seen = outliving_since_.try_emplace(p->pid, now).first->second;
      const absl::Time since = std::max(first_seen, ReachableSince(p->node));
      if (now - since > kOutlive && reported_.insert(absl::StrCat("pid ", p->pid)).second) {
        report_.Violated("no-process-outlives-job",
                         absl::StrCat(Show(*p), " on ", p->node, " still runs ",
                                      absl::FormatDuration(kOutlive),
                                      " after its job ended (its node and the head reachable "
                                      "all along) ",
                                      JobStateName(j.state), ": ", j.reason));
      }
    }
  }
}

std::set<std::string> ShmEntries() { return DirEntries("/dev/shm"); }

void CheckNothingLeft(const std::string& cluster_dir, const std::string& token_file,
                      bool shm_private, const std::set<std::string>& shm_before,
                      const std::set<pid_t>& pids, const std::vector<std::string>& spill_dirs,
                      Report& report) {
  std::vector<Proc> left;
  testing::WaitFor([&] { return (left = ClusterProcesses(cluster_dir, token_file)).empty(); },
                   absl::Seconds(15));
  for (const Proc& p : left) {
    report.Violated("no-leaked-processes",
                    absl::StrCat(Show(p), " still runs 15 s after the cluster was stopped"));
  }
  if (left.empty()) report.Held("no-leaked-processes");

  int shm_leaks = 0;
  for (const std::string& name : ShmEntries()) {
    if (!shm_private) {
      // Shared /dev/shm: only names new since the start that carry one of our pids
      // (collective segments are /drover-coll-<pid>-...).
      std::vector<std::string> parts = absl::StrSplit(name, '-');
      pid_t pid = 0;
      if (shm_before.count(name) || parts.size() < 3 || !absl::SimpleAtoi(parts[2], &pid) ||
          !pids.count(pid)) {
        continue;
      }
    }
    ++shm_leaks;
    report.Violated("no-leaked-shm", absl::StrCat("/dev/shm/", name, " is left behind"));
  }
  if (shm_leaks == 0) report.Held("no-leaked-shm");

  int spill_leaks = 0;
  for (const std::string& dir : spill_dirs) {
    for (const std::string& name : DirEntries(dir)) {
      ++spill_leaks;
      report.Violated("no-leaked-spill", absl::StrCat(dir, "/", name,
                                                      " is left behind after the store stopped"));
    }
  }
  if (spill_leaks == 0) report.Held("no-leaked-spill");
}

}  // namespace drover::chaos
