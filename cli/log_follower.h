// Streams a job's output from every node it runs on, prefixing each line with its
// rank ("[rank3]: ..."), stdout lines to stdout and stderr lines to stderr.
#ifndef DROVER_CLI_LOG_FOLLOWER_H_
#define DROVER_CLI_LOG_FOLLOWER_H_

#include <atomic>
#include <string>

#include "absl/status/statusor.h"
#include "drover/client.h"

namespace drover::cli {

// Prints everything the job has written so far (follow = false), or keeps printing
// until the job has ended and all its output is out (follow = true), across restarts.
// Returns the job's last record. `stop` (may be null) ends following early.
absl::StatusOr<JobInfo> PrintJobLogs(Client& client, const std::string& job_id, bool follow,
                                     bool prefix, const std::atomic<bool>* stop);

}  // namespace drover::cli

#endif  // DROVER_CLI_LOG_FOLLOWER_H_
