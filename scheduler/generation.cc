#include "scheduler/generation.h"

#include "absl/strings/str_cat.h"
#include "common/spawn.h"

namespace drover {

bool Failed(const proto::ExitInfo& e) {
  return !e.error().empty() || e.exit_code() != 0 || e.signal() != 0;
}

std::string DescribeFailure(const proto::ExitInfo& e, const std::string& node_ip,
                            bool with_stderr) {
  std::string where = absl::StrCat("rank ", e.rank(), " on node ", e.node_id(),
                                   node_ip.empty() ? "" : absl::StrCat(" (", node_ip, ")"));
  std::string what;
  if (!e.error().empty()) {
    what = e.error();
  } else if (e.signal() != 0) {
    what = absl::StrCat("was killed by ", SignalName(e.signal()));
  } else {
    what = absl::StrCat("exited with code ", e.exit_code());
  }
  std::string out = absl::StrCat(where, " ", what);
  if (with_stderr && !e.stderr_tail().empty()) {
    absl::StrAppend(&out, "; last lines of its stderr:\n", e.stderr_tail());
    if (out.back() != '\n') out.push_back('\n');
  }
  return out;
}

int ExitCodeOf(const proto::ExitInfo& e) {
  if (e.signal() != 0) return 128 + e.signal();
  if (e.exit_code() > 0) return e.exit_code();
  return 1;
}

std::optional<proto::WatchGenerationReply> GenerationEnd(const proto::JobInfo& job,
                                                         int generation,
                                                         const std::string& cause_node_ip) {
  proto::WatchGenerationReply reply;
  const auto& cause = job.root_cause();
  if (job.has_root_cause() && cause.generation() == generation &&
      (job.restarting() || job.state() == proto::FAILED || job.restart_count() > generation)) {
    reply.set_ended(true);
    *reply.mutable_failure() = cause;
    reply.set_description(DescribeFailure(cause, cause_node_ip, /*with_stderr=*/false));
    return reply;
  }
  if (IsTerminal(job.state())) {
    reply.set_ended(true);
    reply.set_description(absl::StrCat("job ", job.job_id(), " ended (",
                                       proto::JobState_Name(job.state()), ": ", job.reason(),
                                       ")"));
    return reply;
  }
  if (job.restart_count() != generation) {
    reply.set_ended(true);
    reply.set_description(absl::StrCat("job ", job.job_id(), " moved on to generation ",
                                       job.restart_count()));
    return reply;
  }
  return std::nullopt;
}

}  // namespace drover
