// The scheduler's coordinator: nodes and their health, jobs and their gang placement,
// failure handling and restarts. No gRPC server code lives here: the service
// (scheduler_service.h) is a thin layer over these methods. The parts with one job
// each live in their own units, and SchedulerCore wires them together:
//   - queue_policy.h: which pending jobs start where, and why others wait (pure; its
//     JobQueue keeps the pending jobs by class so a pass costs what it starts, not
//     what is queued);
//   - node_table.h: the nodes' resources as placement reads them (pure);
//   - placement.h: gang placement on node capacities (pure);
//   - generation.h: how a generation's end is described and told (pure);
//   - rendezvous.h: the rendezvous KV of running generations (scheduler_rendezvous.cc
//     also has the generation watches);
//   - object_directory.h: which node holds which object;
//   - agent_sessions.h + scheduler_sessions.cc: agents' sessions, the fast path of
//     failure detection (a dead agent's closed connection);
//   - node_feed.h: the nodes' state pushed to drivers over their sessions;
//   - job_persister.h: job records and ids written to the StateStore off the lock.
// New kinds of state (leases, tasks, actors) belong in units of their own in the same
// way: a table or pure policy with its own header and test, reached through thin
// SchedulerCore methods in a file of their own (as scheduler_objects.cc does for the
// object directory), never as more fields and branches in this class.
//
// Threading: every public method is thread-safe. One mutex (mu_) guards the job state
// machine, the nodes and the agents' sessions; the object directory, the rendezvous KV
// and the node feed are thread-safe classes with a lock of their own, so their traffic
// (object reports and lookups, rendezvous and its waits, drivers' node news) never
// waits for mu_. Lock order (ABSL_ACQUIRED_BEFORE/AFTER on the mutexes; absl's
// deadlock detection checks it in every test): mu_ before book_mu_, batch_mu_ and the
// locks of objects_, kv_ and node_feed_; book_mu_ before those three, which are leaves:
// nothing is called out, and no other lock taken, while one is held. book_mu_ guards
// what leases and jobs share (the resource book: the node table, the pending job's
// claim, the nodes' agents, which jobs exist and how they ended, the scheduler's
// address). The lease manager reaches it through the ResourceBook, taking book_mu_
// under its own lock and never mu_, so a lease is granted while mu_ is busy; the core
// takes it under mu_ for each change of the book, and once for a whole queue pass.
// No lock is held across an RPC or a callback. Calls to
// agents and to the state store are never made under it: methods collect agent calls
// and hand them to a small outbound thread pool (launches go out from there without
// blocking it: StartProcessesAsync, whose reactions run on gRPC's threads), and job
// records go to the JobPersister's thread. One monitor thread declares silent nodes dead, ends
// generations past their time limit and stops failed gangs after the abort notice; it
// also declares dead the nodes whose agent's session closed and stayed closed for the
// session grace. What agents report most (heartbeats, exits, launch replies) is applied
// in batches (RunBatched, scheduler_agents.cc): a report that finds others waiting is
// applied by the thread that holds the lock for them all, followed by one queue pass,
// so a thousand agents' reports cost few lock hand-offs and passes, not one each.
//
// Time: every deadline and timestamp comes from SchedulerOptions::clock (the wall
// clock by default; a FakeClock in tests).
//
// Durability: every job change is queued for the StateStore; SubmitJob and CancelJob
// answer once their change is stored. Start() reloads jobs; running ones are reattached
// when their agents re-register.
#ifndef DROVER_SCHEDULER_SCHEDULER_CORE_H_
#define DROVER_SCHEDULER_SCHEDULER_CORE_H_

#include <atomic>
#include <deque>
#include <functional>
#include <algorithm>
#include <map>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/thread_pool.h"
#include "proto/scheduler.pb.h"
#include "scheduler/agent_client.h"
#include "scheduler/agent_sessions.h"
#include "scheduler/job_persister.h"
#include "scheduler/job_timeline.h"
#include "scheduler/lease_manager.h"
#include "scheduler/node_feed.h"
#include "scheduler/node_table.h"
#include "scheduler/object_directory.h"
#include "scheduler/queue_policy.h"
#include "scheduler/rendezvous.h"
#include "scheduler/state_store.h"

