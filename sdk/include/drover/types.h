// Plain value types of the drover SDK: what a job asks for (JobSpec), the cluster's
// record of a job (JobInfo), of a node (NodeInfo) and of the whole cluster
// (ClusterStatus), and pieces of a job's output (LogChunk). The SDK converts them to and
// from the wire messages (proto/) inside its own .cc files; nothing here depends on
// them, so programs build against this header with the standard library and Abseil.
//
// Ownership and thread safety: ordinary values (copyable, movable, no shared state);
// the free functions are pure and thread-safe.
#ifndef DROVER_SDK_INCLUDE_DROVER_TYPES_H_
#define DROVER_SDK_INCLUDE_DROVER_TYPES_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace drover {

// An amount of every resource kind a node offers or a process needs.
struct Resources {
  double cpus = 0;           // logical CPUs, may be fractional (0.5)
  int64_t memory_bytes = 0;
  int gpus = 0;              // whole GPUs
  std::map<std::string, double> custom;  // operator-defined ("ssd": 1, "license": 4)
};

// How a gang's processes are spread over nodes when nproc_per_node is 0.
enum class PlacementStrategy {
  kPack = 0,    // as few nodes as possible (the default)
  kSpread = 1,  // as many nodes as possible, round-robin
};

// "PACK", "SPREAD".
const char* PlacementStrategyName(PlacementStrategy strategy);

// What to run: a gang of `nproc` processes of `command`. Submit checks it and refuses
// (INVALID_ARGUMENT) a spec that could never run.
struct JobSpec {
  std::string name;                          // for display; need not be unique
  std::vector<std::string> command;          // argv; argv[0] is looked up in PATH
  std::map<std::string, std::string> env;    // extra environment of every process
  std::string cwd;                           // on the nodes; empty: the agent's
  int nproc = 1;                             // processes in the gang, >= 1
  int nproc_per_node = 0;                    // > 0: exactly this many on each node
  Resources per_process = {1, 0, 0, {}};     // each process's needs (default 1 CPU)
  PlacementStrategy strategy = PlacementStrategy::kPack;
  int max_restarts = 0;                      // whole-gang restarts after a failure
  // Each generation running longer than this is stopped and the job FAILS (exit code
  // 124, no restart). Zero: no limit. Kept in whole milliseconds (a positive value
  // below 1 ms counts as 1 ms).
  absl::Duration time_limit = absl::ZeroDuration();
  // Makes Submit safe to retry: a second submit with the same key returns the first
  // job. Empty: Submit makes a fresh key for each call.
  std::string idempotency_key;
};

enum class JobState {
  kPending = 0,    // waiting to be placed (JobInfo::reason says why)
  kRunning = 1,    // placed; processes of the current generation start or run
  kSucceeded = 2,  // every process exited with code 0
  kFailed = 3,     // a process failed (or its node died) and no restarts were left
  kCancelled = 4,  // cancelled by a user
};

// "PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED" (as the CLI prints them).
const char* JobStateName(JobState state);
// True for SUCCEEDED, FAILED and CANCELLED: the job will not run again. Its processes
// may still be stopping (JobInfo::live_processes).
bool IsTerminal(JobState state);

// Where one rank of the current generation runs.
struct RankPlacement {
  int rank = 0;              // RANK
  std::string node_id;
  std::string node_ip;       // the node's address for other nodes (MASTER_ADDR for rank 0)
  int local_rank = 0;        // LOCAL_RANK
  int group_rank = 0;        // the node's index within the job (GROUP_RANK)
  std::vector<int> gpu_ids;  // CUDA_VISIBLE_DEVICES, in order
};

// How one process ended.
struct ExitInfo {
  int rank = 0;
  std::string node_id;
  int exit_code = 0;        // -1 if killed by a signal or never started
  int signal = 0;           // the signal that killed it, else 0
  std::string stderr_tail;  // the last lines it wrote to stderr (a few KiB at most)
  std::string error;        // set when it could not start or its node was lost
  int generation = 0;       // the restart generation it belonged to
  // The placement of that generation it belonged to (JobInfo::placement_epoch; 0 when
  // unknown).
  int64_t placement_epoch = 0;
};

