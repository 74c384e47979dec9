#include "tests/chaos/campaign.h"

#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/files.h"
#include "tests/chaos/check_util.h"
#include "tests/chaos/checks.h"
#include "tests/chaos/faults.h"
#include "tests/chaos/teardown.h"
#include "tests/chaos/workload.h"
#include "tests/util/netns_network.h"
#include "tests/util/test_cluster.h"

namespace drover::chaos {
namespace {

// Enters a mount namespace of its own with a fresh /dev/shm: every shared-memory name
// the cluster leaves is then known to be its own, and tmpfs mounts made later vanish
// with the process. Empty on success, else why not.
std::string EnterPrivateMounts() {
  if (::geteuid() != 0) return "not root";
  if (::unshare(CLONE_NEWNS) != 0) return absl::StrCat("unshare(CLONE_NEWNS): ", std::strerror(errno));
  if (::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return absl::StrCat("making / private: ", std::strerror(errno));
  }
  if (::mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") != 0) {
    return absl::StrCat("mounting a tmpfs on /dev/shm: ", std::strerror(errno));
  }
  return "";
}

class Campaign {
 public:
  explicit Campaign(const CampaignOptions& options)
      : options_(options), log_(options.log != nullptr ? *options.log : std::cout) {}

  absl::StatusOr<CampaignResult> Run();

 private:
  absl::Status Setup();
  // `monitor` hears of the faults that keep a node or the head out of reach.
  void InjectAll(const std::vector<Fault>& schedule, absl::Time t0, Monitor& monitor);
  void WaitForNodes();
  void AfterFaults(Workload& workload, std::vector<JobRecord>& jobs);
  void Teardown(const std::set<pid_t>& pids);
  // SIGTERM, SIGINT or SIGHUP: the teardown of a normal end, from the cluster's record
  // (the campaign's threads still use its objects), then exit 128+sig.
  [[noreturn]] void OnSignal(int sig);
  void Finish(const std::vector<JobRecord>& jobs);
  void Say(const std::string& line) { log_ << "chaos: " << line << std::endl; }