namespace drover {

struct SchedulerOptions {
  // After a restart, a driver job that ran stays RUNNING this long for its driver to
  // open its session again (the driver's tasks and leased workers run on meanwhile);
  // then it FAILS. A driver just registered has as long to open its first session.
  absl::Duration driver_reconnect = absl::Seconds(60);
  // A node that sends no heartbeat for this long is declared dead.
  absl::Duration node_timeout = absl::Seconds(10);
  // A node whose agent's session (AgentSession) closed is declared dead this long
  // after, unless a new session of the node opens first (agent_sessions.h).
  absl::Duration session_grace = absl::Seconds(1);
  // Told to agents at registration.
  absl::Duration heartbeat_interval = absl::Milliseconds(500);
  // SIGTERM-to-SIGKILL grace when stopping a job's processes.
  absl::Duration kill_grace = absl::Seconds(5);
  // After a process of a generation fails, the ranks that watch the generation
  // (WatchGeneration: collective groups do) get this long to learn of it, abort and exit
  // on their own, reporting the cause, before the rest is stopped. Zero: stop at once.
  absl::Duration abort_notice = absl::Seconds(3);
  // How long SubmitJob and CancelJob wait for their change to be stored before they
  // answer UNAVAILABLE (the change stands and is saved later; a retry waits again).
  // Below the clients' RPC deadline (5 s).
  absl::Duration durable_wait = absl::Seconds(4);
  // Where time comes from. Not owned; must outlive the core.
  Clock* clock = Clock::Real();
  // Told what happens to each job (job_timeline.h), if set. Not owned; must outlive
  // the core.
  JobTimeline* timeline = nullptr;
  // Fault points for tests (scheduler main reads them from the environment, once):
  // end the process (_exit) as soon as the last node of a launch answered its start,
  // before the answer is applied (DROVER_TEST_CRASH_AFTER_START=1), or as soon as the
  // first (master) node of a launch of several nodes answered, before the others are
  // asked (DROVER_TEST_CRASH_AFTER_START=master); hold each job record this long before
  // its write, as a slow store would (DROVER_TEST_STORE_DELAY_MS).
  bool test_crash_after_start = false;
  bool test_crash_after_master_start = false;
  absl::Duration test_store_delay = absl::ZeroDuration();
};

// The payload, on SubmitJob's UNAVAILABLE, naming the job that was made and will run
// but is not saved yet (the RPC sends it as trailing metadata "x-drover-accepted-job").
inline constexpr char kAcceptedJobPayload[] = "drover/accepted-job";

class SchedulerCore {
 public:
  // Takes ownership of both.
  SchedulerCore(SchedulerOptions options, std::unique_ptr<StateStore> store,
                std::unique_ptr<AgentClient> agents);
  ~SchedulerCore();

  // Loads persisted jobs and starts the monitor thread. Call once before serving.
  absl::Status Start();
  // Stops the monitor and drains outbound calls. Idempotent.
  void Stop();
  // The address workers are given as DROVER_SCHEDULER_ADDRESS (known once bound).
  void SetAddress(const std::string& address);

  absl::StatusOr<proto::RegisterNodeReply> RegisterNode(const proto::RegisterNodeRequest& req);
  proto::HeartbeatReply Heartbeat(const proto::HeartbeatRequest& req);
  void ReportExit(const proto::ReportExitRequest& req);

  // Answers once the new job's record is stored. UNAVAILABLE if the store is down
  // (nothing created), or if the record is not stored within options.durable_wait (the
  // job exists and runs; a retry with the same idempotency key returns it).
  absl::StatusOr<proto::JobInfo> SubmitJob(const proto::JobSpec& spec);
  // Waits up to `wait` for the job's version to exceed `after_version` (if > 0).
  absl::StatusOr<proto::JobInfo> GetJob(const std::string& job_id, int64_t after_version,
                                        absl::Duration wait);
  std::vector<proto::JobInfo> ListJobs(const proto::ListJobsRequest& req);
  // Answers once the cancellation is stored (UNAVAILABLE after options.durable_wait; it
  // stands and is saved later).
  absl::StatusOr<proto::JobInfo> CancelJob(const std::string& job_id);
  proto::GetClusterStatusReply ClusterStatus();

  // Object directory (object_directory.h, its own lock; these methods live in
  // scheduler_objects.cc). A dead node's entries are dropped when it is declared dead;
  // reads list ALIVE nodes only. FAILED_PRECONDITION if the node is unknown or not ALIVE.
  absl::Status AddObjectLocations(const proto::AddObjectLocationsRequest& req);
  void RemoveObjectLocations(const proto::RemoveObjectLocationsRequest& req);
  // With `wait` > 0, waits up to `wait` (at most 10 minutes) until an ALIVE node holds
  // the object, woken by AddObjectLocations; an empty reply then means none did in time,
  // the scheduler is stopping, or `cancelled` (if given; asked at least once a second
  // while waiting) said the caller went away.
  proto::GetObjectLocationsReply GetObjectLocations(
      const std::string& object_id, absl::Duration wait = absl::ZeroDuration(),
      const std::function<bool()>& cancelled = nullptr);

