// launch: job launch overhead on a warm one-node local cluster.
//
//   bazel run -c opt //bench:launch [-- --runs N --warmup N --no-phases --keep]
//
// Starts drover-scheduler and one drover-agent (--num-cpus 16) through the tests'
// TestCluster harness, then measures the wall time of
//   launch_1       `drover run -- true`
//   launch_8       `drover run --nproc 8 -- true`
//   submit_wait_1  Client::Submit + Client::WaitJob in-process, 1 process
//   submit_wait_8  the same, 8 processes
// each against a baseline taken in the same run, interleaved run by run: posix_spawn of
// 1 (resp. 8) /bin/true from this process and waitpid of all of them. After warm-up
// runs it reports the median of --runs runs per figure, one line each:
//   BENCH <name> <value> ms baseline=<value> ratio=<ours/baseline>
// Then (unless --no-phases) it times the pieces a launch is made of, as PHASE lines,
// to show where the time goes. Everything it starts is stopped before it exits.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/bench_util.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "drover/client.h"
#include "tests/util/test_cluster.h"

extern char** environ;

namespace drover::bench {
namespace {

using testing::Runfile;
using testing::TestCluster;

struct Flags {
  int runs = 30;
  int warmup = 3;
  bool phases = true;
  bool keep = false;  // keep the cluster directory (daemon logs) for inspection
};

[[noreturn]] void Die(const std::string& msg) {
  std::cerr << "launch: " << msg << "\n";
  std::exit(1);
}

// Points the harness's Runfile() (TEST_SRCDIR/TEST_WORKSPACE) at this binary's runfiles.
void SetUpRunfiles(const char* argv0) {
  std::string root = FindRunfilesRoot(argv0, "scheduler");
  if (root.empty()) Die("cannot find the runfiles (drover/scheduler/drover-scheduler); run it with "
      "`bazel run -c opt //bench:launch`");
  ::setenv("TEST_SRCDIR", root.c_str(), 1);
  ::setenv("TEST_WORKSPACE", "drover", 1);
}

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

// posix_spawn `argv` `n` times, then waitpid all of them; returns the wall time.
// Aborts the benchmark if any of them fails.
// With `quiet`, the children's stdout and stderr go to /dev/null.
double SpawnAndWait(const std::vector<std::string>& args, int n, bool quiet = false) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (quiet) {
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
  }
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<pid_t> pids(n);
  absl::Time t0 = absl::Now();
  for (int i = 0; i < n; ++i) {
    int rc = ::posix_spawn(&pids[i], argv[0], &fa, nullptr, argv.data(), environ);
    if (rc != 0) Die(absl::StrCat("posix_spawn ", args[0], ": ", std::strerror(rc)));
  }
  for (pid_t p : pids) {
    int st = 0;
    while (::waitpid(p, &st, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) Die(args[0] + " failed");
  }
  double ms = Ms(absl::Now() - t0);
  posix_spawn_file_actions_destroy(&fa);
  return ms;
}

double DirectSpawn(int n) { return SpawnAndWait({"/bin/true"}, n); }

double CliRun(TestCluster& c, int n) {
  std::vector<std::string> args = {"run"};
  if (n != 1) {
    args.push_back("--nproc");
    args.push_back(absl::StrCat(n));
  }
  args.push_back("--");
  args.push_back("true");
  std::string out, err;
  absl::Time t0 = absl::Now();
  int rc = c.RunCli(args, &out, &err);
  double ms = Ms(absl::Now() - t0);
  if (rc != 0) Die(absl::StrCat("drover run exited with ", rc, ":\n", out, err));
  return ms;
}

JobSpec TrueSpec(int n) {
  JobSpec spec;
  spec.command.push_back("true");
  spec.nproc = n;
  spec.per_process.cpus = 1;
  spec.strategy = PlacementStrategy::kPack;
  spec.cwd = "/";
  return spec;
}

double SubmitWait(Client& client, int n) {
  absl::Time t0 = absl::Now();
  auto job = client.Submit(TrueSpec(n));
  if (!job.ok()) Die(absl::StrCat("Submit: ", job.status().ToString()));
  auto done = client.WaitJob(job->job_id, absl::Seconds(60));
  double ms = Ms(absl::Now() - t0);
  if (!done.ok()) Die(absl::StrCat("WaitJob: ", done.status().ToString()));
  if (done->state != JobState::kSucceeded) {
    Die(absl::StrCat(job->job_id, " ", JobStateName(done->state), ": ", done->reason));
  }
  return ms;
}

struct Figure {
  std::string name;
  int nproc;
  std::function<double()> ours;
};

void RunFigure(const Figure& f, const Flags& flags, std::vector<std::string>* lines) {
  for (int i = 0; i < flags.warmup; ++i) {
    DirectSpawn(f.nproc);
    f.ours();
  }
  std::vector<double> ours, base;
  for (int i = 0; i < flags.runs; ++i) {
    base.push_back(DirectSpawn(f.nproc));
    ours.push_back(f.ours());
  }
  double o = Median(ours), b = Median(base);
  std::string line = absl::StrFormat("BENCH %s %.2f ms baseline=%.3f ratio=%.1f", f.name, o, b,
                                     b > 0 ? o / b : 0);
  std::cout << line << "\n"
            << absl::StrFormat("  (%s: p10 %.2f p90 %.2f ms; baseline p10 %.3f p90 %.3f ms)",
                               f.name, Percentile(ours, 0.1), Percentile(ours, 0.9),
                               Percentile(base, 0.1), Percentile(base, 0.9))
            << std::endl;
  lines->push_back(line);
}

void Phase(const std::string& name, const std::vector<double>& v, const std::string& what) {
  std::cout << absl::StrFormat("PHASE %-26s %8.2f ms  (p10 %.2f, p90 %.2f)  %s\n", name,
                               Median(v), Percentile(v, 0.1), Percentile(v, 0.9), what)
            << std::flush;
}

// The pieces a `drover run -- true` is made of, each timed on its own.
void RunPhases(TestCluster& c, const Flags& flags) {
  std::cout << "\nPhases (median of " << flags.runs << "; see docs/benchmarks.md):\n";
  const int runs = flags.runs;
  Client& client = c.client();

  std::vector<double> v;
  for (int i = 0; i < runs + 2; ++i) {
    v.push_back(SpawnAndWait({Runfile("cli/drover"), "--help"}, 1, /*quiet=*/true));
  }
  Phase("cli_start_exit", v, "`drover --help`: exec, dynamic linking, static init, exit");

  v.clear();
  for (int i = 0; i < runs; ++i) {
    absl::Time t0 = absl::Now();
    int rc = c.RunCli({"status"});
    v.push_back(Ms(absl::Now() - t0));
    if (rc != 0) Die("drover status failed");
  }
  Phase("cli_status", v, "`drover status`: start + connect + 1 RPC + exit");

  v.clear();
  for (int i = 0; i < runs; ++i) {
    auto addr = ClusterAddress{c.address(), c.token_file()};
    absl::Time t0 = absl::Now();
    auto fresh = Client::Connect(addr);
    if (!fresh.ok()) Die(fresh.status().ToString());
    auto s = (*fresh)->Status();
    fresh->reset();
    v.push_back(Ms(absl::Now() - t0));
    if (!s.ok()) Die(s.status().ToString());
  }
  Phase("sdk_new_channel_status", v, "new Client + GetClusterStatus + destroy (new TCP/HTTP2)");

  v.clear();
  for (int i = 0; i < runs; ++i) {
    absl::Time t0 = absl::Now();
    auto s = client.Status();
    v.push_back(Ms(absl::Now() - t0));
    if (!s.ok()) Die(s.status().ToString());
  }
  Phase("sdk_rpc_warm", v, "GetClusterStatus on a warm channel");

  v.clear();
  for (int i = 0; i < runs + 2; ++i) {
    // DROVER_AGENT_PID unset: the launcher skips its parent check.
    v.push_back(SpawnAndWait({Runfile("node_agent/drover-launch"), "/bin/true"}, 1));
  }
  Phase("launcher_1", v, "posix_spawn drover-launch /bin/true + waitpid (direct: ~baseline)");

  // One job at a time through the SDK, with its milestones as seen by a client.
  std::vector<double> submit, started, exited, sched_run;
  std::string last_job;
  for (int i = 0; i < runs; ++i) {
    absl::Time t0 = absl::Now();
    auto job = client.Submit(TrueSpec(1));
    absl::Time t_sub = absl::Now();
    if (!job.ok()) Die(job.status().ToString());
    absl::Time t_started = absl::InfinitePast();
    JobInfo j = *job;
    while (!(IsTerminal(j.state) && j.live_processes == 0)) {
      auto next = client.GetJob(j.job_id, j.version, absl::Seconds(10));
      if (!next.ok()) Die(next.status().ToString());
      j = *next;
      if (t_started == absl::InfinitePast() && (j.master_port != 0 || IsTerminal(j.state))) {
        t_started = absl::Now();
      }
    }
    absl::Time t_end = absl::Now();
    submit.push_back(Ms(t_sub - t0));
    started.push_back(Ms(t_started - t_sub));
    exited.push_back(Ms(t_end - t_started));
    sched_run.push_back(Ms(*j.end_time - *j.start_time));
    last_job = j.job_id;
  }
  Phase("sdk_submit_rpc", submit, "Submit RPC (validate, place, persist; launch is async)");
  Phase("sdk_submit_to_started", started,
        "Submit reply -> job shows master_port (agent StartProcesses returned)");
  Phase("sdk_started_to_done", exited,
        "-> SUCCEEDED, live 0 seen by GetJob (exit, reap, ReportExit, wakeup)");
  Phase("sched_start_to_end", sched_run, "scheduler's own start_time..end_time (1 ms clock)");

  v.clear();
  std::string agent;
  if (auto s = client.Status(); s.ok() && !s->nodes.empty()) agent = s->nodes[0].agent_address;
  for (int i = 0; i < runs && !agent.empty(); ++i) {
    auto fresh = Client::Connect({c.address(), c.token_file()});
    if (!fresh.ok()) Die(fresh.status().ToString());
    absl::Time t0 = absl::Now();
    absl::Status s = (*fresh)->StreamLogs(agent, last_job, /*follow=*/false, {},
                                          [](const LogChunk&) {}, nullptr,
                                          absl::Seconds(10));
    v.push_back(Ms(absl::Now() - t0));
    if (!s.ok()) Die(s.ToString());
  }
  Phase("sdk_stream_logs_new_channel", v,
        "StreamLogs (no follow, ended job) on a new agent channel");
}

int Main(int argc, char** argv) {
  Flags flags;
  CLI::App app{"launch: job launch overhead against a direct posix_spawn"};
  app.add_option("--runs", flags.runs, "Timed runs per figure")->check(CLI::PositiveNumber);
  app.add_option("--warmup", flags.warmup, "Untimed runs first")->check(CLI::NonNegativeNumber);
  bool no_phases = false;
  app.add_flag("--no-phases", no_phases, "Skip the per-phase breakdown");
  app.add_flag("--keep", flags.keep, "Keep the cluster's directory");
  bool no_metrics = false;
  app.add_flag("--no-metrics", no_metrics,
               "Run the daemons without their HTTP servers (/metrics, the dashboard), to "
               "measure what serving them costs");
  CLI11_PARSE(app, argc, argv);
  flags.phases = !no_phases;
  signal(SIGPIPE, SIG_IGN);
  SetUpRunfiles(argv[0]);

  char tmpl[] = "/tmp/drover-bench-launch-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) Die(absl::StrCat("mkdtemp: ", std::strerror(errno)));
  const std::string tmp = tmpl;
  ::setenv("TEST_TMPDIR", tmp.c_str(), 1);

  std::cout << "drover launch benchmark: 1-node local cluster (--num-cpus 16), "
            << flags.warmup << " warm-up + " << flags.runs << " runs per figure, median\n"
            << "machine: " << ::sysconf(_SC_NPROCESSORS_ONLN) << " CPUs, " << CpuModel() << ", "
            << (static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE) >> 20)
            << " MiB RAM\n"
            << "baseline: posix_spawn of N /bin/true from this process + waitpid of all\n"
            << std::flush;

