// LeaseManager: the scheduler's book of task workers: worker leases, actors and driver
// jobs' task resources (proto/lease.proto, service Leases).
//
// The scheduler is not on the per-task path: an owner asks for a worker of a resource
// shape (RequestLease), the resources are reserved on a node through the ResourceBook
// (the scheduler's node table, the same one jobs are placed against, so a GPU is never
// given twice), the node's agent gives a worker (warm or new), and the owner pushes its
// tasks straight to it. The lease ends when the owner disconnects from the worker (the
// agent reports it), when the worker dies, or when the job ends.
//
// Actors are leases for life, kept here with their records: created by placing a lease
// whose worker runs the actor's factory; restarted on another lease after their worker
// dies (max_restarts); dead when killed, when their job ends or when restarts run out,
// with the reason every caller gets.
//
// Threading: one mutex guards leases, requests and actors. Calls to agents (StartWorker,
// KillWorker, StopJob) are made without it, from the calling RPC thread or a small
// pool. Lock order: this mutex before the ResourceBook's. Thread-safe.
#ifndef DROVER_SCHEDULER_LEASE_MANAGER_H_
#define DROVER_SCHEDULER_LEASE_MANAGER_H_

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/thread_group.h"
#include "common/thread_pool.h"
#include "proto/lease.grpc.pb.h"
#include "scheduler/job_timeline.h"

namespace drover {

// What the lease manager needs of the scheduler's node table and jobs.
class ResourceBook {
 public:
  struct Grant {
    std::string node_id;
    std::string agent_address;
    proto::Resources shape;
    std::vector<int> gpu_ids;
  };
  virtual ~ResourceBook() = default;
  // Reserves `shape` on one ALIVE node chosen by `hint` (affinity, locality, spread).
  // nullopt with `*reason` if nothing fits now; FAILED_PRECONDITION if no node could
  // ever hold it (with the reason).
  virtual absl::StatusOr<std::optional<Grant>> Reserve(const proto::Resources& shape,
                                                      const proto::PlacementHint& hint,
                                                      std::string* reason) = 0;
  // Gives back what Reserve took (no-op for a node that is gone).
  virtual void Release(const Grant& grant) = 0;
  // OK while the job exists and has not ended; else why.
  virtual absl::Status CheckJobRunning(const std::string& job_id) = 0;
  // Agent addresses of every ALIVE node.
  virtual std::vector<std::string> AliveAgents() = 0;
  // The scheduler's address, for workers.
  virtual std::string SchedulerAddress() = 0;
};

// Calls from the scheduler to agents' Workers service (an interface for tests).
class WorkerClient {
 public:
  virtual ~WorkerClient() = default;
  virtual absl::StatusOr<proto::StartWorkerReply> StartWorker(const std::string& agent,
                                                              const proto::StartWorkerRequest& req) = 0;
  virtual absl::Status KillWorker(const std::string& agent, const proto::KillWorkerRequest& req) = 0;
  // Stops every process of the job on that node (its warm workers included).
  virtual absl::Status StopJob(const std::string& agent, const std::string& job_id) = 0;
  // Deletes objects from that node's store.
  virtual absl::Status DeleteObjects(const std::string& agent, const std::vector<std::string>& ids) = 0;
};

std::unique_ptr<WorkerClient> NewGrpcWorkerClient(const std::string& token);

class LeaseManager {
 public:
  // `book` must outlive this. `clock` defaults to the real one.
  LeaseManager(ResourceBook* book, std::unique_ptr<WorkerClient> workers, Clock* clock = nullptr);
  ~LeaseManager();
  LeaseManager(const LeaseManager&) = delete;
  LeaseManager& operator=(const LeaseManager&) = delete;

  // Blocks up to req.wait_ms() for a worker (see proto/lease.proto).
  absl::StatusOr<proto::RequestLeaseReply> RequestLease(const proto::RequestLeaseRequest& req);
  void ReturnLease(const std::string& lease_id, const std::string& reason);
  void WorkerExited(const proto::ReportWorkerExitRequest& req);

  absl::StatusOr<proto::ActorInfo> CreateActor(const proto::CreateActorRequest& req);
  // Waits up to req.wait_ms() for a version after req.after_version() (or, by name,
  // for the actor to exist). NOT_FOUND for an unknown id or name.
  absl::StatusOr<proto::ActorInfo> GetActor(const proto::GetActorRequest& req);
  absl::Status KillActor(const std::string& actor_id, const std::string& reason);

