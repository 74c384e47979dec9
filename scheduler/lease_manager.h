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
// Requests that do not fit wait in a queue (lease_queue.h: FIFO per shape, a grant pass
// serves the oldest that fit), not in threads: a call that waits for its grant is a
// callback (`done`) kept with its request, answered by that request's grant, by its
// deadline (pending, with why) or when its job ends (dropped, with why). A returned
// lease or freed node runs one pass, which costs the shapes waiting plus the grants,
// never the requests waiting. A request whose caller stopped asking (wait_ms passed
// twice without a retry, as proto/lease.proto says) is forgotten when its turn comes,
// not granted. Workers start on a small pool (`start_threads`); a
// request granted while nobody waits keeps its answer until its owner asks again
// (a lease nobody comes for within `request_memory` is returned).
//
// A pending job's claim (queue_policy.h: the oldest pending job that does not fit claims
// what it will need) holds against leases as against later jobs: the ResourceBook
// places new leases only beside it, and task leases already on the claimed resources are
// revoked (Workers.RevokeLease: their holders send no more tasks on them and hand them
// back once the tasks sent have finished), as many as the claim lacks on each node.
// Actors' leases are not revoked (an actor holds its worker for life). Checked when the
// claim appears (ClaimChanged) and every second while it stands (leases that started
// after it).
//
// Actors are leases for life, kept here with their records: created by placing a lease
// whose worker runs the actor's factory; restarted on another lease after their worker
// dies (max_restarts); dead when killed, when their job ends or when restarts run out,
// with the reason every caller gets. Each change of an actor's record is saved
// (ResourceBook::SaveActor, to the state store; encoded off the lock, and only when the
// store keeps it) and a restarted scheduler reloads the records (Recover), keeping live
// actors on their workers as their nodes report them.
//
// Threading: one mutex guards leases, requests and actors. Calls to agents (StartWorker,
// KillWorker, StopJob) are made without it, from small pools (actors' from their
// placing thread). Callers' `done` run without it. A timer thread answers waits at
// their deadlines. Lock order: this mutex before the ResourceBook's (the scheduler's
// book_mu_, scheduler_core.h); the scheduler core's own mutex is never taken, so a grant
// never waits for the core's job and node work. Thread-safe.
#ifndef DROVER_SCHEDULER_LEASE_MANAGER_H_
#define DROVER_SCHEDULER_LEASE_MANAGER_H_

#include <deque>
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
#include "common/clock.h"
#include "common/thread_group.h"
#include "common/thread_pool.h"
#include "proto/lease.grpc.pb.h"
#include "proto/scheduler.pb.h"
#include "scheduler/job_timeline.h"
#include "scheduler/lease_queue.h"

namespace drover {

// What the lease manager needs of the scheduler's node table and jobs. Called under the
// lease manager's lock: each call takes only the book's own lock (a leaf), never the
// scheduler core's.
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
  // Reserve without working out why not (the grant pass's way: a refusal must not cost
  // a scan of the nodes): nullopt if nothing fits now, or ever.
  virtual std::optional<Grant> TryReserve(const proto::Resources& shape,
                                          const proto::PlacementHint& hint) {
    std::string reason;
    absl::StatusOr<std::optional<Grant>> g = Reserve(shape, hint, &reason);
    return g.ok() ? *std::move(g) : std::nullopt;
  }
  // Why `shape` does not fit now, for a request's pending reason.
  virtual std::string Explain(const proto::Resources& shape, const proto::PlacementHint& hint) {
    return "waiting for a node with room";
  }
  // While a pending job claims resources: its id, and per node what the claim needs
  // beyond what is free there now (what leases and running jobs must give back). Empty
  // when nothing is claimed or the claim is free already.
  virtual std::map<std::string, proto::Resources> ClaimShortfall(std::string* job_id) { return {}; }
  // Records `shape` and `gpu_ids` as used on `node_id` for a lease that exists already
  // (one an agent reports after a scheduler restart), while its node registers (before
  // it is ALIVE, so nothing else is placed on what the lease holds). nullopt if the node
  // is unknown.
  virtual std::optional<Grant> Adopt(const std::string& node_id, const proto::Resources& shape,
                                     const std::vector<int>& gpu_ids) {
    return std::nullopt;
  }
  // Whether SaveActor keeps what it is given (the state store outlives the scheduler):
  // if not, actors' records are not even encoded.
  virtual bool SavesActors() { return false; }
  // Queues an actor's record (LeaseManager's encoding) for the state store. Called
  // without the lease manager's lock, from one thread at a time.
  virtual void SaveActor(const std::string& actor_id, int64_t version, std::string record) {}
  // The actors' records saved by an earlier scheduler (none if the store keeps none).
  virtual absl::StatusOr<std::vector<std::string>> SavedActors() {
    return std::vector<std::string>();
  }
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
  // Asks the holder of a lease on that node to give it back (Workers.RevokeLease).
  virtual absl::Status RevokeLease(const std::string& agent, const proto::RevokeLeaseRequest& req) {
    return absl::UnimplementedError("RevokeLease");
  }
  // Stops every process of the job on that node (its warm workers included).
  virtual absl::Status StopJob(const std::string& agent, const std::string& job_id) = 0;
  // Deletes objects from that node's store.
  virtual absl::Status DeleteObjects(const std::string& agent, const std::vector<std::string>& ids) = 0;
};

