// drover run | submit | jobs | job | logs | cancel | status
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <random>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "cli/commands.h"
#include "cli/job_spec.h"
#include "cli/job_log_printer.h"
#include "cli/status_line.h"
#include "cli/table.h"
#include "common/progress_line.h"
#include "common/status_macros.h"
#include "drover/client.h"
#include "drover/json.h"

namespace drover::cli {

absl::StatusOr<std::unique_ptr<Client>> Connect(const GlobalOptions& g) {
  DROVER_ASSIGN_OR_RETURN(ClusterAddress cluster,
                          ResolveCluster(g.address, g.token_file, g.tls_ca));
  return Client::Connect(cluster);
}

int Fail(const std::string& message, int code) {
  std::cerr << "drover: " << message << "\n";
  return code;
}

int Fail(const absl::Status& status, int code) { return Fail(std::string(status.message()), code); }

namespace {

void AddJobFlags(CLI::App* cmd, JobFlags& f) {
  cmd->add_option("--name", f.name, "job name (default: the command)");
  cmd->add_option("--nproc,-n", f.nproc, "total processes (default: nodes x nproc-per-node, or 1)");
  cmd->add_option("--nodes", f.nodes, "spread over exactly this many nodes");
  cmd->add_option("--nproc-per-node", f.nproc_per_node, "processes on each node");
  cmd->add_option("--cpus-per-proc", f.cpus_per_proc, "CPUs each process needs")
      ->capture_default_str();
  cmd->add_option("--gpus-per-proc", f.gpus_per_proc, "GPUs each process gets (pinned)");
  cmd->add_option("--memory-per-proc", f.memory_per_proc, "memory each process needs (512M, 4G)");
  cmd->add_option("--resource", f.resources, "custom resource per process, NAME=AMOUNT");
  cmd->add_option("--strategy", f.strategy, "pack (fewest nodes) or spread")
      ->check(CLI::IsMember({"pack", "spread"}))
      ->capture_default_str();
  cmd->add_option("--max-restarts", f.max_restarts, "restart the whole gang up to N times");
  cmd->add_option("--time-limit", f.time_limit,
                  "stop the job and fail it (exit 124) if a generation runs longer (90s, 2h)");
  cmd->add_option("--env,-e", f.env, "KEY=VALUE for every process (repeatable)");
  cmd->add_option("--cwd", f.cwd, "working directory on the nodes (default: the current one)");
  cmd->add_option("--request-id", f.request_id,
                  "this submit's id: a submit with the id of an earlier one returns that "
                  "job instead of running a second (default: a fresh one)");
}

std::string NodesOf(const JobInfo& j) {
  std::vector<std::string> nodes;
  for (const auto& p : j.placement) {
    if (nodes.empty() || nodes.back() != p.node_id) nodes.push_back(p.node_id);
  }
  return nodes.empty() ? "-" : absl::StrJoin(nodes, ",");
}

// Milliseconds from `from` to `to` (for HumanDuration).
int64_t MsBetween(absl::Time from, absl::Time to) { return absl::ToInt64Milliseconds(to - from); }

std::string AgeOf(const JobInfo& j) {
  const absl::Time now = absl::Now();
  if (!j.start_time) return absl::StrCat("waiting ", HumanDuration(MsBetween(j.submit_time, now)));
  return HumanDuration(MsBetween(*j.start_time, j.end_time.value_or(now)));
}

void PrintJobSummary(const JobInfo& j) {
  std::cerr << "drover: " << j.job_id << " " << JobStateName(j.state);
  if (j.state == JobState::kSucceeded) {
    std::cerr << " in " << AgeOf(j);
    if (j.restart_count > 0) std::cerr << " after " << j.restart_count << " restart(s)";
    std::cerr << "\n";
    return;
  }
  std::cerr << ": " << j.reason;
  if (j.reason.empty() || j.reason.back() != '\n') std::cerr << "\n";
  if (j.state == JobState::kFailed) {
    std::cerr << "drover: full output: drover logs " << j.job_id << "\n";
  }
}

// How long `drover run`'s last read of a node's output waits for the agent of a node
// the scheduler calls dead (one started again at once is still read).
constexpr absl::Duration kDeadAgentPatienceInRun = absl::Seconds(1);

// Random, so that two submits never share one by chance.
std::string NewRequestId() {
  std::random_device rd;
  return absl::StrCat("cli-", absl::Hex(rd(), absl::kZeroPad8), absl::Hex(rd(), absl::kZeroPad8),
                      absl::Hex(rd(), absl::kZeroPad8));
}

// `drover submit|run` when the scheduler could not be reached or could not save: as
// EX_TEMPFAIL, "try again later".
constexpr int kUnavailableExit = 75;

int CmdSubmitOrRun(const GlobalOptions& g, const JobFlags& f, bool run, bool quiet) {
  auto spec = BuildSpec(f, g.command);
  if (!spec.ok()) return Fail(spec.status(), kUsageError);
  // The request id is the CLI's own, so that it can tell the user how to retry safely.
  if (spec->idempotency_key.empty()) spec->idempotency_key = NewRequestId();
  auto client = Connect(g);
  if (!client.ok()) return Fail(client.status());
  // Ctrl-C in `drover run` cancels the job, like srun.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  if (run) pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  auto job = (*client)->Submit(*spec);
  if (!job.ok() && AcceptedJobId(job.status())) {
    // Made and will run, but not saved yet (the scheduler's Redis is down): the job
    // stands, so this is no failure of the submit; say so, and how to retry safely.
    const std::string accepted = *AcceptedJobId(job.status());
    std::cerr << "drover: " << job.status().message() << "\ndrover: " << accepted
              << " stands: do not submit it again, or only as `drover "
              << (run ? "run" : "submit") << " --request-id " << spec->idempotency_key
              << " ...` (that returns " << accepted
              << " and waits for it to be saved); `drover job " << accepted
              << "` shows it\n";
    job = (*client)->GetJob(accepted);
  }
  if (!job.ok()) {
    if (absl::IsUnavailable(job.status())) {
      std::cerr << "drover: " << job.status().message() << "\ndrover: a retry with "
                << "`--request-id " << spec->idempotency_key
                << "` is safe: it never makes a second job\n";
      return kUnavailableExit;
    }
    return Fail(job.status(), kUsageError);
  }
  if (!run) {
    if (g.json) {
      std::cout << ToJson(*job) << "\n";
    } else {
      std::cout << job->job_id << "\n";
      if (job->state == JobState::kPending && !quiet && isatty(STDERR_FILENO)) {
        std::cerr << "drover: " << job->job_id << " is " << JobStateName(job->state) << " ("
                  << job->reason << "); follow it with `drover logs -f " << job->job_id
                  << "`\n";
      }
    }
    return 0;
  }
  const std::string id = job->job_id;
  if (!quiet) std::cerr << "drover: submitted " << id << "\n";
  // On a terminal (not with --quiet), the job's phase on a status line below its
  // output; nothing of it on a pipe or in a file.
  std::unique_ptr<ProgressLine> line = quiet ? nullptr : ProgressLine::ForStderr();
  auto phase = std::make_unique<JobStatusLine>(line.get());
  // Ctrl-C (or SIGTERM) cancels the job; SIGUSR2 from this thread ends the watcher
  // at once when the job is over (no polling delay on the way out).
  sigaddset(&sigs, SIGUSR2);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  std::thread signals([&] {
    for (;;) {
      int sig = 0;
      if (sigwait(&sigs, &sig) != 0 || sig == SIGUSR2) return;
      const std::string note = absl::StrCat("drover: cancelling ", id, "\n");
      if (line != nullptr) {
        line->PrintAbove([&] { std::cerr << note; });
      } else {
        std::cerr << note;
      }
      (void)(*client)->Cancel(id);
    }
  });
  // Output that cannot be read (a node that died with the job, say) is named after the
  // job's outcome, never instead of it; a node the scheduler calls dead is waited for
  // only briefly, so the outcome comes within 2 s of the job's end.
  std::vector<std::string> unread;
  auto final_job = PrintJobLogs(**client, id, /*follow=*/true, /*prefix=*/true, nullptr,
                                line.get(), [&](const JobInfo& j) { phase->Update(j); },
                                &unread, kDeadAgentPatienceInRun);
  if (!final_job.ok()) {
    // Following failed (the scheduler stayed away, say): the outcome, if it can be had,
    // still comes first.
    unread.push_back(absl::StrCat("the job's output could not be followed: ",
                                  final_job.status().message()));
    auto now = (*client)->GetJob(id);
    if (now.ok()) final_job = std::move(now);
  }
  if (final_job.ok() && !(IsTerminal(final_job->state) && final_job->live_processes == 0)) {
    final_job = (*client)->WaitJob(id, absl::Hours(24 * 365));
  }
  pthread_kill(signals.native_handle(), SIGUSR2);
  signals.join();
  phase.reset();  // erases the status line before the summary
  line.reset();
  auto print_unread = [&] {
    for (const auto& u : unread) std::cerr << "drover: " << u << "\n";
  };
  if (!final_job.ok()) {
    print_unread();
    return Fail(final_job.status());
  }
  if (g.json) {
    std::cout << ToJson(*final_job) << "\n";
  } else if (!quiet || final_job->state != JobState::kSucceeded) {
    PrintJobSummary(*final_job);
  }
  print_unread();
  return final_job->exit_code;
}

int CmdJobs(const GlobalOptions& g, bool all) {
  auto client = Connect(g);
  if (!client.ok()) return Fail(client.status());
  auto jobs = (*client)->ListJobs({}, all ? 0 : 50);
  if (!jobs.ok()) return Fail(jobs.status());
  if (g.json) {
    std::cout << JobsToJson(*jobs) << "\n";
    return 0;
  }
  if (jobs->empty()) {
    std::cout << "no jobs yet; start one with `drover run -- COMMAND` or `drover submit`\n";
    return 0;
  }
  Table t({"JOB", "NAME", "STATE", "PROCS", "NODES", "TIME", "RESTARTS", "REASON"});
  for (const auto& j : *jobs) {
    // A driver (a program submitting tasks) has no processes of its own.
    t.AddRow({j.job_id, j.spec.name, JobStateName(j.state),
              j.driver ? "driver" : absl::StrCat(j.spec.nproc), NodesOf(j), AgeOf(j),
              absl::StrCat(j.restart_count), j.reason});
  }
  t.Print(std::cout);
  return 0;
}

int CmdJob(const GlobalOptions& g, const std::string& id) {
  auto client = Connect(g);
  if (!client.ok()) return Fail(client.status());
  auto j = (*client)->GetJob(id);
  if (!j.ok()) return Fail(j.status());
  if (g.json) {
    std::cout << ToJson(*j) << "\n";
    return 0;
  }
  std::cout << "job:       " << j->job_id << " (" << j->spec.name << ")\n"
            << "state:     " << JobStateName(j->state) << "\n"
            << "command:   " << absl::StrJoin(j->spec.command, " ") << "\n"
            << "processes: "
            << (j->driver ? std::string("none of its own (a driver: its tasks and actors run on "
                                        "leased workers)")
                          : absl::StrCat(j->spec.nproc, " (", j->live_processes, " alive)"))
            << "\n"
            << "restarts:  " << j->restart_count << " of " << j->spec.max_restarts << "\n"
            << "time limit: "
            << (j->spec.time_limit > absl::ZeroDuration()
                    ? absl::FormatDuration(j->spec.time_limit)
                    : std::string("none"))
            << "\n"
            << "master:    " << j->master_addr << ":" << j->master_port << "\n"
            << "reason:    " << j->reason << "\n";
  if (!j->placement.empty()) {
    Table t({"RANK", "NODE", "IP", "LOCAL_RANK", "GPUS"});
    for (const auto& p : j->placement) {
      t.AddRow({absl::StrCat(p.rank), p.node_id, p.node_ip, absl::StrCat(p.local_rank),
                p.gpu_ids.empty() ? "-" : absl::StrJoin(p.gpu_ids, ",")});
    }
    std::cout << "\n";
    t.Print(std::cout);
  }
  return 0;
}

int CmdLogs(const GlobalOptions& g, const std::string& id, bool follow, bool no_prefix) {
  auto client = Connect(g);
  if (!client.ok()) return Fail(client.status());
  auto j = PrintJobLogs(**client, id, follow, !no_prefix, nullptr);
  if (!j.ok()) return Fail(j.status());
  return 0;
}

int CmdCancel(const GlobalOptions& g, const std::vector<std::string>& ids) {
  auto client = Connect(g);
  if (!client.ok()) return Fail(client.status());
  int rc = 0;
  for (const auto& id : ids) {
    auto j = (*client)->Cancel(id);
    if (!j.ok()) {
      rc = Fail(j.status());
      continue;
    }
    // Return only once no process of the job is left on any node.
    auto done = (*client)->WaitJob(id, absl::Seconds(60));
    if (!done.ok()) {
      rc = Fail(absl::StrCat(id, ": ", done.status().message()));
      continue;
    }
    if (g.json) {
      std::cout << ToJson(*done) << "\n";
    } else {
      std::cout << id << " " << JobStateName(done->state)
                << (done->state == JobState::kCancelled ? "" : " (it had already ended)") << "\n";
    }
  }
  return rc;
}

int CmdStatus(const GlobalOptions& g) {
  auto cluster = ResolveCluster(g.address, g.token_file, g.tls_ca);
  if (!cluster.ok()) return Fail(cluster.status());
  auto client = Client::Connect(*cluster);
  if (!client.ok()) return Fail(client.status());
  auto s = (*client)->Status();
  if (!s.ok()) return Fail(s.status());
  if (g.json) {
    std::cout << ToJson(*s) << "\n";
    return 0;
  }
  std::cout << "scheduler " << s->address << " (state: " << s->state_backend << ")\n\n";
  Table t({"NODE", "STATE", "ADDRESS", "CPUS FREE/TOTAL", "GPUS FREE/TOTAL",
           "MEMORY FREE/TOTAL", "NOTES"});
  const absl::Time now = absl::Now();
  for (const auto& n : s->nodes) {
    std::string notes = absl::StrJoin(n.warnings, "; ");
    if (!n.reason.empty()) notes = n.reason;
    const int64_t silent_ms = MsBetween(n.last_heartbeat, now);
    if (n.state == NodeState::kAlive && silent_ms > 2000) {
      notes = absl::StrCat("last heartbeat ", HumanDuration(silent_ms), " ago");
    }
    if (n.object_store && n.object_store->restarts > 0) {
      // Each restart lost the objects the store held: say so where people look, first
      // (the column is cut at the table's width).
      const std::string store = absl::StrCat(
          "object store restarts=", n.object_store->restarts, " (last ",
          HumanDuration(MsBetween(n.object_store->last_restart, now)), " ago)");
      notes = notes.empty() ? store : absl::StrCat(store, "; ", notes);
    }
    t.AddRow({n.node_id, NodeStateName(n.state), n.agent_address,
              absl::StrCat(n.free.cpus, "/", n.total.cpus),
              absl::StrCat(n.free.gpus, "/", n.total.gpus,
                           GpuModels(n.gpu_names).empty() ? "" : " ", GpuModels(n.gpu_names)),
              absl::StrCat(HumanBytes(n.free.memory_bytes), "/", HumanBytes(n.total.memory_bytes)),
              notes.empty() ? "-" : notes});
  }
  if (s->nodes.empty()) {
    std::cout << "no nodes yet; start an agent with `drover start --address " << s->address
              << "`\n";
  } else {
    t.Print(std::cout, 100);
  }
  // A TLS cluster serves them over HTTPS.
  const bool tls = !cluster->tls_ca_file.empty();
  auto metrics_url = [scheme = tls ? "https" : "http"](const std::string& address) {
    return address.empty() ? std::string("none") : absl::StrCat(scheme, "://", address, "/metrics");
  };
  std::cout << "\nmetrics (Prometheus; send the cluster token as \"Authorization: Bearer\""
            << (tls ? "; HTTPS: check it with the cluster CA and server name \"drover\"" : "")
            << "):\n";
  std::cout << "  scheduler  " << metrics_url(s->metrics_address) << "\n";
  for (const auto& n : s->nodes) {
    std::cout << "  " << n.node_id << std::string(n.node_id.size() < 10 ? 11 - n.node_id.size() : 1, ' ')
              << metrics_url(n.metrics_address) << "\n";
  }
  if (!s->metrics_address.empty()) {
    std::cout << "dashboard: `drover dashboard` prints a login link\n";
  }
  std::cout << "\njobs:";
  for (JobState st : {JobState::kPending, JobState::kRunning, JobState::kSucceeded,
                      JobState::kFailed, JobState::kCancelled}) {
    auto it = s->job_counts.find(st);
    std::cout << " " << (it == s->job_counts.end() ? 0 : it->second) << " "
              << absl::AsciiStrToLower(JobStateName(st));
  }
  std::cout << "\n";
  return 0;
}

}  // namespace

void AddJobCommands(CLI::App& app, GlobalOptions& g, int* rc) {
  static JobFlags run_flags, submit_flags;
  static bool quiet = false;
  auto* run = app.add_subcommand(
      "run", "run a job and wait: streams rank-prefixed output, exits with the job's code");
  AddJobFlags(run, run_flags);
  run->add_flag("--json", g.json, "print the final job record as JSON");
  run->add_flag("--quiet,-q", quiet, "no progress lines, only the job's output");
  run->footer("Example: drover run --nodes 2 --nproc-per-node 2 -- python3 train.py");
  run->callback([&g, rc] { *rc = CmdSubmitOrRun(g, run_flags, /*run=*/true, quiet); });

  auto* submit = app.add_subcommand("submit", "queue a job and print its id at once");
  AddJobFlags(submit, submit_flags);
  submit->add_flag("--json", g.json, "print the job record as JSON");
  submit->callback([&g, rc] { *rc = CmdSubmitOrRun(g, submit_flags, /*run=*/false, quiet); });

  static bool all = false;
  auto* jobs = app.add_subcommand("jobs", "list jobs, newest first");
  jobs->add_flag("--json", g.json, "machine-readable output");
  jobs->add_flag("--all", all, "all jobs (default: the latest 50)");
  jobs->callback([&g, rc] { *rc = CmdJobs(g, all); });

  static std::string job_id;
  auto* job = app.add_subcommand("job", "show one job: state, reason, placement");
  job->add_option("JOB", job_id, "job id")->required();
  job->add_flag("--json", g.json, "machine-readable output");
  job->callback([&g, rc] { *rc = CmdJob(g, job_id); });

  static std::string logs_id;
  static bool follow = false, no_prefix = false;
  auto* logs = app.add_subcommand("logs", "print a job's output (all ranks, all nodes)");
  logs->add_option("JOB", logs_id, "job id")->required();
  logs->add_flag("--follow,-f", follow, "keep printing until the job ends");
  logs->add_flag("--no-prefix", no_prefix, "omit the [rankN]: prefix");
  logs->callback([&g, rc] { *rc = CmdLogs(g, logs_id, follow, no_prefix); });

  static std::vector<std::string> cancel_ids;
  auto* cancel = app.add_subcommand(
      "cancel", "cancel jobs; returns once none of their processes is alive on any node");
  cancel->add_option("JOB", cancel_ids, "job ids")->required();
  cancel->add_flag("--json", g.json, "machine-readable output");
  cancel->callback([&g, rc] { *rc = CmdCancel(g, cancel_ids); });

  auto* status = app.add_subcommand("status", "nodes, health, resources and job counts");
  status->add_flag("--json", g.json, "machine-readable output");
  status->callback([&g, rc] { *rc = CmdStatus(g); });
}

}  // namespace drover::cli
