// How a job generation ends, and how that is told: the failure descriptions in a job's
// reason and in WatchGeneration's answer, and the exit code `drover run` returns (which
// generation a rendezvous call may use: rendezvous.h).
//
// Pure functions over a JobInfo snapshot: SchedulerCore calls them under its lock, and
// generation_test.cc tests them without a scheduler.
#ifndef DROVER_SCHEDULER_GENERATION_H_
#define DROVER_SCHEDULER_GENERATION_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "common/job_state.h"  // IWYU pragma: export (IsTerminal)
#include "proto/common.pb.h"
#include "proto/scheduler.pb.h"

namespace drover {


// True if the process failed: an error, a non-zero exit code or a signal.
bool Failed(const proto::ExitInfo& e);

// "rank 1 on node node-2 (10.0.0.2) exited with code 3", then the stderr tail if
// `with_stderr` and there is one. `node_ip` may be empty.
std::string DescribeFailure(const proto::ExitInfo& e, const std::string& node_ip,
                            bool with_stderr = true);

// The job's exit code for a failed process: 128 + signal, its exit code, or 1.
int ExitCodeOf(const proto::ExitInfo& e);

// WatchGeneration's answer for `generation` of `job`, or nullopt while it runs on.
// `cause_node_ip` is the IP of the root cause's node ("" if unknown).
std::optional<proto::WatchGenerationReply> GenerationEnd(const proto::JobInfo& job,
                                                         int generation,
                                                         const std::string& cause_node_ip);

}  // namespace drover

#endif  // DROVER_SCHEDULER_GENERATION_H_
