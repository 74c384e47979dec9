// NodeAgent: one per machine. Wires resource discovery, the ProcessManager, the
// NodeAgent gRPC server and the scheduler client together.
//
// Threads (all started by Start, all stopped by Shutdown):
//   - the ProcessManager thread (every spawn, reap and kill);
//   - gRPC's server threads (AgentService handlers);
//   - the registration loop: RegisterNode (retried with backoff forever while the
//     scheduler is down), then Heartbeat every interval with the process table,
//     re-registering with the same node id when the scheduler no longer knows us;
//   - with the object store enabled: the store supervisor (store_supervisor.h) and the
//     object reporter (object_reporter.h), each one thread;
//   - the reporter: sends ReportExit for every reaped process as soon as it happens,
//     the exits that came while a call was out together in the next one (if that
//     fails, the next heartbeat carries the same facts);
//   - the HTTP server (common/http_server.h): Prometheus' /metrics (agent_metrics.h),
//     behind the cluster token, on its own port (--metrics-port);
//   - the session (scheduler_session.h): holds Scheduler.AgentSession open, opened
//     anew after each registration, so the scheduler notices this agent's death at
//     once. The ready file is written once the first session is open;
//   - the timeline reporter (common/timeline_reporter.h): object pulls, told to the
//     timeline of the job they were made for, in batches.
// Public methods are thread-safe.
#ifndef DROVER_NODE_AGENT_AGENT_H_
#define DROVER_NODE_AGENT_AGENT_H_

#include <sys/types.h>

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "grpcpp/server.h"
#include "common/http_server.h"
#include "common/timeline_reporter.h"
#include "node_agent/agent_metrics.h"
#include "node_agent/agent_service.h"
#include "node_agent/local_objects.h"
#include "node_agent/object_transfer.h"
#include "node_agent/object_reporter.h"
#include "node_agent/object_transfer_service.h"
#include "node_agent/package_cache.h"
#include "node_agent/worker_pool.h"
#include "node_agent/workers_service.h"
#include "common/thread_pool.h"
#include "node_agent/process_manager.h"
#include "node_agent/resources.h"
#include "node_agent/scheduler_session.h"
#include "node_agent/store_local_objects.h"
#include "node_agent/store_supervisor.h"
#include "proto/scheduler.grpc.pb.h"

namespace drover {

struct AgentOptions {
  // host:port of the scheduler.
  std::string scheduler_address;
  // The cluster token, and the file it came from (exported as DROVER_TOKEN_FILE).
  std::string token;
  std::string token_file;
  // Address the gRPC server binds; empty = the local address used to reach the
  // scheduler (so inside a network namespace it is the namespace's address).
  std::string bind_ip;
  // 0 = any free port.
  int port = 0;
  // Address other nodes reach this one at (MASTER_ADDR); empty = the bind ip (or,
  // when binding a wildcard address, the address used to reach the scheduler).
  std::string node_ip;
  ResourceOverrides resources;
  DiscoveryPaths discovery;
  // State directory; logs go to <dir>/logs. Created if missing. The node id the agent
  // registered as is kept in <dir>/node-id: an agent started again on the same
  // directory (after a crash or a kill) asks for the same id, so it is the same node
  // and the output its jobs wrote there stays reachable (`drover logs`).
  std::string dir;
  absl::Duration kill_grace = absl::Seconds(5);
  // Logs of jobs with nothing running here, untouched for this long, are deleted
  // (checked at start and hourly). Zero: keep them forever.
  absl::Duration log_retention = absl::Hours(24 * 7);
  // Written atomically after the first successful registration, once the first
  // session with the scheduler is open (or the scheduler offers none):
  // {"node_id":"...","address":"ip:port","pid":N}
  std::string ready_file;
  // drover-launch; empty = found next to this binary (FindDroverBinary).
  std::string launcher_path;
  // This node's object store, for cross-node transfer (ReadObject / FetchObject).
  // Not owned; must outlive the agent. Null: the node runs no object store and those
  // rpcs answer FAILED_PRECONDITION.
  LocalObjects* local_objects = nullptr;
  // Host this node's object store: run drover-object-store (supervised, restarted if
  // it dies, stopped with the agent) on <dir>/store.sock (or /tmp/drover-<uid>/ when
  // that path is too long for a socket), serve and fetch objects through it (unless
  // local_objects is set), keep the scheduler's object directory current, and give
  // workers DROVER_OBJECT_STORE_SOCKET.
  bool object_store = false;
  // Arena bytes; 0 lets the store choose (a share of RAM capped by /dev/shm).
  uint64_t object_store_memory = 0;
  // drover-object-store; empty = found next to this binary (FindDroverBinary).
  std::string object_store_binary;
  // Port of the HTTP server for /metrics (on the bind address): 0 picks a free one,
  // -1 serves none. Its address goes to the scheduler with the registration.
  int metrics_port = 0;
  // Task workers idle this long are stopped.
  absl::Duration worker_idle_timeout = absl::Seconds(60);
  // TLS: the cluster CA's certificate (a copy of the head's tls/ca.crt). At start the
  // agent gets a certificate of its own from the head (tls_bootstrap.h, into <dir>/tls)
  // and from then on this process (every channel, its server, raw transfers) and the
  // workers it starts (DROVER_TLS_*) use TLS. Empty: plain text.
  std::string tls_ca;
  // Time for the agent's own timers: the heartbeat interval, the registration back-off,
  // log pruning and WaitRegistered. Not owned; must outlive the agent.
  Clock* clock = Clock::Real();
};

class NodeAgent {
 public:
  explicit NodeAgent(AgentOptions options);
  // Calls Shutdown() if it was not called.
  ~NodeAgent();
  NodeAgent(const NodeAgent&) = delete;
  NodeAgent& operator=(const NodeAgent&) = delete;

