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
  std::string tls_ca;       // TLS clusters: the CA's certificate ("" for plain text)
  pid_t scheduler_pid = 0;  // 0: none recorded
  pid_t redis_pid = 0;
  std::vector<pid_t> agent_pids;
  // The scheduler's own pid ("pid"), which it writes into its ready file: the whole
  // record of a `drover start --head` head, whose ready file is cluster.json.
  pid_t head_pid = 0;
  // What `drover up` needs to bring a dead daemon back in place (absent in records of
  // `drover start --head` and of older versions): the cluster's directory, the Redis
  // it started (address, password file) and each daemon's command line as started,
  // with the scheduler's port fixed to the one it got. agent_argvs[i] is agent i's.
  std::string dir;
  std::string redis;
  std::string redis_password_file;
  std::vector<std::string> scheduler_argv;
  std::vector<std::string> redis_argv;
  std::vector<std::vector<std::string>> agent_argvs;
};

// Parses the text of a cluster file read from `path` (named in errors). Absent keys
// stay empty or 0; unknown keys are ignored. DATA_LOSS naming the path and what is
// wrong if the text is not a JSON object, a string field is not a string, or a pid is
// not a positive integer, or an argv is not a list of strings (a pid of 0 or -1 would signal a whole process group, or every
// process, when `drover down` stops it).
absl::StatusOr<ClusterRecord> ParseClusterRecord(const std::string& text,
                                                 const std::string& path);

}  // namespace drover::cli

#endif  // DROVER_CLI_CLUSTER_FILE_H_
