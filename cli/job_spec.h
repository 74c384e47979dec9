// Turning `drover run`/`drover submit` flags into a JobSpec. Separate from the
// commands so it is unit-tested without a cluster.
#ifndef DROVER_CLI_JOB_SPEC_H_
#define DROVER_CLI_JOB_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/common.pb.h"

namespace drover::cli {

// Flags shared by `run` and `submit`.
struct JobFlags {
  std::string name;
  int nproc = -1;  // -1: not given
  int nodes = 0;
  int nproc_per_node = 0;
  double cpus_per_proc = 1;
  int gpus_per_proc = 0;
  std::string memory_per_proc;
  std::vector<std::string> resources;
  std::string strategy = "pack";
  int max_restarts = 0;
  std::string time_limit;  // "90s", "30m", "2h", "1h30m"; empty: none
  std::vector<std::string> env;
  std::string cwd;
};

// "512M", "4G", "1.5GiB", "1000" -> bytes. INVALID_ARGUMENT naming the input otherwise.
absl::StatusOr<int64_t> ParseBytes(const std::string& s);

// Checks the flags against each other (--nodes x --nproc-per-node vs --nproc, sizes,
// NAME=AMOUNT and KEY=VALUE forms) and builds the spec. `cmd` is the job's argv.
// An empty --cwd becomes the current directory.
absl::StatusOr<proto::JobSpec> BuildSpec(const JobFlags& f, const std::vector<std::string>& cmd);

}  // namespace drover::cli

#endif  // DROVER_CLI_JOB_SPEC_H_