std::unique_ptr<WorkerClient> NewGrpcWorkerClient(const std::string& token);

struct LeaseManagerOptions {
  // Lease requests queued at most; beyond, RequestLease is refused RESOURCE_EXHAUSTED.
  // A queued request costs ~0.5 KB of scheduler memory (docs/scaling.md), so the
  // default bounds the queue near 1 GB.
  size_t max_queued = 2'000'000;
  // A request nobody asked about for this long is forgotten: out of the queue if it
  // waits, and a lease granted to it that nobody came for is returned.
  absl::Duration request_memory = absl::Seconds(60);
  // Workers started at once (StartWorker calls in flight).
  int start_threads = 32;
};

class LeaseManager {
 public:
  // The longest a call waits (wait_ms above it is taken as this).
  static constexpr int64_t kMaxWaitMs = 30000;
  // A queued request nobody waits for is still granted this long after it was asked
  // (or twice its wait_ms, if longer: proto/lease.proto); later, when its turn comes
  // with room for it, it is forgotten instead (its caller gave up).
  static constexpr absl::Duration kClaimWindow = absl::Seconds(2);

  // `book` must outlive this. `clock` defaults to the real one.
  LeaseManager(ResourceBook* book, std::unique_ptr<WorkerClient> workers, Clock* clock = nullptr,
               LeaseManagerOptions options = {});
  ~LeaseManager();
  LeaseManager(const LeaseManager&) = delete;
  LeaseManager& operator=(const LeaseManager&) = delete;

  using LeaseDone = std::function<void(absl::StatusOr<proto::RequestLeaseReply>)>;
  // Asks for a worker (see proto/lease.proto): queues the request (or finds it again by
  // its id) and calls `done` exactly once, without this object's lock, from this call or
  // from another thread: with the grant, as soon as its worker runs; with pending (and
  // why) once req.wait_ms() passed (at once for 0) while it waits in the queue; or with
  // an error: INVALID_ARGUMENT, FAILED_PRECONDITION (the job ended; its queued requests
  // are dropped), RESOURCE_EXHAUSTED (the queue is full), UNAVAILABLE (stopping). No
  // thread waits meanwhile.
  void RequestLease(const proto::RequestLeaseRequest& req, LeaseDone done);
  // The same, blocking until `done` would be called.
  absl::StatusOr<proto::RequestLeaseReply> RequestLease(const proto::RequestLeaseRequest& req);
  void ReturnLease(const std::string& lease_id, const std::string& reason);
  void WorkerExited(const proto::ReportWorkerExitRequest& req);

  // Loads the actors an earlier scheduler saved (ResourceBook::SavedActors; each record
  // is saved on every change of it). Call once, after the jobs are loaded and before
  // serving. A PENDING or RESTARTING actor is placed again; an ALIVE one waits for its
  // node to re-register with its lease (Adopt), which keeps it ALIVE on the same worker
  // (its owner's connection to it never broke); a node that re-registers without it,
  // dies, or is not back within kAdoptionWait loses it as a worker exit (restarted per
  // max_restarts). Actors of jobs that ended meanwhile are DEAD.
  absl::Status Recover();
  // How long a recovered ALIVE actor waits for its node to come back.
  static constexpr absl::Duration kAdoptionWait = absl::Seconds(60);

  absl::StatusOr<proto::ActorInfo> CreateActor(const proto::CreateActorRequest& req);
  // Waits up to req.wait_ms() for a version after req.after_version() (or, by name,
  // for the actor to exist). NOT_FOUND for an unknown id or name.
  absl::StatusOr<proto::ActorInfo> GetActor(const proto::GetActorRequest& req);
  absl::Status KillActor(const std::string& actor_id, const std::string& reason);

