// A job's timeline in the Chrome trace event format (the JSON that Perfetto and
// chrome://tracing open): one process per node and one for the scheduler; within a
// node one thread (track) per rank, one per task worker and one per actor.
//   - scheduler: instant events for submission, each placement, restarts, the requeue
//     of a restarting gang and the end, and a "pending" span from each submission or
//     requeue to the placement that followed;
//   - ranks: a complete ("X") span per generation from the agent's start to the exit,
//     named "rank R gen G", its exit in args (spans still open end at `now`);
//   - task workers: a span per lease; actors: a span per ALIVE stretch, instants for
//     their other states; worker exits as instants.
// Pure; thread-safe.
#ifndef DROVER_CLI_CHROME_TRACE_H_
#define DROVER_CLI_CHROME_TRACE_H_

#include <string>

#include "absl/time/time.h"
#include "drover/types.h"

namespace drover::cli {

// `now` closes spans that have not ended (a job still running).
std::string ChromeTraceJson(const std::string& job_id, const JobTimeline& timeline,
                            absl::Time now);

}  // namespace drover::cli

#endif  // DROVER_CLI_CHROME_TRACE_H_