// The cluster's record of a job.
struct JobInfo {
  std::string job_id;  // "job-N"
  JobSpec spec;        // as submitted
  JobState state = JobState::kPending;
  std::string reason;  // why it is in this state, in words a user can act on
  absl::Time submit_time = absl::UnixEpoch();
  std::optional<absl::Time> start_time;        // first placement
  std::optional<absl::Time> end_time;          // reaching a terminal state
  std::optional<absl::Time> generation_start;  // placement of the current generation
  int restart_count = 0;                       // gang restarts so far
  std::vector<RankPlacement> placement;        // current generation; empty while PENDING
  std::string master_addr;                     // MASTER_ADDR of the current generation
  int master_port = 0;                         // MASTER_PORT; 0 until known
  // The first failure of the current generation (the cause of FAILED); cleared when
  // the gang is placed again.
  std::optional<ExitInfo> root_cause;
  std::vector<int> succeeded_ranks;  // ranks of the generation that exited with 0
  std::vector<int> exited_ranks;     // ranks of the generation whose exit is recorded
  int live_processes = 0;            // processes of the generation still alive
  int started_processes = 0;         // processes of the generation spawned so far
  // Which placement of the generation this is: new each time the job is placed, a
  // placement made again after a scheduler restart included (0: a record from before
  // epochs). Processes of another placement are stopped, never counted.
  int64_t placement_epoch = 0;
  // Nodes whose start of this placement was answered, in the order the answers came.
  std::vector<std::string> started_nodes;
  bool restarting = false;           // the gang is being stopped before a restart
  int64_t version = 0;               // moves on every change (Client::GetJob can wait)
  // What `drover run` returns: 0 on success, the root cause's code (128 + signal for
  // signals) on failure, 130 when cancelled.
  int exit_code = 0;
  // Every node that ran a process of any generation, in first-use order: output stays
  // on the node that wrote it, so logs are read from all of them.
  std::vector<std::string> nodes_used;
  // A driver: a program that submits tasks and actors outside any job (drover::Init in a
  // plain program). It has no processes of its own and runs while the program does.
  bool driver = false;
};

enum class NodeState {
  kAlive = 0,         // registered and heartbeating
  kDead = 1,          // silent past the timeout; its work was failed or restarted
  kReconnecting = 2,  // known from a persisted job, not yet back after a scheduler restart
};

// "ALIVE", "DEAD", "RECONNECTING".
const char* NodeStateName(NodeState state);

// A node's object store, as its agent last reported it (with each heartbeat).
struct ObjectStoreUsage {
  int64_t capacity_bytes = 0;   // shared memory it has
  int64_t used_bytes = 0;       // of which objects (sealed, being written, leased) hold
  int64_t objects = 0;          // objects in memory
  int64_t spilled_objects = 0;  // objects spilled to disk, and their bytes
  int64_t spilled_bytes = 0;
  int64_t evictions = 0;        // secondary copies evicted for room since it started
  int64_t restarts = 0;         // times it died and was restarted (losing its objects)
  absl::Time last_restart = absl::InfinitePast();  // when it last died (if it did)
};

// The scheduler's view of a node.
struct NodeInfo {
  std::string node_id;        // "node-N", kept by the agent across re-registrations
  std::string agent_address;  // host:port of its agent (Client::StreamLogs)
  std::string node_ip;        // how other nodes reach its processes
  std::string hostname;
  NodeState state = NodeState::kAlive;
  Resources total;            // everything it offers
  Resources free;             // total minus what running jobs hold
  std::vector<int> free_gpu_ids;
  absl::Time last_heartbeat = absl::UnixEpoch();
  std::vector<std::string> warnings;   // problems found at start (small /dev/shm, ...)
  std::vector<std::string> gpu_names;  // model names, or "declared" (--num-gpus)
  std::string reason;                  // why it is DEAD, if it is
  // host:port of its agent's /metrics (Prometheus, with the cluster token); empty if
  // it serves none.
  std::string metrics_address;
  std::optional<ObjectStoreUsage> object_store;  // absent: it runs none
};