  // The rendezvous key-value store of running job generations (rendezvous.h, its own
  // lock; the core tells it of the jobs' changes). Lives as long as the core.
  Rendezvous* rendezvous() { return &kv_; }
  // Waits up to `wait` for the scope's generation to fail or end (see
  // proto/scheduler.proto WatchGeneration); records the rank as watching. NOT_FOUND for
  // an unknown job.
  absl::StatusOr<proto::WatchGenerationReply> WatchGeneration(
      const proto::WatchGenerationRequest& req, absl::Duration wait);

  // The task layer: worker leases, actors and driver jobs (these methods live in
  // scheduler_tasks.cc; lease_manager.h keeps the books on leases and actors).
  // The node table as leases are placed against it: the same resources jobs use.
  ResourceBook* resource_book() { return book_.get(); }
  // Tells `leases` of dead nodes, ended jobs and freed resources from now on. Call once
  // before serving; not owned.
  void SetLeaseManager(LeaseManager* leases);
  // A program that submits tasks outside any job (drover::Init in a plain program): a
  // job of its own, marked `driver`, RUNNING until EndDriver. Idempotent per request id.
  absl::StatusOr<std::string> RegisterDriver(const proto::RegisterDriverRequest& req);
  // OK while `job_id` is a driver job that has not ended.
  absl::Status CheckDriver(const std::string& job_id);
  // The driver of `job_id` opened its session (again, after a scheduler restart).
  void DriverAttached(const std::string& job_id);
  // Ends a driver job (SUCCEEDED with `reason`); its leases, actors and workers go.
  void EndDriver(const std::string& job_id, const std::string& reason);

  // For the metrics and the dashboard (scheduler_observe.cc): pending jobs by
  // PendingReasonClass (queue_policy.h), and the jobs whose gang restarts; counted in
  // one pass under the lock.
  struct QueueCounts {
    std::map<std::string, int> pending_by_reason;
    int restarting = 0;
  };
  QueueCounts CountQueue();

  // Agents' sessions (agent_sessions.h; these methods live in scheduler_sessions.cc).
  // Opens a session of an ALIVE node, replacing its earlier one and cancelling a loss
  // pending since that one closed; returns the session's first notice (its id, the
  // grace). FAILED_PRECONDITION if the node is not registered or not ALIVE;
  // UNAVAILABLE once Stop() has begun.
  absl::StatusOr<proto::AgentSessionNotice> OpenAgentSession(const std::string& node_id);
  // The session's stream ended from the agent's side (its connection closed): unless
  // a new session of the node opens within options.session_grace, the node is
  // declared dead. Ignored for a replaced session, and once Stop() has begun.
  void AgentSessionClosed(const std::string& node_id, int64_t session_id);

  // The nodes' state as drivers see it, for their sessions (LeasesService::
  // DriverSession) to push to them. Lives as long as the core.
  NodeFeed* node_feed() { return &node_feed_; }

  // Runs `f` with mu_ held (tests: what must not wait for mu_, such as a lease grant,
  // is shown not to).
  void RunWithLockHeldForTest(absl::FunctionRef<void()> f) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // A node: what placement needs of it (its IP, total, GPUs, what is used, its order
  // and whether it is ALIVE) is kept in table_ only, under the same id; the rest here.
  // NodeViewLocked puts the two together; SetNodeStateLocked changes the state of both.
  struct Node {
    // State, reason, agent address and what the agent reports. node_ip, total and free
    // are left empty here (table_ has them) and filled on read.
    proto::NodeInfo info;
    absl::Time last_heartbeat;
    // RegisterNodeReply.registration of its last registration (0 before one): starts
    // sent to the node carry it, so an agent registered since refuses a late one.
    int64_t registration = 0;
  };
  struct Allocation {
    std::string node_id;
    proto::Resources res;
    std::vector<int> gpus;
  };
  // A set of ranks as a sorted vector: 24 bytes where a std::set takes 48 even empty (a
  // queued job has two such sets, both empty: the memory per queued job), and a gang's
  // ranks come in order.
  class RankSet {
   public:
    size_t count(int rank) const { return std::binary_search(v_.begin(), v_.end(), rank); }
    void insert(int rank) {
      auto at = std::lower_bound(v_.begin(), v_.end(), rank);
      if (at == v_.end() || *at != rank) v_.insert(at, rank);
    }
    size_t erase(int rank) {
      auto at = std::lower_bound(v_.begin(), v_.end(), rank);
      if (at == v_.end() || *at != rank) return 0;
      v_.erase(at);
      return 1;
    }
    void clear() { v_.clear(); }
    bool empty() const { return v_.empty(); }
    size_t size() const { return v_.size(); }
    std::vector<int>::const_iterator begin() const { return v_.begin(); }
    std::vector<int>::const_iterator end() const { return v_.end(); }

