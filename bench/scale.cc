// scale: the real drover-scheduler against many simulated agents
// (scheduler/testing/sim_fleet.h).
//
//   bazel run -c opt //bench:scale [-- --nodes 10,100,1000 --queued 100000 ...]
//
// For each node count: a fresh drover-scheduler process (in-memory state, 500 ms
// heartbeats, as `drover up` runs it) and a SimFleet of that many nodes of 8 CPUs, all
// in this process. Then, in order:
//   register   every node registered with its session open (wall time);
//   heartbeat  the scheduler's CPU (from /proc/<pid>/stat) over --window seconds while
//              the nodes heartbeat: idle, with full process tables (the cluster filled
//              with one-CPU jobs that run until released), and with the queue below;
//   queue      --queued one-CPU jobs submitted into the full cluster by 8 SDK clients:
//              their rate, and the scheduler's RSS growth per queued job;
//   drain      the filling jobs end at once: the queue drains through the cluster (each
//              job exits as soon as it starts); placements per second = queued jobs /
//              time from the release to the last StartProcesses the fleet received;
//   probe      throughout queue and drain, `drover jobs` (ListJobs, 50 newest) and
//              `drover status` (GetClusterStatus) in a loop: p50 / p99;
//   load       --load-clients clients (each its own connection) submit and poll for
//              --load-seconds: submit and poll latency, and that no submission was
//              lost or doubled (every job id distinct, as many jobs, all SUCCEEDED);
//   leases     in the empty cluster (scale_leases.h): leases granted and returned,
//              requests answered pending in a full cluster, requests waiting in
//              their RPC and how fast they are granted when leases come back.
// Each figure is a line `BENCH <name>_<nodes> <value> <unit> [target=... PASS|MISS]`.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <memory>

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/bench_util.h"
#include "bench/scale_harness.h"
#include "bench/scale_leases.h"
#include "drover/client.h"
#include "scheduler/testing/sim_fleet.h"