  // Discovers resources, starts the process manager, the gRPC server and the
  // registration loop. Returns once the server listens (registration continues in the
  // background). REQUIRES: called once.
  absl::Status Start();

  // Stops every worker (SIGTERM, SIGKILL after the kill grace) and waits for them,
  // stops the loops and the server. Idempotent.
  void Shutdown();

  // ip:port the NodeAgent service is reachable at (valid after Start).
  std::string address() const { return address_; }
  // The id the scheduler gave; empty until the first registration.
  std::string node_id();
  // Waits until registered at least once, or `timeout`.
  bool WaitRegistered(absl::Duration timeout);
  ProcessManager* process_manager() { return pm_.get(); }
  // The object store's socket; empty without one. Valid after Start.
  std::string object_store_socket() const;
  // The hosted store's pid (0 if none runs now).
  pid_t object_store_pid() const;
  // host:port of /metrics; empty without it. Valid after Start.
  std::string metrics_address() const { return metrics_address_; }

 private:
  void RegistrationLoop();
  void ReporterLoop();
  // Sleeps until `deadline` on options_.clock; returns true if shutting down.
  bool SleepUntilOrStop(absl::Time deadline);
  bool Register(proto::Scheduler::Stub* stub, bool* logged_failure);
  void OnExit(const std::string& job_id, const proto::ExitInfo& info);
  // Tells the pull's job's timeline (transfer_'s on_pull).
  void OnPull(const PullRecord& pull);
  // The gang processes (not task workers) for registration and heartbeats.
  std::vector<proto::ProcessStatus> GangSnapshot();
  // A job's end may never have reached this node (the scheduler restarted and did not
  // know of its workers here, or this node was cut off): stops the task workers of
  // those of `jobs` the scheduler says have ended (or no longer knows). Run by
  // CheckWorkersOfEndedJobs after a registration the scheduler asked for and every
  // kWorkerCheck.
  void StopWorkersOfEndedJobs(const std::set<std::string>& jobs);
  // Queues one StopWorkersOfEndedJobs for every job with a live worker here (the
  // pool's, and any worker process still running, even one the pool already let go),
  // on its own thread, unless one is queued already: checks never pile up behind an
  // unreachable scheduler, nor behind the exit reports.
  void CheckWorkersOfEndedJobs();
  absl::Status StartWorkerPool();
  void WriteReadyFile();
  absl::Status StartObjectStore();
  absl::Status StartMetrics();
  // With options_.tls_ca: the node's certificate, made the process's transport.
  absl::Status StartTls();

  AgentOptions options_;
  NodeResources resources_;
  std::string address_;
  std::string hostname_;
  // <dir>/node-id as found at start: the id asked for until a registration succeeds.
  std::string remembered_node_id_;
  // Before pm_: its exit callback counts here.
  std::unique_ptr<AgentMetrics> metrics_;
  std::string metrics_address_;
  std::unique_ptr<ProcessManager> pm_;
  // Before transfer_, whose pulls it hears of (so it goes after it).
  std::unique_ptr<TimelineReporter> timeline_;
  std::unique_ptr<AgentService> service_;
  // With options_.object_store. Declared before transfer_, which uses store_objects_.
  std::unique_ptr<StoreSupervisor> store_;
  std::unique_ptr<StoreLocalObjects> store_objects_;
  std::unique_ptr<ObjectReporter> object_reporter_;
  // Null when options_.local_objects is null. Declared before server_ so that the
  // server (whose handlers use them) goes first.
  std::unique_ptr<ObjectTransfer> transfer_;
  std::unique_ptr<ObjectTransferService> object_service_;
  // Task workers (worker_pool.h) and the programs they run.
  std::unique_ptr<PackageCache> packages_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<WorkersService> workers_service_;
  // Tells the scheduler of returned leases and exited workers, in order.
  std::unique_ptr<ThreadPool> task_reports_;
  // Runs CheckWorkersOfEndedJobs' checks; `worker_check_queued_` while one waits.
  std::unique_ptr<ThreadPool> worker_checks_;
  std::atomic<bool> worker_check_queued_{false};
  std::unique_ptr<grpc::Server> server_;
  // After everything its scrapes read, so it stops first.
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<SchedulerSession> session_;
  std::thread registration_thread_;
  std::thread reporter_thread_;
  bool started_ = false;

  absl::Mutex mu_;
  absl::CondVar cv_;  // stop_, registered changes, report queue
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  std::string node_id_ ABSL_GUARDED_BY(mu_);
  int64_t heartbeat_interval_ms_ ABSL_GUARDED_BY(mu_) = 1000;
  std::deque<std::pair<std::string, proto::ExitInfo>> reports_ ABSL_GUARDED_BY(mu_);
};

// One ReportExit carrying `items` (job id, exit) of node `node_id`, in order: the first
// in ReportExitRequest.job_id/exit (where a scheduler without `exits` reads it), the
// others in `exits`.
proto::ReportExitRequest ExitReportOf(const std::string& node_id,
                                      std::deque<std::pair<std::string, proto::ExitInfo>> items);

// The default state directory: $DROVER_HOME or ~/.drover, then /agent-<pid>.
std::string DefaultAgentDir();

}  // namespace drover

#endif  // DROVER_NODE_AGENT_AGENT_H_
