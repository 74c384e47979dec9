// TaskSubmitter: runs this process's tasks on leased workers.
//
// Tasks are grouped by scheduling key (function, resource shape and placement). For each key it
// holds worker leases granted by the scheduler and pushes tasks straight to those
// workers over one connection each (a Unix socket on this node, TCP to others), many
// in flight per worker: as many as keep about a millisecond of work queued there, so
// no-op tasks stream by the hundred while long tasks go one at a time to whichever
// worker is free. It asks for another lease while tasks wait and no worker has room,
// and hands a lease back (closes the connection) once its worker has been idle a while.
//
// Failures: a worker whose connection breaks is asked about (its agent's
// WaitWorkerExit: exit code or signal, stderr tail); its unfinished tasks are retried
// up to their max_retries on another worker, or fail naming the task, the node and how
// the worker ended.
//
// Threading: one mutex guards the keys and workers. Every worker connection is read
// by one ConnectionLoop thread (connection_loop.h; the process's, or one of the
// submitter's own), whose handlers never block: sends never wait (the loop writes
// what a full socket did not take), and a lost worker's unfinished tasks are handed
// to a thread of their own (asking its agent how it ended waits). The tasks that the
// replies of one loop wake-up free room for are sent at its end, one write per worker.
// Lease requests run on a pool (kMaxLeaseRequestsTotal threads, made on the first
// request), one RPC per posted request, at most that many outstanding across all keys:
// a freed slot goes to the key with the fewest requests out, so every key with waiting
// tasks keeps one asked while there are no more keys than slots (the scheduler forgets
// a request nobody asks about for 4 s). A failed request's back-off (also after a
// grant that could not be used) is a time on its key, ended by the housekeeping
// thread's timer, not a sleeping thread. Sends happen outside the mutex, and so does
// failing a task: failing its result runs the result's done callbacks on this thread,
// and a dependent task's callback comes back here (FailTask, Enqueue). Work decided
// under the mutex goes into an Outbox, carried out after it.
// Collaborators (seams.h): the scheduler's lease calls, worker connections, agents,
// the object table and the clock come in as interfaces, wired by runtime.cc and by
// unit tests (task_submitter_test.cc) with fakes.
//
// Thread-safe.
#ifndef DROVER_SDK_RUNTIME_TASK_SUBMITTER_H_
#define DROVER_SDK_RUNTIME_TASK_SUBMITTER_H_

#include <deque>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/framed_socket.h"
#include "common/thread_group.h"
#include "common/thread_pool.h"
#include "sdk/runtime/connection_loop.h"
#include "sdk/runtime/context.h"
#include "sdk/runtime/scheduler_outage.h"
#include "sdk/runtime/seams.h"

namespace drover::internal {

class TaskSubmitter {
 public:
  // What a submitter works with. Every pointer outlives the submitter.
  struct Deps {
    OwnerIdentity owner;
    LeaseClient* leases = nullptr;
    WorkerConnector* connector = nullptr;
    WorkerAgents* agents = nullptr;
    ObjectTable* objects = nullptr;
    Clock* clock = nullptr;
    // The process's outage notices: a lease request answered ends an outage told
    // elsewhere (so one outage is one "away" and one "back" line); may be null.
    SchedulerOutage* outage = nullptr;
    // Reads the worker connections (shared with the rest of the process); null: the
    // submitter makes its own.
    ConnectionLoop* loop = nullptr;
    // For tests: runs (without locks) after a granted worker's connection is watched
    // and before the worker is listed, so a test can order a frame before the listing.
    std::function<void()> watched_for_test;
  };
  // Timing of lease returns (the defaults suit production; tests shorten nothing but
  // drive `clock`).
  static constexpr absl::Duration kIdleReturn = absl::Milliseconds(200);
  // Lease requests outstanding across all keys (and the lease pool's threads).
  static constexpr int kMaxLeaseRequestsTotal = 8;