  std::vector<std::string> lines;
  {
    testing::TestClusterOptions o;
    o.nodes = 1;
    o.cpus_per_node = 16;
    o.metrics = !no_metrics;
    auto cluster = TestCluster::Start(o);
    if (!cluster.ok()) Die(absl::StrCat("cannot start the cluster: ", cluster.status().ToString()));
    TestCluster& c = **cluster;
    std::cout << "cluster: scheduler " << c.address() << ", dir " << c.dir() << "\n\n"
              << std::flush;

    std::vector<Figure> figures = {
        {"launch_1", 1, [&] { return CliRun(c, 1); }},
        {"launch_8", 8, [&] { return CliRun(c, 8); }},
        {"submit_wait_1", 1, [&] { return SubmitWait(c.client(), 1); }},
        {"submit_wait_8", 8, [&] { return SubmitWait(c.client(), 8); }},
    };
    for (const auto& f : figures) RunFigure(f, flags, &lines);
    if (flags.phases) RunPhases(c, flags);
    // ~TestCluster stops the agent (and with it any worker) and the scheduler, and reaps them.
  }
  if (flags.keep) {
    std::cout << "\nkept " << tmp << " (daemon logs)\n";
  } else {
    std::error_code ec;
    std::filesystem::remove_all(tmp, ec);
  }
  return 0;
}

}  // namespace
}  // namespace drover::bench

int main(int argc, char** argv) { return drover::bench::Main(argc, argv); }
