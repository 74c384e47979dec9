// WorkerPool: this node's task workers: processes of a job's own binary in worker
// mode, given to leases (and actors) and kept warm between them.
//
// A worker is started through the ProcessManager like any process (posix_spawn of
// drover-launch, its own process group, GPUs pinned with CUDA_VISIBLE_DEVICES for life,
// output to <logs>/<job>/worker<N>.{out,err}), as a one-process "generation" numbered
// from kFirstWorkerGeneration so that gang restarts never touch it and the scheduler's
// view of the job's ranks never includes it. It connects back to the pool's control
// socket (<dir>/workers.sock, 0600) and keeps that connection for life.
//
// Warm pool: when a lease's holder disconnects, the worker says so and becomes idle;
// the next lease of the same job, package and shape (CPUs, memory, custom resources and
// the exact GPU ids) gets it without starting a process. Idle workers are stopped after
// `idle_timeout`, and every worker of a job when the job ends.
//
// Threading: one thread serves the control socket (poll over every worker's
// connection) and stops idle workers. StartWorker blocks its caller (a gRPC handler)
// until the worker is ready. Thread-safe.
#ifndef DROVER_NODE_AGENT_WORKER_POOL_H_
#define DROVER_NODE_AGENT_WORKER_POOL_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/framed_socket.h"
#include "node_agent/package_cache.h"
#include "node_agent/process_manager.h"
#include "proto/lease.pb.h"
#include "proto/scheduler.pb.h"
#include "proto/task.pb.h"

namespace drover {

struct WorkerPoolOptions {
  // The agent's state directory: the control socket, the workers' sockets and the
  // package cache live under it.
  std::string dir;
  // Where workers listen for owners on other nodes.
  std::string node_ip;
  std::string token;
  std::string scheduler_address;
  // Idle workers are stopped after this long.
  absl::Duration idle_timeout = absl::Seconds(60);
  // A worker that has not registered by then is stopped and the start fails.
  absl::Duration start_timeout = absl::Seconds(60);
  absl::Duration kill_grace = absl::Seconds(3);
};

class WorkerPool {
 public:
  // Told (without locks held) when a lease ended because its holder disconnected, and
  // when a worker exited (with the lease and actor it served).
  struct Callbacks {
    std::function<void(const std::string& lease_id, const std::string& reason)> lease_returned;
    std::function<void(const std::string& worker_id, const std::string& lease_id,
                       const std::string& actor_id, const proto::ExitInfo& exit)>
        worker_exited;
  };

  WorkerPool(WorkerPoolOptions options, ProcessManager* pm, PackageCache* packages,
             Callbacks callbacks);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Listens on the control socket and starts the serving thread.
  absl::Status Start();
  void Shutdown();

  absl::StatusOr<proto::StartWorkerReply> StartWorker(const proto::StartWorkerRequest& req);
  absl::Status KillWorker(const proto::KillWorkerRequest& req);
  // Tells the worker serving `lease_id` that the scheduler wants the lease back (the
  // worker tells its holder). OK, doing nothing, if no worker here serves it.
  absl::Status RevokeLease(const std::string& lease_id, const std::string& reason);
  absl::StatusOr<proto::WaitWorkerExitReply> WaitWorkerExit(const std::string& worker_id,
                                                           absl::Duration wait);
  // From the agent's exit callback, for processes of worker generations.
  void OnProcessExit(const std::string& job_id, const proto::ExitInfo& exit);
  // The job ended: its workers are being stopped; forget them once reaped.
  void JobEnded(const std::string& job_id);

  // For tests, status and metrics: workers by state now, and how many leases got an
  // idle worker of the warm pool since start (no process started).
  struct Counts {
    int starting = 0, idle = 0, leased = 0, actors = 0;
    int64_t reused = 0;
  };
  Counts counts();
  // The leases (and actors' leases) workers serve now, for the agent's registration;
  // idle and starting workers with an empty lease id (their job and worker id).
  std::vector<proto::HeldLease> HeldLeases();
  // Jobs that have live workers here (the agent asks the scheduler whether they ended).
  std::set<std::string> JobsWithWorkers();
  static bool IsWorkerGeneration(int generation) { return generation >= kFirstWorkerGeneration; }
  static constexpr int kFirstWorkerGeneration = 1 << 30;

 private:
  enum class State { kStarting, kIdle, kLeased, kActor, kDead };
  struct Worker {
    std::string id;
    std::string job_id;
    std::string key;  // job, package, shape, GPUs: what makes workers interchangeable
    int generation = 0;
    State state = State::kStarting;
    std::string lease_id;
    std::string actor_id;
    // The lease's holder, shape and GPUs (HeldLeases).
    std::string owner;
    proto::Resources shape;
    std::vector<int> gpu_ids;
    int pid = 0;
    std::string unix_path;
    int tcp_port = 0;
    int control_fd = -1;
    FrameReader reader;
    std::string start_error;
    // The actor factory's answer, once it came.
    std::optional<absl::Status> actor_created;
    absl::Time idle_since;
    std::optional<proto::ExitInfo> exit;
  };

  void Loop();
  void OnControlFrame(Worker* w, int fd, std::string_view payload) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status SendControl(Worker& w, const proto::WorkerControl& msg) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Worker*> Spawn(const proto::StartWorkerRequest& req, const std::string& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits (with mu_ released while waiting) until `pred` or the deadline.
  template <typename Pred>
  bool AwaitLocked(absl::Time deadline, Pred pred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  proto::StartWorkerReply ReplyFor(const Worker& w) const;
  void Stop(Worker& w, const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const WorkerPoolOptions options_;
  ProcessManager* const pm_;
  PackageCache* const packages_;
  const Callbacks callbacks_;
  std::string control_path_;
  std::string socket_dir_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;

  absl::Mutex mu_;
  absl::CondVar changed_;
  std::map<std::string, std::unique_ptr<Worker>> workers_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::string> by_fd_ ABSL_GUARDED_BY(mu_);  // control fd -> worker id
  std::map<int, FrameReader> unregistered_ ABSL_GUARDED_BY(mu_);  // fds before their Register
  std::map<std::string, std::string> leases_ ABSL_GUARDED_BY(mu_);  // lease id -> worker id
  // Leases whose holder disconnected, to report (by the loop thread, unlocked).
  std::vector<std::pair<std::string, std::string>> returned_ ABSL_GUARDED_BY(mu_);
  int next_worker_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t reused_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace drover

#endif  // DROVER_NODE_AGENT_WORKER_POOL_H_
