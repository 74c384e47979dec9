// SimFleet: many simulated node agents in one process, for scale benchmarks and tests
// of the real drover-scheduler (bench/scale.cc, bench/scale_test.cc).
//
// Each simulated node speaks the agents' real RPCs over its own connection to the
// scheduler, as a drover-agent does: it registers (RegisterNode), holds an AgentSession
// stream open, sends a Heartbeat with its whole process table every interval the
// scheduler asked for, reports each exit at once (ReportExit; the exits that came while
// its last call was out go together in the next) and re-registers when a heartbeat
// says it is unknown. It serves the NodeAgent service (StartProcesses,
// StartProcessesBatch, StopJob) and the task layer's Workers service (StartWorker,
// KillWorker, ...) on a loopback port of its own. Nothing is spawned: a "process" is an
// entry in its node's table that exits with code 0 after its job's run time (the job's
// environment variable SIM_RUNTIME_MS, else SimFleetOptions::runtime; negative: until
// StopJob or Release), and StartWorker answers at once with a worker that does not
// exist.
//
// One gRPC server (callback API, no thread per call) listens on every node's port; a
// call is told apart by its :authority, the address the scheduler dialled. Calls to
// the scheduler are asynchronous (callback API), sent by one timer thread (heartbeats,
// exits) and by the server's threads (nothing blocks on them).
//
// Ownership: Start returns the only owner; the destructor stops everything (Stop).
// Thread safety: every public method is thread-safe.
#ifndef DROVER_SCHEDULER_TESTING_SIM_FLEET_H_
#define DROVER_SCHEDULER_TESTING_SIM_FLEET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace drover::testing {

struct SimFleetOptions {
  // host:port of the scheduler and the cluster token.
  std::string scheduler_address;
  std::string token;
  int nodes = 10;
  // What each node offers (no GPUs).
  double cpus_per_node = 8;
  int64_t memory_bytes_per_node = int64_t{64} << 30;
  // How long a process runs when its job does not say (SIM_RUNTIME_MS); negative:
  // until stopped or released.
  absl::Duration runtime = absl::ZeroDuration();
};

// Counters since Start (latencies since the last TakeHeartbeatLatencies).
struct SimFleetStats {
  int registered = 0;     // nodes that hold a node id
  int sessions_open = 0;  // nodes whose AgentSession is open
  int64_t registrations = 0;
  int64_t heartbeats = 0;        // answered
  int64_t heartbeat_errors = 0;  // failed (deadline, unavailable, ...)
  int64_t unknown_replies = 0;   // heartbeats answered `known = false`
  int64_t start_calls = 0;       // starts served (StartProcesses, or one of a batch)
  int64_t start_batches = 0;     // StartProcessesBatch calls served
  int64_t processes_started = 0;
  int64_t exits_reported = 0;  // exits in ReportExit calls answered OK
  int64_t report_errors = 0;   // exits in ReportExit calls that failed
  int64_t report_calls = 0;    // ReportExit calls answered
  int64_t stop_calls = 0;
  int64_t worker_starts = 0;  // StartWorker served
  int running = 0;            // processes running now, on every node
  // When the first and the latest StartProcesses arrived (InfinitePast if none).
  absl::Time first_start = absl::InfinitePast();
  absl::Time last_start = absl::InfinitePast();
};

class SimFleet {
 public:
  // Binds one loopback port per node and starts registering every node at once.
  static absl::StatusOr<std::unique_ptr<SimFleet>> Start(SimFleetOptions options);
  ~SimFleet();
  SimFleet(const SimFleet&) = delete;
  SimFleet& operator=(const SimFleet&) = delete;

  // Waits until every node is registered and holds an open session.
  // DEADLINE_EXCEEDED with the counts if `timeout` passes first.
  absl::Status WaitReady(absl::Duration timeout);

  // Every running process whose run time is unbounded exits now with code 0.
  void Release();

  SimFleetStats stats();
  // Round-trip times of the heartbeats answered since the last call, in milliseconds.
  std::vector<double> TakeHeartbeatLatencies();

  // Stops sending, cancels the sessions (the scheduler sees every agent go), waits for
  // the calls in flight and shuts the server down. Idempotent.
  void Stop();

 private:
  class Impl;
  explicit SimFleet(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace drover::testing

#endif  // DROVER_SCHEDULER_TESTING_SIM_FLEET_H_