  explicit TaskSubmitter(Deps deps);
  ~TaskSubmitter();
  TaskSubmitter(const TaskSubmitter&) = delete;
  TaskSubmitter& operator=(const TaskSubmitter&) = delete;

  // Resolves the task's arguments, then queues it.
  void Submit(std::shared_ptr<TaskRecord> task);
  // Cancels the task making `ref`, if it is this submitter's. NOT_FOUND if it is not
  // (done already, or not a task of this process).
  absl::Status Cancel(const RefState* ref, bool force);
  // Fails everything queued, closes every connection and joins the threads.
  void Shutdown();

  // For tests and benchmarks: workers currently leased.
  int LeasedWorkers();
  // For tests, so they can wait for a step instead of sleeping: idle checks done,
  // back-off pauses begun after a failed lease request, and leased workers whose lease
  // the scheduler wants back.
  struct Progress {
    uint64_t housekeeping_passes = 0;
    uint64_t lease_backoffs = 0;
    int revoked_workers = 0;
    // "Lease revoked" frames handled (from listed workers or not yet listed ones).
    uint64_t revoke_frames = 0;
  };
  Progress ProgressForTest();

 private:
  struct Worker;
  struct Key {
    std::string name;
    proto::Resources shape;
    proto::PlacementHint hint;
    std::deque<std::shared_ptr<TaskRecord>> queue;
    std::vector<std::shared_ptr<Worker>> workers;
    int lease_requests = 0;  // outstanding (posted to the lease pool)
    uint64_t request_counter = 0;
    std::string pending_reason;
    // Ids of requests the scheduler answered "pending", asked again when the key next
    // gets a slot (the same id keeps the request's place in the scheduler's queue).
    std::vector<std::string> parked_ids;
    // After a failed request no other starts before this; the housekeeping timer
    // starts it then.
    absl::Time backoff_until = absl::InfinitePast();
    Backoff backoff{absl::Milliseconds(50), absl::Seconds(2)};
    // When it last got a slot (a counter): ties for a freed slot go to the oldest.
    uint64_t last_admitted = 0;
  };
  struct Worker {
    Key* key = nullptr;
    std::string lease_id;
    std::string node_id;
    std::string worker_id;
    std::string agent_address;
    std::unique_ptr<FramedSocket> sock;
    std::unordered_map<uint64_t, std::shared_ptr<TaskRecord>> in_flight;
    size_t in_flight_bytes = 0;
    uint64_t next_seq = 1;
    // Exponential average of the run time of its tasks (µs); sets the pipeline depth.
    double avg_run_us = -1;
    absl::Time idle_since = absl::InfinitePast();
    bool lost = false;
    // The scheduler wants the lease back (a pending job claims it): no new tasks go to
    // it, and it is handed back once those sent have finished.
    bool revoked = false;
  };
  // A batch of frames for one worker, sent after the mutex is released.
  struct Send {
    std::shared_ptr<Worker> worker;
    std::string frames;
  };
  // What a section under the mutex decided to do once it is released: frames to send
  // and tasks to fail (their results' done callbacks may take the mutex again). It
  // also keeps the failed tasks alive past the mutex: the last reference to an
  // argument, dropped with its task, releases the argument's store object.
  struct Outbox {
    std::vector<Send> sends;
    std::vector<std::pair<std::shared_ptr<TaskRecord>, absl::Status>> failures;
  };

