// The record of a local cluster that `drover up` keeps in $DROVER_HOME/cluster.json
// (the scheduler's address, the token file, the daemons' pids), as `drover up` and
// `drover down` read it back. The file is outside input: a crash, another tool or a
// user may have left anything there, so reading it checks every field it uses.
// Thread-compatible value type and pure function.
#ifndef DROVER_CLI_CLUSTER_FILE_H_
#define DROVER_CLI_CLUSTER_FILE_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace drover::cli {

struct ClusterRecord {
  std::string address;     // the scheduler's HOST:PORT ("" until it is known)
  std::string token_file;
  pid_t scheduler_pid = 0;  // 0: none recorded
  pid_t redis_pid = 0;
  std::vector<pid_t> agent_pids;
};

// Parses the text of a cluster file read from `path` (named in errors). Absent keys
// stay empty or 0; unknown keys are ignored. DATA_LOSS naming the path and what is
// wrong if the text is not a JSON object, a string field is not a string, or a pid is
// not a positive integer (a pid of 0 or -1 would signal a whole process group, or every
// process, when `drover down` stops it).
absl::StatusOr<ClusterRecord> ParseClusterRecord(const std::string& text,
                                                 const std::string& path);

}  // namespace drover::cli

#endif  // DROVER_CLI_CLUSTER_FILE_H_
