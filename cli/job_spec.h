// Turning `drover run`/`drover submit` flags into a JobSpec. Separate from the
// commands so it is unit-tested without a cluster.
#ifndef DROVER_CLI_JOB_SPEC_H_
#define DROVER_CLI_JOB_SPEC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "drover/types.h"

namespace drover::cli {

// Flags shared by `run` and `submit`. An optional is empty when the flag was not given.
struct JobFlags {
  std::string name;
  std::optional<int> nproc;           // default: nodes x nproc-per-node, or 1
  std::optional<int> nodes;
  std::optional<int> nproc_per_node;
  double cpus_per_proc = 1;
  int gpus_per_proc = 0;
  std::string memory_per_proc;
  std::vector<std::string> resources;
  std::string strategy = "pack";
  int max_restarts = 0;
  std::string time_limit;  // "90s", "30m", "2h", "1h30m"; empty: none
  std::vector<std::string> env;
  std::string cwd;
  // The submit's request id (JobSpec::idempotency_key); empty: the CLI makes one.
  std::string request_id;
};

// "512M", "4G", "1.5GiB", "1000" -> bytes. INVALID_ARGUMENT naming the input otherwise
// (negative, not a number, or more than fits in 63 bits).
absl::StatusOr<int64_t> ParseBytes(const std::string& s);

// Checks the flags (every number in its range: at least 1 process, node and process per
// node; no negative CPUs, GPUs, memory, resources or restarts; a positive time limit)
// and against each other (--nodes x --nproc-per-node vs --nproc), the NAME=AMOUNT and
// KEY=VALUE forms, and builds the spec. `cmd` is the job's argv. An empty --cwd
// becomes the current directory. INVALID_ARGUMENT with a message naming the flag and
// its value otherwise.
absl::StatusOr<JobSpec> BuildSpec(const JobFlags& f, const std::vector<std::string>& cmd);

}  // namespace drover::cli

#endif  // DROVER_CLI_JOB_SPEC_H_
