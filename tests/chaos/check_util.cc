#include "tests/chaos/check_util.h"

#include <algorithm>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace drover::chaos {
namespace {

bool ClusterWide(FaultKind k) {
  return k == FaultKind::kKillScheduler || k == FaultKind::kKillRedis ||
         k == FaultKind::kStopScheduler || k == FaultKind::kStopRedis ||
         k == FaultKind::kRestartHead;
}

// The lines of `text` as a multiset.
std::multiset<std::string> Lines(const std::string& text) {
  std::multiset<std::string> out;
  for (absl::string_view l : absl::StrSplit(text, '\n')) out.emplace(l);
  return out;
}

// What a process recorded as written to stdout, as `drover run`/`drover logs` prefix
// it, that `printed` lacks (at most a few, for the message).
// Only lines written before `until` count (a process on a node cut off may write on
// after its job was declared failed: `drover run` cannot wait for those).
std::vector<std::string> Missing(const std::vector<ProcessTruth>& truth, const JobRecord& r,
                                 const std::string& printed, int* expected,
                                 absl::Time until = absl::InfiniteFuture()) {
  std::multiset<std::string> have = Lines(printed);
  std::vector<std::string> missing;
  *expected = 0;
  for (const ProcessTruth& t : truth) {
    const int rank = r.kind == JobKind::kTasks ? 0 : t.rank;
    if (rank < 0) continue;  // a plain driver: not a process of the job
    for (size_t i = 0; i < t.out.size(); ++i) {
      const std::string& line = t.out[i];
      if (absl::FromUnixMillis(t.out_ms[i]) > until) continue;
      ++*expected;
      auto it = have.find(absl::StrCat("[rank", rank, "]: ", line));
      if (it != have.end()) {
        have.erase(it);
      } else if (missing.size() < 3) {
        missing.push_back(absl::StrCat("[rank", rank, "]: ", line, " (from ", t.name, ")"));
      }
    }
  }
  if (r.kind == JobKind::kEcho && !r.echo_token.empty() && r.final_info &&
      r.final_info->state == JobState::kSucceeded) {
    ++*expected;
    if (!have.count("[rank0]: " + r.echo_token)) missing.push_back("[rank0]: " + r.echo_token);
  }
  return missing;
}

}  // namespace

std::string Name(const JobRecord& r) {
  return absl::StrCat(r.job_id.empty() ? "(no job)" : r.job_id, " (", JobKindName(r.kind),
                      " via ", r.how, ")");
}

std::string Tail(const std::string& s, size_t max) {
  std::string t = s.size() > max ? "..." + s.substr(s.size() - max) : s;
  return absl::StrReplaceAll(t, {{"\n", " | "}});
}

const FaultRecord* TouchedBy(const CheckContext& ctx, const JobRecord& r, const JobInfo& j) {
  absl::Time end = std::max(r.returned, j.end_time.value_or(r.returned));
  std::set<std::string> nodes(j.nodes_used.begin(), j.nodes_used.end());
  for (const auto& p : j.placement) nodes.insert(p.node_id);
  for (const FaultRecord& f : ctx.faults) {
    if (!f.injected || f.start > end || f.end + ctx.settle < r.submitted) continue;
    if (r.kind == JobKind::kTasks) return &f;
    if (ClusterWide(f.fault.kind)) {
      // A job whose processes never call the scheduler (small, failing: submitted, run,
      // exited) must end as it would have: a scheduler or Redis fault may delay it, not
      // change it. Gangs (rendezvous), objects (the directory), cancels and `drover
      // run` (which follows the job) depend on the scheduler while they run.
      const bool independent = r.how == "sdk" && (r.kind == JobKind::kSmall ||
                                                   r.kind == JobKind::kFailing);
      if (!independent) return &f;
      continue;
    }
    if (!f.job.empty()) {
      if (f.job == j.job_id) return &f;
      continue;
    }
    for (const std::string& n : f.nodes) {
      if (nodes.count(n)) return &f;
    }
  }
  return nullptr;
}

bool HasTruth(JobKind kind) { return kind != JobKind::kEcho; }