  void Enqueue(std::shared_ptr<TaskRecord> task) ABSL_LOCKS_EXCLUDED(mu_);
  // Hands queued tasks of `k` to workers with room, and asks for leases if tasks wait.
  void PumpLocked(Key& k, Outbox* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends, then fails, what `out` holds.
  void Flush(Outbox& out) ABSL_LOCKS_EXCLUDED(mu_);
  // The loop's batch end: sends what the frames of its wake-up decided (loop_out_).
  void FlushLoopOutbox() ABSL_LOCKS_EXCLUDED(mu_);
  size_t DepthOf(const Worker& w) const;
  // Lease requests `k` wants outstanding now (0 unless tasks wait).
  int WantedRequestsLocked(const Key& k) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts requests of `k` while it wants more, it is not backing off and the total
  // cap allows.
  void StartRequestsLocked(Key& k) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands free request slots to the keys that want them, fewest outstanding first
  // (after a request ended, or a back-off did). Returns the earliest end of a back-off
  // still running (InfiniteFuture if none).
  absl::Time AdmitLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartRequestLocked(Key& k) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One lease request (an RPC the scheduler holds up to kLeaseWaitMs), on the pool.
  void RequestLease(Key* k, std::string request_id) ABSL_LOCKS_EXCLUDED(mu_);
  // A frame from `w` (the loop's thread).
  void OnFrame(const std::shared_ptr<Worker>& w, std::string_view payload)
      ABSL_LOCKS_EXCLUDED(mu_);
  // `w`'s connection ended (the loop's thread): its unfinished tasks go to a thread
  // that asks its agent how it ended, then retries or fails them (RetryOrFail).
  void WorkerLost(const std::shared_ptr<Worker>& w, const absl::Status& why)
      ABSL_LOCKS_EXCLUDED(mu_);
  void RetryOrFail(const std::shared_ptr<Worker>& w, const absl::Status& why,
                   std::vector<std::shared_ptr<TaskRecord>> unfinished) ABSL_LOCKS_EXCLUDED(mu_);
  // Hands `w`'s lease back (closes the connection; its agent returns the lease).
  // REQUIRES: nothing in flight on it.
  void HandBackLocked(const std::shared_ptr<Worker>& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HousekeepingLoop();
  // The error a task gets once the connection loop failed (loop_failed_), naming it.
  absl::Status LoopFailedError(const TaskRecord& t) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails every queued task of every key with LoopFailedError.
  void FailAllQueuedLocked(Outbox* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails the task's result: runs its dependents' callbacks on this thread.
  void FailTask(const std::shared_ptr<TaskRecord>& t, absl::Status s) ABSL_LOCKS_EXCLUDED(mu_);
  std::string KeyName(const TaskRecord& t, const std::map<std::string, uint64_t>& bytes) const;

  const OwnerIdentity owner_;
  LeaseClient* const leases_;
  WorkerConnector* const connector_;
  WorkerAgents* const agents_;
  ObjectTable& objects_;
  Clock* const clock_;
  SchedulerOutage* const outage_;
  // Before the workers (their sockets call the loop until they close).
  std::unique_ptr<ConnectionLoop> own_loop_;
  ConnectionLoop* const loop_;
  const std::function<void()> watched_for_test_;

  // What the loop's handlers (OnFrame) decided during one wake-up of the loop, sent at
  // its end (FlushLoopOutbox). Touched by the loop thread only (filled under mu_).
  Outbox loop_out_;

  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Key>> keys_ ABSL_GUARDED_BY(mu_);
  // Result id -> task, for Cancel, while queued or in flight.
  std::unordered_map<const RefState*, std::weak_ptr<TaskRecord>> by_result_ ABSL_GUARDED_BY(mu_);

  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  // Why the connection loop failed, once a granted worker could not be watched for it:
  // from then on every task fails with it.
  absl::Status loop_failed_ ABSL_GUARDED_BY(mu_);
  absl::CondVar cv_;  // shutdown_
  uint64_t housekeeping_passes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t lease_backoffs_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t revoke_frames_ ABSL_GUARDED_BY(mu_) = 0;
  int total_requests_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t admissions_ ABSL_GUARDED_BY(mu_) = 0;
  // Runs lease requests; made on the first (a process that submits nothing has none).
  std::unique_ptr<ThreadPool> lease_pool_ ABSL_GUARDED_BY(mu_);
  // Threads of lost workers (RetryOrFail); Shutdown waits for them.
  ThreadGroup threads_;
  std::thread housekeeping_;
};

}  // namespace drover::internal

#endif  // DROVER_SDK_RUNTIME_TASK_SUBMITTER_H_
