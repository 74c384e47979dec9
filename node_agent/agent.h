// NodeAgent: one per machine. Wires resource discovery, the ProcessManager, the
// NodeAgent gRPC server and the scheduler client together.
//
// Threads (all started by Start, all stopped by Shutdown):
//   - the ProcessManager thread (every spawn, reap and kill);
//   - gRPC's server threads (AgentService handlers);
//   - the registration loop: RegisterNode (retried with backoff forever while the
//     scheduler is down), then Heartbeat every interval with the process table,
//     re-registering with the same node id when the scheduler no longer knows us;
//   - the reporter: sends ReportExit for every reaped process as soon as it happens
//     (if that fails, the next heartbeat carries the same facts).
// Public methods are thread-safe.
#ifndef DROVER_NODE_AGENT_AGENT_H_
#define DROVER_NODE_AGENT_AGENT_H_

#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/server.h"
#include "node_agent/agent_service.h"
#include "node_agent/local_objects.h"
#include "node_agent/object_transfer.h"
#include "node_agent/object_transfer_service.h"
#include "node_agent/process_manager.h"
#include "node_agent/resources.h"
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
  // State directory; logs go to <dir>/logs. Created if missing.
  std::string dir;
  absl::Duration kill_grace = absl::Seconds(5);
  // Written atomically after the first successful registration:
  // {"node_id":"...","address":"ip:port","pid":N}
  std::string ready_file;
  // drover-launch; empty = found next to this binary (FindDroverBinary).
  std::string launcher_path;
  // This node's object store, for cross-node transfer (ReadObject / FetchObject).
  // Not owned; must outlive the agent. Null: the node runs no object store and those
  // rpcs answer FAILED_PRECONDITION.
  LocalObjects* local_objects = nullptr;
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

 private:
  void RegistrationLoop();
  void ReporterLoop();
  // Sleeps up to `d`; returns true if shutting down.
  bool SleepOrStop(absl::Duration d);
  bool Register(proto::Scheduler::Stub* stub, bool* logged_failure);
  void OnExit(const std::string& job_id, const proto::ExitInfo& info);
  void WriteReadyFile();

  AgentOptions options_;
  NodeResources resources_;
  std::string address_;
  std::string hostname_;
  std::unique_ptr<ProcessManager> pm_;
  std::unique_ptr<AgentService> service_;
  // Null when options_.local_objects is null. Declared before server_ so that the
  // server (whose handlers use them) goes first.
  std::unique_ptr<ObjectTransfer> transfer_;
  std::unique_ptr<ObjectTransferService> object_service_;
  std::unique_ptr<grpc::Server> server_;
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

// The default state directory: $DROVER_HOME or ~/.drover, then /agent-<pid>.
std::string DefaultAgentDir();

}  // namespace drover

#endif  // DROVER_NODE_AGENT_AGENT_H_