// The whole cluster at one moment.
struct ClusterStatus {
  std::vector<NodeInfo> nodes;          // every node known, in registration order
  std::map<JobState, int> job_counts;   // jobs by state (states with none may be absent)
  std::string state_backend;            // "memory" or "redis HOST:PORT"
  std::string address;                  // the scheduler's address
  // host:port of the scheduler's /metrics and dashboard; empty if it serves none.
  std::string metrics_address;
};

// What a TimelineEvent says happened.
enum class TimelineEventKind {
  kSubmitted = 0,      // the job was submitted (a driver: registered)
  kPlaced = 1,         // a generation was placed: `ranks` on `node_id`
  kRanksStarted = 2,   // node_id's agent started its `ranks`
  kRankExited = 3,     // one rank ended (`exit`)
  kRestarting = 4,     // a rank failed; the gang is stopped for a restart (`detail`)
  kEnded = 5,          // the job ended in `state` (`detail`: its reason)
  kLeaseGranted = 6,   // a worker lease on node_id (lease_id, worker_id, actor_id)
  kLeaseReturned = 7,  // a lease ended (`detail`: why)
  kActor = 8,          // an actor changed to `state` ("ACTOR_ALIVE", ...)
  kWorkerExited = 9,   // a task worker exited (`exit`)
  kRequeued = 10,      // the failed generation is stopped; the next waits to be placed
  // Spans reported by the processes that saw them (time .. time + duration):
  kTask = 11,        // a task or actor call (`name`, actor_id) ran on worker_id, node_id
  kPull = 12,        // node_id pulled object_id (`bytes`) from source_node_id
  kCollective = 13,  // a collective operation (`name`, `bytes`) of rank ranks[0]
};

// One thing that happened to a job, as the scheduler saw it.
struct TimelineEvent {
  absl::Time time = absl::UnixEpoch();  // microsecond precision, the scheduler's clock
  TimelineEventKind kind = TimelineEventKind::kSubmitted;
  int generation = 0;
  std::string node_id;
  std::vector<int> ranks;
  std::string detail;
  std::optional<ExitInfo> exit;
  std::string lease_id, actor_id, worker_id;
  std::string state;  // kEnded: a JobState name; kActor: an actor state name
  // kTask, kPull, kCollective:
  absl::Duration duration;
  std::string name;            // kTask: the function or method; kCollective: the operation
  int64_t bytes = 0;           // kPull: the bytes pulled; kCollective: this rank's buffer
  std::string source_node_id;  // kPull: the node the bytes came from
  std::string object_id;       // kPull
  bool failed = false;         // `detail` says how
};

// A job's events, oldest first (the scheduler keeps a bounded number per job).
struct JobTimeline {
  std::vector<TimelineEvent> events;
  int64_t dropped = 0;           // older events no longer kept
  int64_t activity_dropped = 0;  // reported events (kTask, kPull, kCollective) not kept
};

// A one-time link into the dashboard.
struct DashboardLogin {
  std::string url;       // open once, before `expires`
  absl::Time expires = absl::UnixEpoch();
};

// Which output stream of a process.
enum class LogStream {
  kStdout = 1,
  kStderr = 2,
};

// Where to resume one stream of one rank: bytes of it already received.
struct LogOffset {
  int rank = 0;
  LogStream stream = LogStream::kStdout;
  int64_t offset = 0;
};

// A piece of one process's output, as written (not split into lines).
struct LogChunk {
  int rank = 0;
  LogStream stream = LogStream::kStdout;
  int64_t offset = 0;  // of data[0] within the stream
  std::string data;    // up to 1 MiB
};

}  // namespace drover

#endif  // DROVER_SDK_INCLUDE_DROVER_TYPES_H_
