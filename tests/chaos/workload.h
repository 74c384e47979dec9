// The chaos campaign's workload: a mix of real work kept running on the cluster while
// faults are injected, each piece recorded (records.h) for the checks.
//
//   gang     4 ranks on 2 nodes allreducing over drover::CollectiveGroup, restarts 2
//   small    a stream of 1-process jobs: most exit 0, some exit 3, some are cancelled
//   objects  puts on one node, byte-exact reads on the other (pulls across nodes)
//   cli      `drover run` of echo and of small 2-rank jobs, their output captured
//   tasks    the task program as a plain driver and inside a `drover run` job: tasks
//            spread over the nodes, an actor, puts read by tasks elsewhere
//
// Each line runs on its own thread, one piece of work after the other, so the load
// stays about constant (the machine has 2 cores). The workload talks to the cluster
// only through its address and token file (not through the TestCluster), so it may
// run while the fault injector restarts daemons.
//
// Thread safety: Start/Stop from one thread; Records() from any.
#ifndef DROVER_TESTS_CHAOS_WORKLOAD_H_
#define DROVER_TESTS_CHAOS_WORKLOAD_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "drover/client.h"
#include "tests/chaos/cluster_env.h"
#include "tests/chaos/records.h"

namespace drover::chaos {

struct WorkloadOptions {
  ClusterEnv env;
  std::string truth_dir;   // the workers' truth files (truth.h)
  std::string worker;      // chaos_worker, chaos_tasks and drover binaries
  std::string tasks;
  std::string drover;
  // Each submission, drover run or driver must be over within this (else it is killed
  // and recorded as timed out; the checks report it).
  absl::Duration job_timeout = absl::Seconds(180);
};

class Workload {
 public:
  explicit Workload(WorkloadOptions options);
  ~Workload();

  // Connects and starts the threads.
  absl::Status Start();
  // No new work from now on; returns once the work in flight is over.
  void Stop();
  // No new work from now on; returns at once (a signal's teardown, on another thread).
  void StopStarting() { stop_ = true; }
  std::vector<JobRecord> Records() const;

  // One piece of work on the calling thread (after the faults; also used by Start's
  // threads). Each returns its record (also kept in Records()).
  // `wait`: how long to wait for the job's end (default WorkloadOptions::job_timeout).
  JobRecord SubmitAndWait(JobKind kind, JobSpec spec,
                          absl::Duration wait = absl::ZeroDuration());
  JobRecord DroverRun(JobKind kind, const std::vector<std::string>& args, int expected_exit,
                      const std::string& echo_token = "");
  JobRecord PlainDriver();

  // The spec of a job of `kind` (gang, small, failing, cancelled, objects).
  JobSpec SpecOf(JobKind kind) const;
  Client& client() { return *client_; }

 private:
  void Loop(const std::function<void(int64_t)>& step);
  void Keep(const JobRecord& r);
  // Runs argv against the cluster; fills the times, exit and output of `r`.
  void RunBounded(const std::vector<std::string>& argv, JobRecord& r);

  const WorkloadOptions options_;
  std::unique_ptr<Client> client_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
  std::atomic<int64_t> serial_{0};
  mutable absl::Mutex mu_;
  std::vector<JobRecord> records_ ABSL_GUARDED_BY(mu_);
};

}  // namespace drover::chaos

#endif  // DROVER_TESTS_CHAOS_WORKLOAD_H_
