// Streams a job's output from every node it runs on, prefixing each line with its
// rank ("[rank3]: ..."), stdout lines to stdout and stderr lines to stderr.
#ifndef DROVER_CLI_LOG_FOLLOWER_H_
#define DROVER_CLI_LOG_FOLLOWER_H_

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/progress_line.h"
#include "drover/client.h"

namespace drover::cli {

// Prints everything the job has written so far (follow = false), or keeps printing
// until the job has ended and all its output is out (follow = true), across restarts.
// Returns the job's last record. `stop` (may be null) ends following early.
// `status_line` (may be null): a terminal's status line, erased while output lines
// are printed and drawn again below them. `on_job` (may be null) gets every record of
// the job that following sees.
//
// `unread` (may be null): where the output that could not be read goes, one line per
// node saying what and why (an agent that did not answer, a dead node); then such
// failures are not errors of this call, so a caller can say how the job ended first
// and name what it could not read after. Null: the first such failure is the error.
// `dead_agent_patience`: how long the last read of a node waits for its agent once
// the scheduler calls the node dead (an agent started again in that time is still
// read); an agent that merely does not answer is waited for up to 30 s.
absl::StatusOr<JobInfo> PrintJobLogs(Client& client, const std::string& job_id, bool follow,
                                     bool prefix, const std::atomic<bool>* stop,
                                     ProgressLine* status_line = nullptr,
                                     const std::function<void(const JobInfo&)>& on_job = nullptr,
                                     std::vector<std::string>* unread = nullptr,
                                     absl::Duration dead_agent_patience = absl::Seconds(10));

}  // namespace drover::cli

#endif  // DROVER_CLI_LOG_FOLLOWER_H_