  // Hooks from the scheduler's core, called without its lock.
  void ResourcesFreed();
  // A node (re-)registered holding `held` leases (RegisterNodeRequest.leases): those
  // this book does not know, of running jobs, are recorded as started leases on their
  // resources (after a scheduler restart, the book is rebuilt so); those of jobs that
  // ended or are unknown are killed, and so are workers of actors that moved on (dead,
  // or served by another worker now). A lease returned or whose worker exited before
  // its node registered (the agent's report overtook the registration) is not booked.
  // Recovered actors on this node that it no longer holds are lost (Recover). Called by
  // the core while the node registers, under the core's lock (never the other way:
  // nothing here takes it).
  void Adopt(const std::string& node_id, const std::string& agent_address,
             const std::vector<proto::HeldLease>& held);
  // A pending job claims resources now (another than before): task leases on them are
  // revoked, as many as the claim needs.
  void ClaimChanged();
  void NodeDead(const std::string& node_id, const std::string& reason);
  // The job ended: its actors die, its leases end, its workers stop on every node, and
  // its objects (ids "<job>.", as the SDK makes them; `objects` by the agent address
  // of the node holding them) are deleted from every store.
  void JobEnded(const std::string& job_id,
                std::map<std::string, std::vector<std::string>> objects);

  // Counts for status, metrics and tests: leases held now, requests waiting for one
  // (queued or starting), calls waiting for an answer, actors by state (pending counts
  // restarting ones too), leases granted and ended since start.
  struct Counts {
    int leases = 0, pending_requests = 0, waiting_calls = 0, actors_alive = 0, actors_pending = 0;
    int actors_restarting = 0, actors_dead = 0;
    int64_t leases_granted = 0, leases_ended = 0;
    int64_t leases_revoked = 0;  // asked back for a pending job's claim
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
    bool revoked = false;  // asked back for a pending job's claim
  };
  // A lease request, from its first call until it is forgotten.
  struct Request {
    enum State : uint8_t { kQueued, kStarting, kDone };
    State state = kQueued;
    bool delivered = false;              // its grant reached a caller
    int8_t start_failures = 0;           // for the back-off before it queues again
    absl::Time expires;                  // forgotten after this without a retry
    // Granted only while its caller waits or until this (its last ask plus twice its
    // wait, at least kClaimWindow): a request its caller gave up is not granted.
    absl::Time claim_until;
    LeaseQueue::Entry* queued = nullptr; // while in the queue
    std::unique_ptr<proto::RequestLeaseReply> reply;  // kDone: the grant
    std::unique_ptr<std::string> note;   // why it waits, if not for room
    std::vector<uint64_t> waiters;       // calls waiting for it (ids in waiters_)
  };
  // A call waiting for its request's answer.
  struct Waiter {
    LeaseDone done;
    std::string request_id;
    absl::Time deadline;
    bool hold = false;  // answered when its worker has started, not at the deadline
  };
  // Answers to give once the lock is released.
  struct Answers {
    std::vector<std::pair<LeaseDone, absl::StatusOr<proto::RequestLeaseReply>>> calls;
    void Add(LeaseDone done, absl::StatusOr<proto::RequestLeaseReply> r) {
      calls.emplace_back(std::move(done), std::move(r));
    }
    void Run();
  };
  // A queued request granted by a pass, whose worker is being started.
  struct Start {
    std::string request_id;
    std::string lease_id;
    ResourceBook::Grant grant;
    std::string job_id, owner;
    proto::PlacementHint hint;
    std::shared_ptr<const proto::PackageRef> package;
    uint64_t seq = 0;
  };
  struct Actor {
    proto::ActorInfo info;
    proto::CreateActorRequest create;    // to make it again
    std::string lease_id;
    bool killed = false;
    int told_state = -1;                 // the state the timeline last heard of
    // Recovered ALIVE, its lease not adopted yet (Recover): its worker is known by
    // info.node_id() and info.worker_id() only.
    bool awaiting_adoption = false;
  };