   private:
    std::vector<int> v_;
  };
  struct Job {
    proto::JobInfo info;
    RankSet live;  // ranks of the current generation believed alive
    std::vector<Allocation> allocs;  // held until `live` is empty
    int64_t seq = 0;  // submit order
    RankSet watchers;  // ranks of the current generation that watch it
    // Signalled (SignalAll) when `info` changes (ChangedLocked), when the job's KV
    // changes, and when the scheduler stops. The long polls on a job (GetJob, KvGet,
    // WatchGeneration) wait on it (AwaitJobLocked), so a change wakes only that job's
    // waiters; a condition of mu_ would be re-evaluated at every unlock of mu_ by any
    // call, for every waiter of every job. Shared, so a waiter keeps it alive.
    // Made by the first wait (most jobs are never waited on). mutable: made by a reader.
    mutable std::shared_ptr<absl::CondVar> changed;
    // What the indexes (IndexLocked) hold of it: in queue_; a hold on its nodes in
    // table_ (until when, and the allocations it was made for); counted in which state.
    bool queued = false;
    std::optional<absl::Time> hold;
    std::vector<std::string> hold_nodes;
    int64_t hold_allocs = 0;
    int counted_state = -1;
    // What job_ends_ says of it: -1 nothing (pending), 0 started, not ended; 1 ended.
    int8_t booked = -1;
    // Moves whenever `allocs` is filled or cleared.
    int64_t allocs_gen = 0;
    // Reloaded RUNNING with no start of its generation confirmed in the record: the
    // scheduler may have stopped after storing the placement and before the start
    // reached a node. Its first node's registration decides (ResolveStartLocked);
    // until then `unreported` (in `starts`) keeps the ranks other nodes registered
    // without.
    bool start_unconfirmed = false;
    // A later node registered running ranks of it while its start was unconfirmed: the
    // start went out, so it is never placed again under the same generation.
    bool seen_running = false;
    // The master's port is unknown (the record confirms no start) and a start of the
    // first node's ranks was sent again to learn it (StartLaterNodesLocked): that node
    // holds the generation, answers its port and starts nothing. Meanwhile the node is
    // not told to forget the generation (it would then start it again), and the later
    // nodes that come back without their ranks wait in `awaiting_port` for the answer.
    bool asking_port = false;
    // What a start in flight or unconfirmed keeps (sets: 48 bytes each even empty,
    // so a queued job, which never has a start, holds none: docs/scaling.md's memory
    // per queued job).
    struct StartSets {
      // See start_unconfirmed.
      std::set<int> unreported;
      // Reloaded RUNNING with the first node's start confirmed: the later nodes whose
      // start the record does not confirm. Such a node registering with none of its
      // ranks never got its start (and refuses it now): it is sent again
      // (ResendStartLocked).
      std::set<std::string> unconfirmed_nodes;
      // See asking_port.
      std::set<std::string> awaiting_port;
      // Ranks of the current generation whose start waits for the placement to be
      // stored (Dispatch, JobPersister::WhenStored): none of them has reached a node,
      // so a cancel ends them at once (EndLocked) instead of when the store answers.
      std::set<int> unsent;
    };
    std::unique_ptr<StartSets> start_sets;
    // start_sets, made on first use.
    StartSets& starts() {
      if (start_sets == nullptr) start_sets = std::make_unique<StartSets>();
      return *start_sets;
    }
  };
  // An outbound call decided under the lock, made after it is released.
  struct Action {
    enum Kind { kLaunch, kStop } kind;
    std::string job_id;
    int generation = 0;
    // kStop: one agent address. kLaunch: per node, in group order (master first). A
    // start's request is moved out when it is sent (RunLaunch, RunLaunches): read
    // node_ids and ranks, which stay.
    std::vector<std::pair<std::string, proto::StartProcessesRequest>> starts;
    std::vector<std::string> node_ids;
    std::vector<std::vector<int>> ranks;  // per node, its start's ranks
    std::string stop_address;
    // kLaunch: the master's port when the first node of `starts` is not the master (a
    // start sent again to a later node after a restart); 0: the first node picks it.
    int master_port = 0;
    // kLaunch: its first node already runs its ranks; it is asked again only for the
    // master's port (StartLaterNodesLocked). Its ranks there are never failed as not
    // started: they run, and stay live so that the job's stop reaches them.
    bool reask = false;
    // kLaunch: the placement epoch it starts (an answer to a launch of an earlier
    // placement of the same generation is not the current placement's). kStop: stop only
    // that placement's processes; 0: every process of the generations it names.
    int64_t placement_epoch = 0;
  };
  // What the lease manager is told once the lock is released: jobs that ended (with
  // their objects' ids by the agent address holding them), nodes declared dead (with
  // why), whether resources were freed.
  struct LeaseNotes {
    std::vector<std::pair<std::string, std::map<std::string, std::vector<std::string>>>> ended;
    std::vector<std::pair<std::string, std::string>> dead;
    bool freed = false;
    bool claim = false;  // a pending job claims resources now (another than before)
  };
  // The calls a locked section decided, made after it released the lock (Dispatch),
  // and the lease manager's notes taken in the same section (no second locking).
  struct Actions : std::vector<Action> {
    LeaseNotes notes;
  };
  class Book;
  static std::unique_ptr<ResourceBook> MakeBook(SchedulerCore* core);
  // In RegisterNode, before the node is ALIVE: the leases the node's workers serve go
  // to the lease manager's book (LeaseManager::Adopt), rebuilding it after a restart.
  // Takes the lease manager's lock under mu_ (the lease manager never takes mu_), and
  // book_mu_ under that: so no BookScope may be open.
  void AdoptLeasesLocked(const std::string& node_id, const proto::RegisterNodeRequest& req)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Holds book_mu_ for its scope, unless the holder of mu_ (this thread) holds it
  // already (a queue pass holds it throughout, and the changes it makes take it
  // again). REQUIRES: mu_ held, and not released (no wait on mu_) in its scope.
  // Aborts, naming `what`, if a BookScope is open: a wait on mu_ would let another
  // thread take mu_ and think it holds book_mu_, and a call that takes book_mu_ itself
  // (the lease manager's adoption) would deadlock.
  void RequireNoBookScopeLocked(const char* what) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (book_depth_ != 0) {
      std::fprintf(stderr, "drover-scheduler: internal error: %s inside a BookScope\n", what);
      std::abort();
    }
  }
  class ABSL_SCOPED_LOCKABLE BookScope {
   public:
    // (The analysis cannot follow the depth count: it is off inside.)
    explicit BookScope(SchedulerCore* core) ABSL_EXCLUSIVE_LOCK_FUNCTION(core->book_mu_)
        ABSL_NO_THREAD_SAFETY_ANALYSIS : core_(core) {
      if (core_->book_depth_++ == 0) core_->book_mu_.Lock();
    }
    ~BookScope() ABSL_UNLOCK_FUNCTION() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      if (--core_->book_depth_ == 0) core_->book_mu_.Unlock();
    }
    BookScope(const BookScope&) = delete;
    BookScope& operator=(const BookScope&) = delete;

