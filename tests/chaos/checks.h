// The chaos campaign's invariants, checked after (and, for processes, during) a run:
//
//   job-has-record        every job the cluster acknowledged has a record
//   job-final-state       every job ends in a final state (SUCCEEDED, FAILED, CANCELLED)
//   true-reason           the final state and reason match what happened: a success had
//                         every rank exit 0, a failure names an exit a process really
//                         made (its truth file), a signal or lost node a fault caused
//   untouched-as-intended a job no fault came near ended as its program intended
//   no-running-without-processes  no job stays RUNNING with no process on any node
//   no-process-outlives-job       no process of a job runs after the job has ended
//   objects-exact-or-clear        every object read is byte-exact, or the read failed
//                         with a clear error; a lost object was lost to a fault that
//                         could lose it (its store or agent killed)
//   logs-complete         every line a process wrote is in `drover logs`
//   run-output-complete   `drover run` exits with its job's code and prints every line
//   tasks-correct         task and actor results are right, or errors a fault explains
//   no-leaked-processes / no-leaked-shm / no-leaked-spill   after the cluster stops
//   serves-new-job        after the faults, new jobs, tasks and objects work
//
//   starts-exactly-once   every placed rank starts once: not twice, and not never (a
//                         start lost with a killed scheduler) (KNOWN to be violated:
//                         docs/reliability.md)
//
// Report collects, per invariant, how many times it held and each violation.
#ifndef DROVER_TESTS_CHAOS_CHECKS_H_
#define DROVER_TESTS_CHAOS_CHECKS_H_

#include <atomic>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "drover/client.h"
#include "tests/chaos/cluster_env.h"
#include "tests/chaos/records.h"
#include "tests/chaos/truth.h"

namespace drover::chaos {

// Invariants a known, documented issue can violate (docs/reliability.md, "Known"): the
// campaign still checks and reports them, marked as known.
bool KnownIssue(const std::string& invariant);

// Thread-safe.
class Report {
 public:
  void Held(const std::string& invariant, int n = 1);
  void Violated(const std::string& invariant, const std::string& detail);
  // Something worth counting that breaks no invariant (e.g. a read refused because
  // the store was full): printed with its count and first example.
  void Note(const std::string& topic, const std::string& example);
  int violations() const;
  // Violations of invariants that are not KnownIssue.
  int unknown_violations() const;
  // Every invariant with its counts, then each violation (at most `max_each` per
  // invariant).
  std::string Summary(int max_each = 20) const;
  // Invariant name -> violations.
  std::map<std::string, std::vector<std::string>> Violations() const;

 private:
  struct Counts {
    int held = 0;
    std::vector<std::string> violations;
  };
  mutable absl::Mutex mu_;
  std::map<std::string, Counts> counts_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::pair<int, std::string>> notes_ ABSL_GUARDED_BY(mu_);
};

struct CheckContext {
  Client* client = nullptr;
  ClusterEnv env;
  std::string truth_dir;
  std::string drover;      // the CLI binary
  std::vector<FaultRecord> faults;
  // How long after a fault is over its effects may still show (detection, restarts).
  absl::Duration settle = absl::Seconds(12);
};

// Waits (until `deadline`) for every recorded job to end, fills final_info, and checks
// job-has-record and job-final-state; with `sweep`, also for every other job of the
// cluster (drivers that died before saying their id, runs whose id was not printed).
void SettleJobs(const CheckContext& ctx, absl::Time deadline, std::vector<JobRecord>& jobs,
                bool sweep, Report& report);

// true-reason, untouched-as-intended, tasks-correct, objects-exact-or-clear (the
// workers' own reads), run-output-complete, logs-complete.
void CheckOutcomes(const CheckContext& ctx, const std::vector<JobRecord>& jobs, Report& report);

// The objects that should still exist (put, not deleted), as "ID SIZE" lines, with the
// node each was put on.
struct LiveObject {
  std::string id;
  size_t size = 0;
  std::string job;
  std::string node;  // where its primary copy was put
  absl::Time put_after;  // the putting job's submission
};
std::vector<LiveObject> LiveObjects(const std::string& truth_dir, const std::vector<JobRecord>& jobs);
// Whether a fault could have destroyed the copies of objects put on `node` after
// `since`: its store or its agent killed.
bool LoseableOn(const CheckContext& ctx, const std::string& node, absl::Time since);
// The read-back job's records: every live object read on every node, exact or lost
// with a clear error to a fault that could lose it.
void CheckReadback(const CheckContext& ctx, const std::vector<LiveObject>& objects,
                   const JobRecord& readback, int nodes, Report& report);

// Samples the cluster's jobs and processes every half second while the campaign runs:
// no-running-without-processes (RUNNING with no process for 30 s) and
// no-process-outlives-job (a process of an ended job alive 20 s after the end, not
// counting the time its node or the head could not be reached: a fault told through
// FaultBegins/FaultEnds, and a few seconds after it for the node to register again).
// Also remembers every pid that belonged to the cluster (for /dev/shm names).
class Monitor {
 public:
  Monitor(std::string address, std::string token_file, Report& report);
  ~Monitor();
  void Start();
  void Stop();
  std::set<pid_t> pids_seen() const;
  // A fault that keeps the cluster from reaching node `node_id` ("": the head, so
  // every node) began / is over.
  void FaultBegins(const std::string& node_id);
  void FaultEnds(const std::string& node_id);

 private:
  void Sample();
  // Since when `node_id` and the head have been reachable (InfiniteFuture while a
  // fault keeps either away).
  absl::Time ReachableSince(const std::string& node_id);

  const std::string address_;
  const std::string token_file_;
  Report& report_;
  std::unique_ptr<Client> client_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  mutable absl::Mutex mu_;
  std::set<pid_t> pids_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> faults_now_ ABSL_GUARDED_BY(mu_);           // node -> faults
  std::map<std::string, absl::Time> reachable_from_ ABSL_GUARDED_BY(mu_);  // after the last
  std::map<std::string, absl::Time> running_empty_since_;  // job -> first seen so
  std::map<pid_t, absl::Time> outliving_since_;            // pid -> first seen so
  std::set<std::string> reported_;                         // jobs / pids said once
};

// After the cluster stopped: nothing of it runs; no /dev/shm entry it made is left
// (`shm_private`: /dev/shm is the campaign's own mount, so every entry counts;
// otherwise entries new since `shm_before` named after a pid in `pids`); the spill
// directories hold nothing.
void CheckNothingLeft(const std::string& cluster_dir, const std::string& token_file,
                      bool shm_private, const std::set<std::string>& shm_before,
                      const std::set<pid_t>& pids, const std::vector<std::string>& spill_dirs,
                      Report& report);

// The names in /dev/shm now.
std::set<std::string> ShmEntries();

}  // namespace drover::chaos

#endif  // DROVER_TESTS_CHAOS_CHECKS_H_