  // Hooks from the scheduler's core, called without its lock.
  void ResourcesFreed();
  void NodeDead(const std::string& node_id, const std::string& reason);
  // The job ended: its actors die, its leases end, its workers stop on every node, and
  // its objects (ids "<job>.", as the SDK makes them; `objects` by the agent address
  // of the node holding them) are deleted from every store.
  void JobEnded(const std::string& job_id,
                std::map<std::string, std::vector<std::string>> objects);

  // Counts for status, metrics and tests: leases held now, requests waiting for one,
  // actors by state (pending counts restarting ones too), leases granted and ended
  // since start.
  struct Counts {
    int leases = 0, pending_requests = 0, actors_alive = 0, actors_pending = 0;
    int actors_restarting = 0, actors_dead = 0;
    int64_t leases_granted = 0, leases_ended = 0;
  };
  Counts counts();

  // For the dashboard: the leases held now and the actors (newest `limit` of each by id
  // order; 0: all), copied under the lock.
  struct LeaseView {
    std::string lease_id, job_id, owner, node_id, worker_id, actor_id;
  };
  std::vector<LeaseView> Leases(size_t limit);
  std::vector<proto::ActorInfo> Actors(size_t limit);

  // Tells `timeline` of leases granted and ended, actors' state changes and workers'
  // exits (job_timeline.h). Not owned. REQUIRES: before serving.
  void SetTimeline(JobTimeline* timeline) { timeline_ = timeline; }
  void Stop();

 private:
  struct Lease {
    std::string id;
    std::string job_id;
    std::string owner;
    ResourceBook::Grant grant;
    std::string worker_id;
    std::string unix_path;    // where its worker listens
    std::string tcp_address;
    std::string actor_id;  // set for an actor's lease
    bool started = false;
  };
  struct Request {
    std::string lease_id;                // once granted
    absl::Time expires;                  // forgotten after this without a retry
    std::optional<proto::RequestLeaseReply> reply;
    bool starting = false;               // StartWorker in progress
  };
  struct Actor {
    proto::ActorInfo info;
    proto::CreateActorRequest create;    // to make it again
    std::string lease_id;
    bool killed = false;
    int told_state = -1;                 // the state the timeline last heard of
  };

  // Reserves and starts a worker for `job`; returns the lease or why not.
  absl::StatusOr<Lease> Grant(const proto::Resources& shape, const proto::PlacementHint& hint,
                              const std::string& job_id, const std::string& owner,
                              const proto::PackageRef& package, const proto::ActorCreation* actor,
                              std::string* pending_reason, bool* retry);
  // Ends a lease; `why` goes to the timeline.
  void ReleaseLocked(const std::string& lease_id, const std::string& why = "")
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells timeline_ (if set) of `e` about `job_id`.
  void NoteLocked(const std::string& job_id, proto::TimelineEvent e)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PlaceActor(const std::string& actor_id);
  // Runs PlaceActor on a thread of its own (it may wait long for resources).
  void StartPlacing(const std::string& actor_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ActorLost(Actor& a, const std::string& why, const proto::ExitInfo* exit)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ChangedLocked(Actor& a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Actor* FindActorLocked(const std::string& id, const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ResourceBook* const book_;
  std::unique_ptr<WorkerClient> workers_;
  Clock* const clock_;
  ThreadPool background_{4};
  ThreadGroup placing_;  // PlaceActor threads (each may wait long for resources)

  absl::Mutex mu_;
  absl::CondVar freed_;    // resources freed, leases returned
  absl::CondVar changed_;  // an actor's record changed
  absl::CondVar stop_cv_;  // Stop (back-offs wait on it)
  std::map<std::string, Lease> leases_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Request> requests_ ABSL_GUARDED_BY(mu_);
  // (expires, request id) of each RequestLease call, in call order: when to forget
  // requests_ without a scan of them all per call.
  std::deque<std::pair<absl::Time, std::string>> expiry_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Actor> actors_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> names_ ABSL_GUARDED_BY(mu_);  // live actor name -> id
  std::set<std::string> jobs_with_workers_ ABSL_GUARDED_BY(mu_);
  int64_t next_lease_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t leases_granted_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t leases_ended_ ABSL_GUARDED_BY(mu_) = 0;
  JobTimeline* timeline_ = nullptr;
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;

};

}  // namespace drover

#endif  // DROVER_SCHEDULER_LEASE_MANAGER_H_