   private:
    SchedulerCore* const core_;
  };

  // Creates a job under a fresh id (waiting for ids from the persister if none is
  // left), or returns the job `idempotency_key` made before. Under the lock, `check`
  // may refuse, then `fill` sets the new record and may queue actions. Answers once the
  // record is stored (see SubmitJob).
  absl::StatusOr<proto::JobInfo> CreateJob(const std::string& idempotency_key,
                                           const std::function<absl::Status()>& check,
                                           const std::function<void(Job&, Actions*)>& fill);
  // Moves what the lease manager has not been told yet into `notes`.
  void TakeNotesLocked(LeaseNotes* notes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells the lease manager `notes` and whatever else changed since it was last told
  // (ended jobs, dead nodes, freed resources). Called by Dispatch, without mu_.
  void NotifyLeases(LeaseNotes notes);

  void Dispatch(Actions actions);
  // Runs `apply` with mu_ held, batched with the other calls of RunBatched waiting at
  // the time: one thread (the leader) takes mu_ for all of them, applies each, runs one
  // queue pass (ScheduleLocked) and dispatches what they decided, then hands the lead to
  // a call that came meanwhile. Returns once `apply` ran and its pass is done.
  void RunBatched(absl::FunctionRef<void(Actions*)> apply);
  static std::vector<int> RanksOf(const proto::StartProcessesRequest& req);
  // Starts node `i` of a launch (the master first, with port 0; the others with the
  // port it picked) without blocking; its reaction starts the next node.
  void RunLaunch(std::shared_ptr<Action> a, size_t i, int master_port);
  // Starts the first node of launches whose first node is the same agent: one
  // StartProcessesBatch call (RunLaunch for a single launch); each launch then goes on
  // to its other nodes with RunLaunch.
  void RunLaunches(std::vector<std::shared_ptr<Action>> launches);
  // Applies the answer to node `i`'s start of launch `a` (FailLaunchLocked if it
  // failed). True if the launch goes on to node i + 1 (with `*master_port`, set from
  // the master's answer).
  bool ApplyStartLocked(const Action& a, size_t i, const absl::StatusOr<int>& port,
                        int* master_port, Actions* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails the ranks of launches whose job ended or moved on while their placement was
  // being stored (they are never sent), and returns the others.
  std::vector<std::shared_ptr<Action>> DropStaleLaunchesLocked(
      std::vector<std::shared_ptr<Action>> launches, Actions* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Settles a reloaded job whose start was unconfirmed (Job::start_unconfirmed), once its
  // first node's processes are known: `started` (the node reports a rank of the
  // generation, or is dead) starts the ranks other nodes registered without
  // (StartLaterNodesLocked; failed as never started if the job is failing or ended) and
  // counts the nodes not back yet as unconfirmed (Job::unconfirmed_nodes); otherwise no
  // start of the generation reached any node (a later node's start is sent only after
  // the first node's answered, and a registered agent refuses a start sent before its
  // registration), so the generation is placed again, as PENDING.
  void ResolveStartLocked(Job& job, bool started, Actions* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The start of `job`'s current generation on `node_id` (its ranks there).
  proto::StartProcessesRequest StartRequestLocked(const Job& job, const std::string& node_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends the start of `job`'s ranks on `node_id` again, with the master port the record
  // holds (see Job::unconfirmed_nodes).
  void ResendStartLocked(Job& job, const std::string& node_id, Actions* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts the ranks of later nodes `node_ids` (in placement order) that came back without
  // them after a restart: at once with the recorded master port; without one, after the
  // first node's start is sent again to learn it (see Job::asking_port).
  void StartLaterNodesLocked(Job& job, const std::vector<std::string>& node_ids, Actions* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails the live ranks on `node_ids` as never started, saying `why`.
  void FailNeverStartedLocked(Job& job, const std::set<std::string>& node_ids,
                              const std::string& why, Actions* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues launch `a` of `job`, the ranks it starts counted as unsent until Dispatch
  // sends it.
  void QueueLaunchLocked(Job& job, Action a, Actions* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Test fault point (SchedulerOptions::test_crash_after_start).
  void MaybeCrashAfterStart(const Action& a, size_t i, const absl::StatusOr<int>& port);
  // An outbound call (a launch, a stop) is over: its last reaction is done with the
  // core. Stop() waits for every call dispatched to end so.
  void EndCall();
  // Passes every min(200 ms, node_timeout / 4) from `started`, until Stop().
  void MonitorLoop(absl::Time started);

  // Waits until `done()` (evaluated with mu_ held) or `deadline`, woken by `job`'s
  // changes. Returns done()'s last value.
  template <typename Done>
  bool AwaitJobLocked(const Job& job, absl::Time deadline, Done done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (job.changed == nullptr) job.changed = std::make_shared<absl::CondVar>();
    std::shared_ptr<absl::CondVar> changed = job.changed;
    RequireNoBookScopeLocked("a wait on mu_");
    while (!done()) {
      if (clock_->WaitWithDeadline(changed.get(), &mu_, deadline)) return done();  // timed out
    }
    return true;
  }
  // Tells options_.timeline (if any) that `e` happened to `job`.
  void NoteLocked(const Job& job, proto::TimelineEvent e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (options_.timeline != nullptr) options_.timeline->Record(job.info.job_id(), std::move(e));
  }

  // Runs a pass of the queue policy (queue_policy.h) if anything changed since the
  // last one, and applies its decisions: places the jobs it starts, records why the
  // others wait.
  void ScheduleLocked(Actions* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Allocates `ranks` to `job`, marks it RUNNING and queues its launch.
  void StartJobLocked(Job& job, std::vector<proto::RankPlacement> ranks, Actions* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Brings the indexes derived from a job's record up to date with it: the pending
  // queue, its hold in the node table, the jobs with live ranks, the counts by state.
  // Every change goes through ChangedLocked, which calls it.
  void IndexLocked(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The jobs with live ranks (a copy: failing their ranks changes the set).
  std::vector<Job*> RunningJobsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HandleExitLocked(Job& job, const proto::ExitInfo& exit, Actions* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records that `ranks` of the job's current generation on `node_id` ended without an
  // exit status (never started, node lost...), `error` saying how.
  void FailRanksLocked(Job& job, const std::string& node_id, const std::vector<int>& ranks,
                       const std::string& error, Actions* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StopJobLocked(Job& job, Actions* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends a job for good (cancelled, timed out): records the state, stops its processes
  // and frees what no process holds any more.
  void EndLocked(Job& job, proto::JobState state, const std::string& reason, int exit_code,
                 Actions* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails a job whose current generation ran past spec.time_limit_ms (MonitorLoop).
  void TimeOutLocked(Job& job, Actions* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a failure: stops the job's processes now, or, if some live rank watches the
  // generation, once options_.abort_notice has passed (MonitorLoop), so the watchers can
  // exit by themselves first.
  void StopAfterFailureLocked(Job& job, Actions* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseLocked(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishLocked(Job& job, proto::JobState state, const std::string& reason, int exit_code)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Bumps the job's version, wakes its long polls and queues its record for the store.
  void ChangedLocked(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyProcessTableLocked(Node& node, const proto::HeartbeatRequest& report,
                               bool reattach, proto::HeartbeatReply* reply, Actions* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True if a process (or exit) of `generation` under `epoch` belongs to another
  // placement of the job's current generation than the current one: stale, never a live
  // rank or an exit of the current placement. An epoch of 0 on either side (an agent or
  // a record from before epochs) is never another.
  static bool OfAnotherPlacement(const Job& job, int generation, int64_t epoch);
  // Why a process `node` reports running must be stopped there (its generation's
  // stop is sent), or "" when it is wanted or may just be a table older than its exit.
  std::string StaleRunningLocked(const Job* job, const Node& node,
                                 const proto::ProcessStatus& p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DeclareDeadLocked(Node& node, const std::string& reason, Actions* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells node_feed_ (the drivers) of the node's state now.
  void PublishNodeLocked(const Node& node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The one place a node's state changes: the record, whether table_ places on it,
  // whether objects_ takes its reports (at `agent_address`), and the drivers' feed.
  void SetNodeStateLocked(Node& node, proto::NodeState state, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The start of launch `a` failed on its node i (`why`): that node's ranks and those
  // of the nodes after it, which are never asked, are failed.
  void FailLaunchLocked(Job& job, const Action& a, size_t i, const absl::Status& why, Actions* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Declares dead the ALIVE nodes whose session closed options_.session_grace or more
  // before `now` (MonitorLoop; scheduler_sessions.cc).
  void ExpireAgentSessionsLocked(absl::Time now, Actions* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The monitor's pass came `late` after it was due: if that is a stall of this process
  // (SIGSTOP, a frozen VM, swapping), it took no heartbeats meanwhile, so every node's
  // silence is moved on by `late` (MonitorLoop; scheduler_sessions.cc).
  void ForgiveStallLocked(absl::Time now, absl::Duration late) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  proto::NodeInfo NodeViewLocked(const Node& n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Node* FindNodeLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Job* FindJobLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The node's IP for messages, "" if unknown.
  std::string NodeIpLocked(const std::string& node_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits (without mu_) until `job_id`'s changes are stored; `what` names the change
  // (it stands whatever happens), `then` says what the caller should do if it is not
  // stored in time.
  absl::Status AwaitDurable(const std::string& job_id, const std::string& what,
                            const std::string& then);

  const SchedulerOptions options_;
  Clock* const clock_;
  std::unique_ptr<StateStore> store_;
  std::unique_ptr<AgentClient> agents_;
  JobPersister persister_;
  // Per scheduler lifetime, in every job id: "job-<tag>-<n>" (see NewJobTag).
  const std::string job_tag_;

  absl::Mutex mu_ ABSL_ACQUIRED_BEFORE(book_mu_, batch_mu_, *objects_.mutex(), *kv_.mutex(),
                                       *node_feed_.mutex());
  std::map<std::string, Node> nodes_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Job> jobs_ ABSL_GUARDED_BY(mu_);
  // Idempotency key -> the job it made (jobs_ never drops a job).
  absl::flat_hash_map<std::string, Job*> idempotency_ ABSL_GUARDED_BY(mu_);
  // Indexes of jobs_ (IndexLocked keeps them): every job by submission order (ListJobs
  // reads the newest without sorting them all), the pending jobs, the ids of the jobs
  // with live ranks (what a lost node can touch), and how many are in each state.
  std::deque<Job*> by_seq_ ABSL_GUARDED_BY(mu_);  // [seq]: seqs count from 0, none go
  JobQueue queue_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> running_ ABSL_GUARDED_BY(mu_);
  std::map<int, int64_t> state_counts_ ABSL_GUARDED_BY(mu_);

  // The resource book: what leases (through book_, from the lease manager, which never
  // takes mu_) and jobs (under mu_) share. Taken after mu_ and after the lease manager's
  // lock, before the leaves below; nothing is called out under it from the book's side.
  absl::Mutex book_mu_ ABSL_ACQUIRED_AFTER(mu_)
      ABSL_ACQUIRED_BEFORE(*objects_.mutex(), *kv_.mutex(), *node_feed_.mutex());
  // How many BookScopes of the holder of mu_ are open (book_mu_ is held while > 0).
  int book_depth_ ABSL_GUARDED_BY(mu_) = 0;
  // Every known node's resources (ALIVE ones are placed on) and holds.
  NodeTable table_ ABSL_GUARDED_BY(book_mu_);
  // Every registered node's agent address (ALIVE ones: table_.Alive), by node id.
  std::map<std::string, std::string> agent_addresses_ ABSL_GUARDED_BY(book_mu_);
  // queue_.claim() as of the last queue pass that ran (claim_pass_: queue_.passes()
  // then): what leases must leave to the oldest pending job that does not fit.
  Claim claim_ ABSL_GUARDED_BY(book_mu_);
  uint64_t claim_pass_ ABSL_GUARDED_BY(mu_) = 0;
  // Every job that has left PENDING: for those that ended, how (CheckJobRunning's
  // answer).
  struct JobEnd {
    proto::JobState state = proto::PENDING;  // not terminal: it has not ended
    std::string reason;
  };
  absl::flat_hash_map<std::string, JobEnd> job_ends_ ABSL_GUARDED_BY(book_mu_);
  std::string address_ ABSL_GUARDED_BY(book_mu_);
  // Thread-safe, each with a lock of its own, taken after mu_ (when at all under it)
  // and never before: the lock order above. Told of node and job changes under mu_.
  ObjectDirectory objects_;
  Rendezvous kv_;
  NodeFeed node_feed_;
  // Not thread-safe: every use of it is under mu_ (agent_sessions.h says why).
  AgentSessions sessions_ ABSL_GUARDED_BY(mu_);
  // Jobs whose stop after a failure waits for their watchers' abort notice: when to
  // stop them anyway (MonitorLoop).
  std::map<std::string, absl::Time> deferred_stops_ ABSL_GUARDED_BY(mu_);
  // Driver jobs whose driver has not opened its session (again) yet, and by when it
  // must (SchedulerOptions::driver_reconnect): recovered RUNNING after a restart, or
  // registered here and not attached since (a driver that exits or loses the scheduler
  // between its registration and its session would leave its job RUNNING for ever).
  struct DriverWait {
    absl::Time deadline;
    bool after_restart = false;
  };
  std::map<std::string, DriverWait> driver_reconnects_ ABSL_GUARDED_BY(mu_);
  // Fails the driver jobs of driver_reconnects_ whose time is up.
  void ExpireDriverReconnectsLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Jobs with a time limit, not ended (MonitorLoop ends a generation past it).
  std::set<std::string> time_limited_ ABSL_GUARDED_BY(mu_);
  int64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Outbound calls dispatched and not ended (EndCall); none are dispatched once Stop()
  // has closed them.
  absl::Mutex calls_mu_;
  int64_t calls_in_flight_ ABSL_GUARDED_BY(calls_mu_) = 0;
  bool calls_closed_ ABSL_GUARDED_BY(calls_mu_) = false;
  absl::CondVar monitor_wake_;  // Stop() and a closed session wake the monitor

  // RunBatched's calls: those waiting to be applied (in order of arrival), and whether
  // one of them leads (takes mu_ for the others).
  struct BatchedCall;
  absl::Mutex batch_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::vector<BatchedCall*> batch_ ABSL_GUARDED_BY(batch_mu_);
  bool batch_led_ ABSL_GUARDED_BY(batch_mu_) = false;

  // For the lease manager (NotifyLeases): what happened since it was last told, and
  // whether there is any (read without the lock first).
  std::vector<std::string> ended_jobs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<std::string, std::string>> dead_nodes_ ABSL_GUARDED_BY(mu_);
  bool freed_ ABSL_GUARDED_BY(mu_) = false;
  // The job whose claim the lease manager was last told of, and whether it changed since.
  std::string claim_told_ ABSL_GUARDED_BY(mu_);
  bool claim_changed_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> notes_pending_{false};
  std::atomic<LeaseManager*> leases_{nullptr};
  std::unique_ptr<ResourceBook> book_;

  std::thread monitor_;
  std::unique_ptr<ThreadPool> outbound_;
};

}  // namespace drover

#endif  // DROVER_SCHEDULER_SCHEDULER_CORE_H_
