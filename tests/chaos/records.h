// What the chaos campaign records while it runs: each fault as injected, each job as
// submitted and as it ended. The checks (checks.h) judge these against the cluster's
// own records and the workers' truth files.
#ifndef DROVER_TESTS_CHAOS_RECORDS_H_
#define DROVER_TESTS_CHAOS_RECORDS_H_

#include <optional>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "drover/types.h"
#include "tests/chaos/fault_schedule.h"

namespace drover::chaos {

struct FaultRecord {
  Fault fault;
  bool injected = false;
  absl::Time start;  // when it was injected
  absl::Time end;    // when it was over (daemon restarted, process resumed, link up)
  std::string target;  // "agent 1 (node-2, pid 4242)", "job-k7qm-3 rank 1 (pid 4300)"
  std::string job;     // the job whose process it hit (worker faults)
  std::set<std::string> nodes;  // nodes it hit (agent, store, cut, spill faults)
  std::string note;    // why nothing was injected, or how it was substituted
  absl::Status recovery;  // a daemon that did not come back
};

enum class JobKind {
  kGang,       // 4 ranks on 2 nodes, allreduce steps, restarts allowed
  kSmall,      // prints lines, exits 0
  kFailing,    // prints lines, exits 3
  kCancelled,  // runs long; the campaign cancels it
  kObjects,    // puts on one node, reads back on the other
  kEcho,       // `drover run -- /bin/echo TOKEN`
  kTasks,      // the task program (a driver, or inside a job)
  kReadback,   // after the faults: every surviving object read back on every node
  kAfter,      // after the faults: the cluster serves new jobs
};
const char* JobKindName(JobKind k);

struct JobRecord {
  JobKind kind = JobKind::kSmall;
  std::string job_id;  // empty if no job was created
  std::string how;     // "sdk", "cli" (drover run) or "driver" (a plain task driver)
  std::string idempotency_key;
  absl::Time submitted;
  absl::Time returned;  // WaitJob / drover run / the driver returned
  int expected_exit = 0;  // what its program exits with when nothing interferes
  absl::Status submit_status;  // why no job was created (the error the client saw)
  std::string echo_token;      // kEcho: the word echoed
  // drover run, or a plain driver: exit code (-1 if killed after the timeout) and output.
  int cli_exit = -1;
  bool cli_timed_out = false;
  std::string cli_out, cli_err;
  // The job's record once everything settled (filled by the checks).
  std::optional<JobInfo> final_info;
};

}  // namespace drover::chaos

#endif  // DROVER_TESTS_CHAOS_RECORDS_H_