  CampaignOptions options_;
  std::ostream& log_;
  SignalWatcher signals_;
  // Held by whichever teardown runs (the normal end's or a signal's).
  absl::Mutex teardown_mu_;
  bool torn_down_ ABSL_GUARDED_BY(teardown_mu_) = false;
  // Set by a signal: no more faults, no more work.
  std::atomic<bool> stopping_{false};
  std::atomic<Workload*> workload_{nullptr};
  CampaignResult result_;
  Report report_;
  std::string dir_;
  std::string truth_dir_;
  bool private_mounts_ = false;
  bool netns_used_ = false;
  std::set<std::string> shm_before_;
  std::unique_ptr<testing::NetnsNetwork> net_;
  std::unique_ptr<testing::TestCluster> cluster_;
  std::unique_ptr<FaultInjector> injector_;
  std::vector<std::string> spill_dirs_;      // every node's
  std::vector<std::string> spill_mounts_;    // node i's, if a mount of its own
  std::vector<FaultRecord> faults_;
  std::string token_file_, cluster_dir_;
  std::vector<LiveObject> objects_;  // what the read-back read
  JobRecord readback_;
};

absl::Status Campaign::Setup() {
  if (std::string why = EnterPrivateMounts(); why.empty()) {
    private_mounts_ = true;
  } else {
    result_.substitutes.push_back(absl::StrCat(
        "no private /dev/shm (", why, "): left-over names are judged by the pids in them; no "
        "spill tmpfs: fill-spill is not injected"));
  }
  if (options_.netns) {
    auto net = testing::NetnsNetwork::Create(options_.nodes);
    if (net.ok()) {
      net_ = std::move(*net);
      netns_used_ = true;
    } else {
      result_.substitutes.push_back(absl::StrCat(
          "no network namespaces (", net.status().message(),
          "): cut-node stops the node's agent and store instead"));
    }
  }
  shm_before_ = ShmEntries();
  testing::TestClusterOptions o;
  o.nodes = options_.nodes;
  o.redis = true;
  o.object_store_memory = options_.store_bytes;
  if (net_ != nullptr) {
    o.netns = net_->netns();
    o.scheduler_host = net_->host_ip();
  }
  auto cluster = testing::TestCluster::Start(o);
  if (!cluster.ok()) return cluster.status();
  cluster_ = std::move(*cluster);
  token_file_ = cluster_->token_file();
  cluster_dir_ = cluster_->dir();
  dir_ = cluster_dir_ + "/chaos";
  truth_dir_ = dir_ + "/truth";
  if (absl::Status s = MakeDirs(truth_dir_, 0755); !s.ok()) return s;
  for (int i = 0; i < options_.nodes; ++i) {
    const std::string spill = absl::StrCat(cluster_dir_, "/agent-", i, "/spill");
    spill_dirs_.push_back(spill);
    spill_mounts_.emplace_back();
    if (!private_mounts_ || !MakeDirs(spill, 0700).ok()) continue;
    const std::string opts = absl::StrCat("size=", options_.spill_bytes, ",mode=0700");
    if (::mount("tmpfs", spill.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, opts.c_str()) == 0) {
      spill_mounts_.back() = spill;
    }
  }
  return absl::OkStatus();
}

void Campaign::InjectAll(const std::vector<Fault>& schedule, absl::Time t0, Monitor& monitor) {
  InjectorOptions io;
  io.drover = testing::Runfile("cli/drover");
  io.store_client = testing::Runfile("tests/chaos/chaos_store_client");
  io.work_dir = dir_ + "/injector";
  io.report = &report_;
  (void)MakeDirs(io.work_dir, 0777);
  injector_ = std::make_unique<FaultInjector>(*cluster_, net_.get(), spill_mounts_, io);
  for (const Fault& f : schedule) {
    absl::SleepFor(t0 + f.at - absl::Now());
    if (stopping_.load()) return;
    std::optional<std::string> out_of_reach;  // a node's id, or "" for the head
    switch (f.kind) {
      case FaultKind::kKillAgent:
      case FaultKind::kStopAgent:
      case FaultKind::kCutNode:
        out_of_reach = cluster_->agent_node_id(f.node);
        break;
      case FaultKind::kKillScheduler:
      case FaultKind::kStopScheduler:
      case FaultKind::kRestartHead:
        out_of_reach = "";
        break;
      default:
        break;
    }
    if (out_of_reach) monitor.FaultBegins(*out_of_reach);
    FaultRecord r = injector_->Inject(f);
    if (out_of_reach) monitor.FaultEnds(*out_of_reach);
    std::string line = absl::StrFormat(
        "%s (at +%.1fs, %s UTC): %s", Describe(f), absl::ToDoubleSeconds(r.start - t0),
        absl::FormatTime("%H:%M:%E3S", r.start, absl::UTCTimeZone()), r.target);
    if (!r.injected) absl::StrAppend(&line, " NOT INJECTED");
    if (!r.note.empty()) absl::StrAppend(&line, " [", r.note, "]");
    if (!r.recovery.ok()) {
      absl::StrAppend(&line, " RECOVERY FAILED: ", r.recovery.message());
      report_.Violated("fault-recovery", absl::StrCat(Describe(f), ": ", r.recovery.message()));
    }
    Say(line);
    (r.injected ? result_.injected : result_.not_injected)[FaultKindName(f.kind)]++;
    faults_.push_back(std::move(r));
  }
}

void Campaign::WaitForNodes() {
  bool alive = testing::WaitFor(
      [&] {
        auto s = cluster_->client().Status();
        if (!s.ok()) return false;
        int n = 0;
        for (const auto& node : s->nodes) n += node.state == NodeState::kAlive;
        return n >= options_.nodes;
      },
      absl::Seconds(60));
  if (!alive) {
    report_.Violated("serves-new-job", "the nodes were not all ALIVE 60 s after the last fault");
  }
}

// The read-back of every surviving object, and new work of every kind.
void Campaign::AfterFaults(Workload& workload, std::vector<JobRecord>& jobs) {
  std::vector<LiveObject> objects = LiveObjects(truth_dir_, jobs);
  const std::string list = dir_ + "/readback.list";
  {
    // The third column says whether a fault may have lost the object: those get no
    // second chance to come (a lost object costs a timeout).
    CheckContext faults;
    faults.faults = faults_;
    std::ofstream out(list);
    for (const LiveObject& o : objects) {
      out << o.id << " " << o.size << " " << LoseableOn(faults, o.node, o.put_after) << "\n";
    }
  }
  JobSpec spec = workload.SpecOf(JobKind::kSmall);
  spec.command = {testing::Runfile("tests/chaos/chaos_worker"), "readback", "--truth", truth_dir_,
                  "--list", list, "--timeout-s", "3"};
  spec.nproc = options_.nodes;
  spec.nproc_per_node = 1;
  spec.name = "chaos-readback";
  // Each object no node holds costs its 3 s timeout (16 at a time): a long run's
  // read-back takes minutes.
  std::vector<JobRecord> after = {workload.SubmitAndWait(JobKind::kReadback, spec,
                                                         absl::Minutes(20)),
                                  workload.DroverRun(JobKind::kEcho, {"--", "/bin/echo", "after-chaos"},
                                                     0, "after-chaos"),
                                  workload.SubmitAndWait(JobKind::kGang,
                                                         workload.SpecOf(JobKind::kGang)),
                                  workload.PlainDriver()};
  CheckContext ctx;
  ctx.client = &workload.client();
  ctx.faults = faults_;
  SettleJobs(ctx, absl::Now() + absl::Seconds(60), after, /*sweep=*/false, report_);
  // The after-jobs are checked with the rest (CheckOutcomes) too.
  for (const JobRecord& r : after) {
    const bool ok = r.how == "driver"
                        ? r.cli_exit == 0 && absl::StrContains(r.cli_out, "errors 0")
                        : r.final_info && r.final_info->state == JobState::kSucceeded;
    if (ok) {
      report_.Held("serves-new-job");
    } else {
      report_.Violated("serves-new-job",
                       absl::StrCat(Name(r), " after the faults: ",
                                    r.final_info ? JobStateName(r.final_info->state) : "no record",
                                    " ", r.final_info ? r.final_info->reason : "", " exit ",
                                    r.cli_exit, " ", Tail(r.cli_err)));
    }
  }
  readback_ = after[0];
  objects_ = std::move(objects);
  jobs.insert(jobs.end(), after.begin(), after.end());
}

void Campaign::Teardown(const std::set<pid_t>& pids) {
  absl::MutexLock lock(&teardown_mu_);
  torn_down_ = true;
  injector_.reset();
  cluster_.reset();  // agents first (they stop their workers and stores), then the rest
  CheckNothingLeft(cluster_dir_, token_file_, private_mounts_, shm_before_, pids, spill_dirs_,
                   report_);
  for (const std::string& m : spill_mounts_) {
    if (!m.empty()) ::umount2(m.c_str(), MNT_DETACH);
  }
  if (net_ != nullptr) {
    net_->Remove();
    if (net_->AnythingLeft()) {
      report_.Violated("no-leaked-processes", "a network namespace, veth or bridge was left");
    }
    net_.reset();
  }
}

void Campaign::OnSignal(int sig) {
  Say(absl::StrCat("got ", strsignal(sig), ": stopping the cluster"));
  absl::MutexLock lock(&teardown_mu_);  // a normal end's teardown finishes first
  if (!torn_down_) {
    torn_down_ = true;
    stopping_ = true;
    if (Workload* w = workload_.load(); w != nullptr) w->StopStarting();
    if (!cluster_dir_.empty()) {
      for (const Proc& p : StopClusterProcesses(cluster_dir_, token_file_, absl::Seconds(5),
                                                absl::Seconds(30))) {
        Say(absl::StrCat(Show(p), " still runs"));
      }
    }
    for (const std::string& m : spill_mounts_) {
      if (!m.empty()) ::umount2(m.c_str(), MNT_DETACH);
    }
    if (net_ != nullptr) net_->Remove();
    if (!cluster_dir_.empty()) {
      // Again: a step of the workload or a fault's recovery that was starting a
      // process when the first sweep ran (they stop starting new ones now).
      StopClusterProcesses(cluster_dir_, token_file_, absl::ZeroDuration(), absl::Seconds(10));
      RemoveTree(cluster_dir_);
      Say(absl::StrCat("stopped; removed ", cluster_dir_));
    }
  }
  log_ << std::flush;
  ::_exit(128 + sig);
}

void Campaign::Finish(const std::vector<JobRecord>& jobs) {
  std::string s = absl::StrFormat(
      "seed %d: %d node(s), %.0f s of faults, network namespaces: %s, private /dev/shm: %s\n",
      result_.seed, options_.nodes, absl::ToDoubleSeconds(options_.duration),
      netns_used_ ? "yes" : "no", private_mounts_ ? "yes" : "no");
  for (const std::string& sub : result_.substitutes) absl::StrAppend(&s, "substitute: ", sub, "\n");
  absl::StrAppend(&s, "faults injected (not injected):\n");
  for (int k = 0; k < kFaultKinds; ++k) {
    const char* name = FaultKindName(static_cast<FaultKind>(k));
    absl::StrAppend(&s, absl::StrFormat("  %-15s %3d (%d)\n", name, result_.injected[name],
                                        result_.not_injected[name]));
  }
  std::map<std::string, std::map<std::string, int>> by_kind;  // kind -> state -> count
  for (const JobRecord& r : jobs) {
    by_kind[JobKindName(r.kind)][r.final_info ? JobStateName(r.final_info->state)
                                 : r.job_id.empty() ? "not created"
                                                    : "unknown"]++;
  }
  absl::StrAppend(&s, "jobs (", jobs.size(), "):\n");
  for (const auto& [kind, states] : by_kind) {
    absl::StrAppend(&s, "  ", kind, ":");
    for (const auto& [state, n] : states) absl::StrAppend(&s, " ", state, " ", n);
    absl::StrAppend(&s, "\n");
  }
  std::set<std::string> refusals;  // why jobs were not created, each reason once
  for (const JobRecord& r : jobs) {
    if (r.job_id.empty() && refusals.size() < 5) {
      refusals.insert(absl::StrCat(JobKindName(r.kind), ": ", Tail(r.submit_status.ToString(), 200)));
    }
  }
  for (const std::string& why : refusals) absl::StrAppend(&s, "  not created: ", why, "\n");
  absl::StrAppend(&s, report_.Summary());
  result_.violations = report_.violations();
  result_.unknown_violations = report_.unknown_violations();
  result_.violated = report_.Violations();
  absl::StrAppend(&s, result_.violations == 0
                         ? "every invariant held\n"
                         : absl::StrCat(result_.violations, " violation(s), ",
                                        result_.violations - result_.unknown_violations,
                                        " of them of known issues (docs/reliability.md)\n"));
  result_.summary = s;
  log_ << s << std::flush;
}

absl::StatusOr<CampaignResult> Campaign::Run() {
  const absl::Time started = absl::Now();
  result_.seed = options_.seed != 0 ? options_.seed
                                    : static_cast<uint64_t>(absl::ToUnixNanos(started)) | 1;
  Say(absl::StrCat("seed ", result_.seed, " (replay the same faults with --seed ", result_.seed,
                   ")"));
  absl::Status set_up = Setup();
  // From here a signal stops what Setup started (even a part of it).
  signals_.Start([this](int sig) { OnSignal(sig); });
  if (!set_up.ok()) return set_up;
  ScheduleOptions so;
  so.seed = result_.seed;
  so.duration = options_.duration;
  so.nodes = options_.nodes;
  so.mean_gap = options_.mean_gap;
  const std::vector<Fault> schedule = MakeSchedule(so);
  Say(absl::StrCat(schedule.size(), " faults scheduled:"));
  for (const Fault& f : schedule) Say("  " + Describe(f));

  WorkloadOptions wo;
  wo.env = {cluster_->address(), token_file_, cluster_dir_ + "/home", dir_};
  wo.truth_dir = truth_dir_;
  wo.worker = testing::Runfile("tests/chaos/chaos_worker");
  wo.tasks = testing::Runfile("tests/chaos/chaos_tasks");
  wo.drover = testing::Runfile("cli/drover");
  Workload workload(wo);
  workload_ = &workload;
  // Gone before `workload` is, whichever way Run returns.
  struct Forget {
    std::atomic<Workload*>& w;
    ~Forget() { w = nullptr; }
  } forget{workload_};
  Monitor monitor(cluster_->address(), token_file_, report_);
  if (absl::Status s = workload.Start(); !s.ok()) return s;
  monitor.Start();
  const absl::Time t0 = absl::Now();
  InjectAll(schedule, t0, monitor);
  absl::SleepFor(t0 + options_.duration - absl::Now());
  Say("faults are over; waiting for the work in flight");
  workload.Stop();
  WaitForNodes();

  std::vector<JobRecord> jobs = workload.Records();
  CheckContext ctx;
  ctx.client = &workload.client();
  ctx.env = wo.env;
  ctx.truth_dir = truth_dir_;
  ctx.drover = wo.drover;
  ctx.faults = faults_;
  Say(absl::StrCat("settling ", jobs.size(), " jobs"));
  SettleJobs(ctx, absl::Now() + absl::Seconds(120), jobs, /*sweep=*/true, report_);
  injector_->CheckSubmits(workload.client(), faults_, report_);
  Say("new work after the faults");
  AfterFaults(workload, jobs);
  Say("checking");
  CheckReadback(ctx, objects_, readback_, options_.nodes, report_);
  CheckOutcomes(ctx, jobs, report_);
  monitor.Stop();
  Say("stopping the cluster");
  Teardown(monitor.pids_seen());
  result_.took = absl::Now() - started;
  Finish(jobs);
  if (result_.violations == 0) {
    RemoveTree(cluster_dir_);
  } else {
    Say(absl::StrCat("the cluster's logs are kept in ", cluster_dir_));
  }
  return result_;
}

}  // namespace

absl::StatusOr<CampaignResult> RunCampaign(const CampaignOptions& options) {
  return Campaign(options).Run();
}

}  // namespace drover::chaos
