// Pieces of the scheduler's scale benchmark (bench/scale.cc) and of its short run in
// the test suite (bench/scale_test.cc): a drover-scheduler process whose CPU time and
// memory are read from /proc, a probe that times `drover jobs` and `drover status`
// calls while load runs, and a parallel submitter. The simulated agents are SimFleet
// (scheduler/testing/sim_fleet.h).
//
// Thread safety: SchedulerProcess is for one thread; LatencyProbe's methods are
// thread-safe; SubmitMany uses `client` from several threads (Client allows it).
#ifndef DROVER_BENCH_SCALE_HARNESS_H_
#define DROVER_BENCH_SCALE_HARNESS_H_

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "drover/client.h"

namespace drover::bench {

// Failures of calls made many times: how many, and the first one's message.
struct Errors {
  int count = 0;
  std::string first;
  void Add(const absl::Status& s) {
    if (count++ == 0) first = std::string(s.message());
  }
  void Merge(const Errors& other) {
    if (count == 0) first = other.first;
    count += other.count;
  }
  // "3 errors: <the first>".
  std::string Describe() const { return absl::StrCat(count, " errors: ", first); }
};

// A drover-scheduler of its own, with its token file, ready file and log in `dir`.
class SchedulerProcess {
 public:
  // Starts `binary` on a free loopback port with `flags` added, and waits (up to 30 s)
  // until it serves. The destructor stops it (SIGTERM, SIGKILL after 15 s) and reaps it.
  static absl::StatusOr<std::unique_ptr<SchedulerProcess>> Start(
      const std::string& binary, const std::string& dir, const std::vector<std::string>& flags);
  ~SchedulerProcess();
  SchedulerProcess(const SchedulerProcess&) = delete;
  SchedulerProcess& operator=(const SchedulerProcess&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& address() const { return address_; }
  const std::string& token() const { return token_; }
  const std::string& token_file() const { return token_file_; }

  // User + system CPU time of the whole process so far (/proc/<pid>/stat).
  absl::Duration CpuTime() const;
  // Resident memory now (/proc/<pid>/status VmRSS).
  int64_t RssBytes() const;
  // Its threads now (/proc/<pid>/status Threads).
  int Threads() const;
  // How long its threads have waited, in all, for a CPU while runnable
  // (/proc/<pid>/task/*/schedstat): what the machine's other load cost it.
  absl::Duration RunQueueWait() const;
  // False once it has exited (it is reaped then).
  bool Running();
  // The end of its log, for failure messages.
  std::string LogTail() const;

 private:
  SchedulerProcess() = default;
  pid_t pid_ = -1;
  std::string address_, token_, token_file_, log_;
};

// Times `drover jobs` (ListJobs of the 50 newest, as the CLI asks) and `drover status`
// (Status) through the SDK, one call after the other with `pause` between, on a
// thread of its own, from construction to destruction.
class LatencyProbe {
 public:
  LatencyProbe(Client* client, absl::Duration pause);
  ~LatencyProbe();
  LatencyProbe(const LatencyProbe&) = delete;
  LatencyProbe& operator=(const LatencyProbe&) = delete;

  struct Samples {
    std::vector<double> jobs_ms, status_ms;
    Errors errors;
  };
  // What was measured since the last call.
  Samples Take();

 private:
  Client* const client_;
  const absl::Duration pause_;
  absl::Mutex mu_;
  Samples samples_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

struct SubmitResult {
  std::vector<double> latency_ms;  // one per successful Submit
  std::vector<std::string> job_ids;
  Errors errors;
  absl::Duration wall;
};
// Submits `count` copies of `spec` from `threads` threads through Client::Submit
// (which retries with an idempotency key of its own for each).
SubmitResult SubmitMany(Client& client, const JobSpec& spec, int count, int threads);

// The load of many users at once: `clients` clients, each with a connection of its
// own, for `duration`: each submits `spec` (Client::Submit: an idempotency key per
// submission, retried on UNAVAILABLE), then polls (GetJob) the job it submitted
// before, and again. Every job submitted is listed in `job_ids`.
struct LoadResult {
  std::vector<double> submit_ms, poll_ms;
  std::vector<std::string> job_ids;
  Errors errors;
  absl::Duration wall;
};
LoadResult RunLoad(const ClusterAddress& cluster, const JobSpec& spec, int clients,
                   absl::Duration duration);
// Checks that no submission of `load` was lost or doubled: its job ids are distinct,
// the scheduler holds exactly `jobs_before` + that many jobs, and (within `timeout`)
// every one of them SUCCEEDED. The message says what is off.
absl::Status CheckEverySubmissionRan(Client& client, const LoadResult& load, int64_t jobs_before,
                                     absl::Duration timeout);
// How many jobs the scheduler holds, in every state.
absl::StatusOr<int64_t> JobCount(Client& client);

// Prints `BENCH <name>_<nodes> <value> <unit>`, with ` target<target> PASS|MISS` if a
// target is given.
void Bench(const std::string& name, int nodes, double value, const std::string& unit,
           const std::string& target = "", bool pass = true);
// Prints an indented line of detail.
void Note(const std::string& what);

// "p50 1.2 ms p99 3.4 ms max 5.6 ms (n 123)" of latencies in milliseconds.
std::string DescribeLatencies(const std::vector<double>& ms);

}  // namespace drover::bench

#endif  // DROVER_BENCH_SCALE_HARNESS_H_