const ProcessTruth* TruthOf(const std::vector<ProcessTruth>& truth, int generation, int rank,
                            JobKind kind) {
  for (const ProcessTruth& t : truth) {
    if (kind == JobKind::kTasks ? t.name == "driver"
                                : t.generation == generation && t.rank == rank) {
      return &t;
    }
  }
  return nullptr;
}

void CheckRunOutput(const CheckContext& ctx, const JobRecord& r, const JobInfo& j,
                    const std::vector<ProcessTruth>& truth, Report& report) {
  const std::string name = Name(r);
  if (r.cli_timed_out) {
    report.Violated("run-output-complete",
                    absl::StrCat(name, ": drover run did not return within its timeout (the job "
                                       "is ",
                                 JobStateName(j.state), "); its stderr: ", Tail(r.cli_err)));
    return;
  }
  // Whether it followed the job to its end: it printed the job's summary line.
  const bool followed =
      absl::StrContains(r.cli_err, absl::StrCat("drover: ", j.job_id, " ", JobStateName(j.state)));
  if (r.cli_exit != j.exit_code || !followed) {
    // Allowed only when a fault explains it and the CLI said what went wrong.
    const bool said = absl::StrContains(r.cli_err, "drover: ");
    if (r.cli_exit == 0 || !said || TouchedBy(ctx, r, j) == nullptr) {
      report.Violated("run-output-complete",
                      absl::StrCat(name, ": drover run exited ", r.cli_exit, " but the job ended ",
                                   JobStateName(j.state), " with exit code ", j.exit_code,
                                   "; its stderr: ", Tail(r.cli_err)));
    } else {
      report.Held("run-output-complete");
    }
    return;
  }
  int expected = 0;
  std::vector<std::string> missing =
      Missing(truth, r, r.cli_out, &expected, j.end_time.value_or(absl::InfiniteFuture()));
  // `drover run` answers within ~1 s of its job's end and may leave out output it could
  // not read, saying so after the job's outcome: a node the scheduler calls dead or does
  // not know since it restarted ("... is not shown"), or a scheduler it could not reach
  // to follow the job ("the job's output could not be followed: ..."). Allowed when a
  // fault explains it and the CLI said so (`drover logs` reads it later).
  const bool named_unread = (absl::StrContains(r.cli_err, "is not shown") ||
                             absl::StrContains(r.cli_err, "output could not be followed")) &&
                            TouchedBy(ctx, r, j) != nullptr;
  if (!missing.empty() && !named_unread) {
    report.Violated("run-output-complete",
                    absl::StrCat(name, ": drover run exited ", r.cli_exit, " without printing ",
                                 missing.size() > 2 ? "lines" : "the line", " ",
                                 absl::StrJoin(missing, "; "), " (", expected,
                                 " expected); its stdout: ", Tail(r.cli_out, 200), " stderr: ",
                                 Tail(r.cli_err, 300)));
  } else {
    report.Held("run-output-complete");
  }
}

void CheckLogs(const CheckContext& ctx, const JobRecord& r, const JobInfo& j,
               const std::vector<ProcessTruth>& truth, Report& report) {
  if (j.driver || (truth.empty() && r.kind != JobKind::kEcho)) return;  // no processes of its own
  RunResult logs = RunWithCluster(ctx.env, {ctx.drover, "logs", r.job_id}, absl::Seconds(60));
  const std::string name = Name(r);
  if (logs.exit != 0) {
    report.Violated("logs-complete", absl::StrCat(name, ": drover logs exited ", logs.exit, ": ",
                                                  Tail(logs.err)));
    return;
  }
  int expected = 0;
  std::vector<std::string> missing = Missing(truth, r, logs.out, &expected);
  if (!missing.empty()) {
    report.Violated("logs-complete",
                    absl::StrCat(name, ": drover logs lacks ", absl::StrJoin(missing, "; "), " (",
                                 expected, " lines expected); its stderr: ", Tail(logs.err)));
  } else {
    report.Held("logs-complete");
  }
}

}  // namespace drover::chaos