  // Reserves and starts a worker for `job`, in this thread (actors); returns the lease
  // or why not.
  absl::StatusOr<Lease> Grant(const proto::Resources& shape, const proto::PlacementHint& hint,
                              const std::string& job_id, const std::string& owner,
                              const proto::PackageRef& package, const proto::ActorCreation* actor,
                              std::string* pending_reason, bool* retry);
  // A lease record for `grant`, not started yet.
  Lease& NewLeaseLocked(const ResourceBook::Grant& grant, const std::string& job_id,
                        const std::string& owner, const std::string& actor_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  proto::StartWorkerRequest StartRequest(const Lease& lease, const proto::PackageRef& package,
                                         const proto::ActorCreation* actor);
  // Records how StartWorker went for `lease`: the started lease, or why not (`*retry`:
  // another node or a later try may do).
  absl::StatusOr<Lease> StartedLocked(const Lease& lease,
                                      const absl::StatusOr<proto::StartWorkerReply>& started,
                                      bool actor, bool* retry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs a grant pass over the queue if something may fit now.
  void SettleLocked(Answers* answers) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts a granted request's worker (on starts_), then answers its callers.
  void RunStart(Start s);
  // Ends a request with `why` (an error) for every caller waiting for it, and forgets it.
  void DropLocked(const std::string& request_id, const absl::Status& why, Answers* answers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers every caller waiting for `r` with `reply` (or its error).
  void AnswerLocked(Request& r, const absl::StatusOr<proto::RequestLeaseReply>& reply,
                    Answers* answers) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string PendingReasonLocked(const Request& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets the requests not asked about for request_memory.
  void ForgetLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Revokes task leases on resources a pending job claims, as many as it lacks.
  void ReclaimLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers waits whose deadline passed and queues again requests whose back-off ended.
  void TimerLoop();
  void WorkerExitedLocked(const proto::ReportWorkerExitRequest& req)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NodeDeadLocked(const std::string& node_id, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
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
  // Encodes and saves the records of unsaved_ (as they are now), without mu_, until
  // none is left (on starts_; one at a time: saving_).
  void SaveActors() ABSL_LOCKS_EXCLUDED(mu_);
  Actor* FindActorLocked(const std::string& id, const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Loses, as a worker exit, the recovered actors still awaiting adoption on `node_id`
  // ("" for every node) except those in `keep`.
  void LoseUnadoptedLocked(const std::string& node_id, const std::set<std::string>& keep,
                           const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Remembers a lease of an earlier scheduler lifetime that ended before it was adopted.
  void NoteEndedEarlyLocked(const std::string& lease_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ResourceBook* const book_;
  std::unique_ptr<WorkerClient> workers_;
  Clock* const clock_;
  ThreadPool background_{4};
  ThreadGroup placing_;  // PlaceActor threads (each may wait long for resources)

  const LeaseManagerOptions options_;
  // In every lease id ("lease-<tag>-<n>"): leases of an earlier scheduler lifetime, whose
  // workers may still run and be returned by their agents after a restart, never share
  // an id with this one's (a return would free the wrong lease's resources).
  const std::string lease_tag_;
  const bool saves_actors_;  // book_->SavesActors()

  absl::Mutex mu_;
  absl::CondVar freed_;    // resources freed, leases returned (actors' placing threads)
  absl::CondVar timer_cv_; // an earlier deadline, or stopping
  absl::CondVar changed_;  // an actor's record changed
  absl::CondVar stop_cv_;  // Stop (back-offs wait on it)
  std::map<std::string, Lease> leases_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Request> requests_ ABSL_GUARDED_BY(mu_);
  LeaseQueue queue_ ABSL_GUARDED_BY(mu_);
  bool pass_needed_ ABSL_GUARDED_BY(mu_) = false;
  // Moves when room may have changed: cached pending reasons are then worked out again.
  uint64_t room_version_ ABSL_GUARDED_BY(mu_) = 1;
  int starting_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  std::set<std::pair<absl::Time, uint64_t>> deadlines_ ABSL_GUARDED_BY(mu_);
  uint64_t next_waiter_ ABSL_GUARDED_BY(mu_) = 1;
  // Requests whose start failed (a node did not answer), by when they queue again.
  std::multimap<absl::Time, Start> retries_ ABSL_GUARDED_BY(mu_);
  // (expires, request id) of each RequestLease call, in call order: when to forget
  // requests_ without a scan of them all per call.
  std::deque<std::pair<absl::Time, std::string>> expiry_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Actor> actors_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> names_ ABSL_GUARDED_BY(mu_);  // live actor name -> id
  // Actors changed since their record was last saved, and whether SaveActors runs.
  std::set<std::string> unsaved_ ABSL_GUARDED_BY(mu_);
  bool saving_ ABSL_GUARDED_BY(mu_) = false;
  std::set<std::string> jobs_with_workers_ ABSL_GUARDED_BY(mu_);
  // Leases of an earlier lifetime returned (or whose worker exited) before their node
  // registered: Adopt does not book them. Remembered for kEndedEarlyMemory; the deque
  // has them by when they are forgotten (oldest first).
  std::set<std::string> ended_early_ ABSL_GUARDED_BY(mu_);
  std::deque<std::pair<absl::Time, std::string>> ended_early_order_ ABSL_GUARDED_BY(mu_);
  int64_t next_lease_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t leases_granted_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t leases_ended_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t leases_revoked_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time next_reclaim_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  JobTimeline* timeline_ = nullptr;
  int actors_waiting_ ABSL_GUARDED_BY(mu_) = 0;  // PlaceActor threads waiting on freed_
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::thread timer_;
  // Last: its closures use the fields above, so it is destroyed (drained) first.
  ThreadPool starts_;

};

}  // namespace drover

#endif  // DROVER_SCHEDULER_LEASE_MANAGER_H_