namespace drover::bench {
namespace {

using ::drover::testing::SimFleet;
using ::drover::testing::SimFleetOptions;
using ::drover::testing::SimFleetStats;

struct Flags {
  std::string nodes = "10,100,1000";
  int queued = 100000;
  double cpus_per_node = 8;
  int heartbeat_ms = 500;
  double window_s = 10;
  int submit_threads = 8;
  int lease_cycles = 20000;
  int pending_leases = 1000000;
  int waiting_leases = 1000;
  int load_clients = 100;
  double load_s = 60;
  bool keep = false;
};

// The scheduler of the run in progress: killed with the benchmark (Ctrl-C, timeout).
std::atomic<pid_t> g_scheduler{-1};

void KillSchedulerAndExit(int sig) {
  const pid_t pid = g_scheduler.load();
  if (pid > 0) ::kill(pid, SIGKILL);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

// Says why and ends the benchmark, and its scheduler with it.
[[noreturn]] void Fatal(const std::string& msg) {
  std::cerr << "scale: " << msg << "\n";
  const pid_t pid = g_scheduler.load();
  if (pid > 0) ::kill(pid, SIGKILL);
  std::exit(1);
}

// The scheduler's CPU use (cores) over `window`.
double CpuOver(const SchedulerProcess& s, absl::Duration window) {
  const absl::Duration c0 = s.CpuTime();
  const absl::Time t0 = absl::Now();
  absl::SleepFor(window);
  return absl::FDivDuration(s.CpuTime() - c0, absl::Now() - t0);
}

// This process's CPU time (the fleet, the submitters, the probe).
absl::Duration OwnCpuTime() {
  struct rusage u;
  ::getrusage(RUSAGE_SELF, &u);
  return absl::DurationFromTimeval(u.ru_utime) + absl::DurationFromTimeval(u.ru_stime);
}

JobSpec SimJob(int runtime_ms) {
  JobSpec spec;
  spec.command = {"sim"};
  spec.env["SIM_RUNTIME_MS"] = absl::StrCat(runtime_ms);
  return spec;
}

// Waits until `done()` or `timeout`; dies naming `what` and the scheduler's log.
template <typename Done>
void WaitUntil(Done done, absl::Duration timeout, const std::string& what,
               SchedulerProcess& scheduler) {
  for (absl::Time deadline = absl::Now() + timeout; !done();) {
    if (absl::Now() >= deadline) Fatal(what + " did not happen in time\n" + scheduler.LogTail());
    if (!scheduler.Running()) Fatal("the scheduler exited\n" + scheduler.LogTail());
    absl::SleepFor(absl::Milliseconds(20));
  }
}

void ReportProbe(const std::string& phase, int nodes, const LatencyProbe::Samples& s) {
  Note(absl::StrCat(phase, ": drover jobs ", DescribeLatencies(s.jobs_ms), "; drover status ",
                    DescribeLatencies(s.status_ms),
                    s.errors.count ? "; " + s.errors.Describe() : ""));
  Bench(absl::StrCat("jobs_p99_", phase), nodes, Percentile(s.jobs_ms, 0.99), "ms");
  Bench(absl::StrCat("status_p99_", phase), nodes, Percentile(s.status_ms, 0.99), "ms");
  if (s.errors.count > 0) Fatal(absl::StrCat(phase, ": probe ", s.errors.Describe()));
}

void RunScale(const std::string& binary, const Flags& f, int nodes) {
  std::cout << "--- " << nodes << " nodes" << std::endl;
  char tmpl[] = "/tmp/drover-scale-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) Fatal("mkdtemp failed");
  const std::string dir = tmpl;
  // Queued lease requests are remembered for the whole run (a million take minutes to
  // queue; by default one not asked about for a minute is forgotten).
  auto scheduler = SchedulerProcess::Start(
      binary, dir,
      {"--heartbeat-ms", absl::StrCat(f.heartbeat_ms), "--lease-request-memory-ms", "3600000"});
  if (!scheduler.ok()) Fatal(std::string(scheduler.status().message()));
  SchedulerProcess& s = **scheduler;
  g_scheduler = s.pid();
  auto client = Client::Connect({s.address(), s.token_file()});
  if (!client.ok()) Fatal(std::string(client.status().message()));
  const int64_t rss_empty = s.RssBytes();

  // register
  SimFleetOptions fo;
  fo.scheduler_address = s.address();
  fo.token = s.token();
  fo.nodes = nodes;
  fo.cpus_per_node = f.cpus_per_node;
  const absl::Time t0 = absl::Now();
  const absl::Duration c0 = s.CpuTime();
  auto fleet_or = SimFleet::Start(fo);
  if (!fleet_or.ok()) Fatal(std::string(fleet_or.status().message()));
  SimFleet& fleet = **fleet_or;
  if (absl::Status r = fleet.WaitReady(absl::Minutes(2)); !r.ok()) {
    Fatal(absl::StrCat(r.message(), "\n", s.LogTail()));
  }
  Bench("register", nodes, absl::ToDoubleSeconds(absl::Now() - t0), "s");
  Note(absl::StrFormat("registration used %.2f s of scheduler CPU",
                       absl::ToDoubleSeconds(s.CpuTime() - c0)));

  // heartbeat, idle
  const absl::Duration window = absl::Seconds(f.window_s);
  fleet.TakeHeartbeatLatencies();
  double cpu = CpuOver(s, window);
  Bench("heartbeat_cpu_idle", nodes, cpu, "cores", "<1", cpu < 1);
  Note(absl::StrCat("heartbeat round trips: ", DescribeLatencies(fleet.TakeHeartbeatLatencies())));

  // heartbeat, full tables
  const int slots = static_cast<int>(nodes * f.cpus_per_node);
  SubmitResult fill = SubmitMany(**client, SimJob(-1), slots, f.submit_threads);
  if (fill.errors.count > 0) Fatal("fill: " + fill.errors.Describe());
  WaitUntil([&] { return fleet.stats().running == slots; }, absl::Minutes(5),
            absl::StrCat(slots, " filling jobs running"), s);
  fleet.TakeHeartbeatLatencies();
  cpu = CpuOver(s, window);
  Bench("heartbeat_cpu_tables", nodes, cpu, "cores", "<1", cpu < 1);
  Note(absl::StrCat("with ", f.cpus_per_node, " processes per table: heartbeat round trips ",
                    DescribeLatencies(fleet.TakeHeartbeatLatencies())));

  // queue
  LatencyProbe probe(client->get(), absl::Milliseconds(20));
  probe.Take();
  const int64_t rss_full = s.RssBytes();
  SubmitResult queued = SubmitMany(**client, SimJob(0), f.queued, f.submit_threads);
  if (queued.errors.count > 0) Fatal("queue: " + queued.errors.Describe());
  const int64_t rss_queued = s.RssBytes();
  Bench("submit_rate", nodes, f.queued / absl::ToDoubleSeconds(queued.wall), "jobs/s");
  Note(absl::StrCat("submit latency ", DescribeLatencies(queued.latency_ms)));
  const double per_job = static_cast<double>(rss_queued - rss_full) / f.queued;
  Bench("rss_per_queued_job", nodes, per_job, "bytes", "<2048", per_job < 2048);
  Note(absl::StrFormat("scheduler RSS: %.1f MiB empty, %.1f MiB with %d nodes and %d running, "
                       "%.1f MiB with %d queued",
                       rss_empty / 1048576.0, rss_full / 1048576.0, nodes, slots,
                       rss_queued / 1048576.0, f.queued));
  ReportProbe("queue", nodes, probe.Take());
  fleet.TakeHeartbeatLatencies();
  cpu = CpuOver(s, window);
  Bench("heartbeat_cpu_queued", nodes, cpu, "cores", "<1", cpu < 1);
  Note(absl::StrCat("with ", f.queued, " queued: heartbeat round trips ",
                    DescribeLatencies(fleet.TakeHeartbeatLatencies())));
  probe.Take();

  // drain
  const int64_t starts_before = fleet.stats().start_calls;
  const absl::Duration cpu_before = s.CpuTime(), own_before = OwnCpuTime();
  const absl::Duration wait_before = s.RunQueueWait();
  const absl::Time released = absl::Now();
  fleet.Release();
  WaitUntil([&] { return fleet.stats().start_calls >= starts_before + f.queued; },
            absl::Minutes(30), absl::StrCat(f.queued, " queued jobs started"), s);
  const SimFleetStats st = fleet.stats();
  const absl::Duration drain = st.last_start - released;
  const double rate = f.queued / absl::ToDoubleSeconds(drain);
  Bench("placements_per_s", nodes, rate, "jobs/s", ">=10000", rate >= 10000);
  // What placing costs the scheduler, whatever else runs on the machine: the jobs
  // placed per second of its CPU (heartbeats included).
  const absl::Duration drain_cpu = s.CpuTime() - cpu_before;
  const double per_core = f.queued / absl::ToDoubleSeconds(drain_cpu);
  Bench("placements_per_core_s", nodes, per_core, "jobs/s", ">=10000", per_core >= 10000);
  Note(absl::StrFormat("draining used %.2f cores of the scheduler (%.0f us per job, heartbeats "
                       "included) and %.2f of this process (fleet, submitters, probe); the "
                       "scheduler's threads waited %.1f s in all for a CPU",
                       absl::FDivDuration(drain_cpu, drain),
                       absl::ToDoubleMicroseconds(drain_cpu) / f.queued,
                       absl::FDivDuration(OwnCpuTime() - own_before, drain),
                       absl::ToDoubleSeconds(s.RunQueueWait() - wait_before)));
  ReportProbe("drain", nodes, probe.Take());
  WaitUntil(
      [&] {
        auto status = (*client)->Status();
        return status.ok() && status->job_counts[JobState::kSucceeded] == slots + f.queued;
      },
      absl::Minutes(5), "every job SUCCEEDED", s);
  Note(absl::StrFormat(
      "fleet: %d heartbeats (%d failed, %d unknown), %d exits reported in %d ReportExit "
      "calls (%d failed), %d registrations, %d starts (%d StartProcessesBatch calls)",
      st.heartbeats, st.heartbeat_errors, st.unknown_replies, st.exits_reported,
      st.report_calls, st.report_errors, st.registrations, st.start_calls, st.start_batches));

  // load
  if (f.load_clients > 0) {
    const int64_t before = slots + f.queued;
    // Jobs that exit at once: the cluster runs them as fast as the scheduler places.
    LoadResult load = RunLoad({s.address(), s.token_file()}, SimJob(0), f.load_clients,
                              absl::Seconds(f.load_s));
    if (load.errors.count > 0) Fatal("load: " + load.errors.Describe());
    Bench("load_submits_per_s", nodes,
          load.job_ids.size() / absl::ToDoubleSeconds(load.wall), "jobs/s");
    Bench("load_submit_p99", nodes, Percentile(load.submit_ms, 0.99), "ms");
    Bench("load_poll_p99", nodes, Percentile(load.poll_ms, 0.99), "ms");
    Note(absl::StrFormat("%d clients for %.0f s: submit %s; poll %s", f.load_clients, f.load_s,
                         DescribeLatencies(load.submit_ms), DescribeLatencies(load.poll_ms)));
    // However many were queued: a few minutes and a millisecond per job to run them all.
    const absl::Duration to_run =
        absl::Minutes(3) + absl::Milliseconds(static_cast<int64_t>(load.job_ids.size()));
    if (absl::Status ran = CheckEverySubmissionRan(**client, load, before, to_run);
        !ran.ok()) {
      Fatal(absl::StrCat("load: ", ran.message()));
    }
    Note(absl::StrCat("none lost: ", load.job_ids.size(), " submissions, as many jobs, all "
                      "SUCCEEDED"));
  }

  // leases
  if (f.lease_cycles > 0) {
    LeaseBenchOptions lo;
    lo.address = s.address();
    lo.token = s.token();
    lo.nodes = nodes;
    lo.slots = slots;
    lo.cycles = f.lease_cycles;
    lo.pending = f.pending_leases;
    lo.waiting = f.waiting_leases;
    if (!RunLeaseBench(s, lo)) Fatal("the lease benchmark failed\n" + s.LogTail());
  }
  fleet.Stop();
  g_scheduler = -1;
  if (!f.keep) std::system(absl::StrCat("rm -rf ", dir).c_str());
}

}  // namespace
}  // namespace drover::bench

int main(int argc, char** argv) {
  using namespace drover::bench;
  Flags f;
  CLI::App app{"scale: drover-scheduler against simulated agents"};
  app.add_option("--nodes", f.nodes, "comma-separated node counts, one run each");
  app.add_option("--queued", f.queued, "jobs queued into the full cluster")
      ->check(CLI::Range(1, 10000000));
  app.add_option("--cpus-per-node", f.cpus_per_node, "CPUs of each simulated node")
      ->check(CLI::Range(1.0, 1024.0));
  app.add_option("--heartbeat-ms", f.heartbeat_ms, "the agents' heartbeat interval")
      ->check(CLI::Range(10, 60000));
  app.add_option("--window", f.window_s, "seconds of each CPU measurement")
      ->check(CLI::Range(0.5, 600.0));
  app.add_option("--submit-threads", f.submit_threads, "SDK clients submitting at once")
      ->check(CLI::Range(1, 256));
  app.add_option("--load-clients", f.load_clients,
                 "clients submitting and polling at once (0: no load figures)")
      ->check(CLI::Range(0, 1000));
  app.add_option("--load-seconds", f.load_s, "how long the clients submit")
      ->check(CLI::Range(1.0, 3600.0));
  app.add_option("--lease-cycles", f.lease_cycles,
                 "leases granted and returned (0: no lease figures)")
      ->check(CLI::Range(0, 10000000));
  app.add_option("--pending-leases", f.pending_leases,
                 "lease requests queued (answered pending at once) in a full cluster")
      ->check(CLI::Range(1, 10000000));
  app.add_option("--waiting-leases", f.waiting_leases,
                 "lease requests waiting in their RPC at once for a full cluster (and "
                 "leases returned to grant them)")
      ->check(CLI::Range(1, 20000));
  app.add_flag("--keep", f.keep, "keep each run's directory (the scheduler's log)");
  CLI11_PARSE(app, argc, argv);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, KillSchedulerAndExit);
  std::vector<int> counts;
  for (absl::string_view n : absl::StrSplit(f.nodes, ',')) {
    int v = 0;
    if (!absl::SimpleAtoi(n, &v) || v < 1) Fatal(absl::StrCat("--nodes: bad count '", n, "'"));
    counts.push_back(v);
  }
  const std::string root = FindRunfilesRoot(argv[0], "scheduler");
  if (root.empty()) Fatal("cannot find drover-scheduler in the runfiles; run `bazel run -c opt //bench:scale`");
  std::cout << "machine: " << CpuModel() << ", " << sysconf(_SC_NPROCESSORS_ONLN)
            << " CPUs; load average at start: ";
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  std::cout << absl::StrFormat("%.2f", load[0]) << std::endl;
  for (int n : counts) RunScale(root + "/drover/scheduler/drover-scheduler", f, n);
  return 0;
}
