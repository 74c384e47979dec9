// JobPersister: the scheduler's writes to its StateStore, kept off the scheduler's lock.
//
// A Redis call can take seconds (a stalled or restarting server; hiredis times out
// after 2 s). Made under SchedulerCore's mutex, it would stall heartbeats and get
// healthy nodes declared dead. So:
//   - Put queues a job's record (under the scheduler's lock; it never waits on the
//     store). The persister's own thread writes the queued records in the order their
//     jobs were first queued; a job queued again before it was written is written once,
//     with its newest record (coalesced). A failed write is retried with back-off
//     (100 ms doubling to 2 s) until it succeeds; the store's PutJob ignores a record
//     older than the stored one, so retries and late writes never undo newer ones.
//   - PutActor queues an actor's record the same way (LeaseManager's records, opaque
//     here), in the same order as jobs, coalesced per actor.
//   - Replies that promise durability (SubmitJob, CancelJob) wait in AwaitStored for the
//     job's queued records to be written, without the scheduler's lock.
//   - Launches wait in WhenStored (a callback, never a blocked thread) until the record
//     naming their placement is written: a start is sent only once a restarted
//     scheduler would find where it went (docs/architecture.md, "starts exactly once").
//   - A store that works in memory (StateStore::InMemory) is written through at once
//     by Put: nothing can stall, and the launch path keeps no extra thread hop.
//   - Ids come from blocks reserved in the store ahead of need (ReserveIds): TakeId,
//     called under the scheduler's lock, returns one at once, and asks the thread for
//     the next block when the current one runs low. Only if it ran dry (a store slower
//     than the submissions) does it return nullopt; the caller then waits in WaitForIds
//     without its lock. A scheduler restarted over a durable store skips the unused
//     rest of its blocks: ids stay unique, with gaps.
//
// Ownership: the store is not owned and must outlive the persister. Thread safety:
// every method is thread-safe. Timing (back-off, waits) follows the given Clock.
#ifndef DROVER_SCHEDULER_JOB_PERSISTER_H_
#define DROVER_SCHEDULER_JOB_PERSISTER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "proto/common.pb.h"
#include "scheduler/state_store.h"

namespace drover {

class JobPersister {
 public:
  // Ids reserved per store call, and how few left trigger the next reservation.
  static constexpr int64_t kIdBlock = 32;
  static constexpr int64_t kIdLowWater = 8;
  // A store that has failed every call for this long is down, not slow (Health).
  static constexpr absl::Duration kDownAfter = absl::Seconds(10);

  // `write_delay` (tests only: DROVER_TEST_STORE_DELAY_MS) holds each job record this
  // long before its write, as a slow store would.
  JobPersister(StateStore* store, Clock* clock,
               absl::Duration write_delay = absl::ZeroDuration());
  // Stop(0).
  ~JobPersister();
  JobPersister(const JobPersister&) = delete;
  JobPersister& operator=(const JobPersister&) = delete;

  // Reserves a first block of each counter (synchronously: call it before serving) and
  // starts the writer thread. REQUIRES: called once.
  absl::Status Start(const std::vector<std::string>& counters);
  // Writes what is queued for at most `grace`, then stops the thread. Idempotent.
  void Stop(absl::Duration grace);

  // Queues `job`'s record for writing; replaces a queued, unwritten record of the job.
  // (An in-memory store is written at once.)
  void Put(const proto::JobInfo& job);
  // Queues an actor's record (StateStore::PutActor) like Put; never waits.
  void PutActor(const std::string& actor_id, int64_t version, std::string record);
  // Waits up to `timeout` until no record of `job_id` is queued or being written (every
  // record Put before the call is stored). UNAVAILABLE, naming the store and its last
  // error, if that does not happen in time.
  absl::Status AwaitStored(const std::string& job_id, absl::Duration timeout);
  // True if no record of `job_id` is queued or being written (every record Put before
  // the call is stored). Never waits.
  bool Stored(const std::string& job_id);
  // Stored, for each of `job_ids`.
  bool AllStored(const std::vector<std::string>& job_ids);
  // Calls `done(true)` once every record of `job_ids` Put before the call is stored: at
  // once (on the caller's thread) if they are, else on the writer's thread, with no lock
  // held. `done(false)` if the persister stops first (CancelWaits, Stop). Never waits.
  void WhenStored(std::vector<std::string> job_ids, std::function<void(bool stored)> done);
  // Calls every pending WhenStored callback with false, now and for later calls (the
  // owner is shutting down and must not wait on a store that may never answer).
  void CancelWaits();
  // UNAVAILABLE if the store has failed every call for longer than kDownAfter (it is
  // down: refuse new work at once rather than accept what cannot be saved); else OK.
  absl::Status Health();

  // The next id of `counter` (one of Start's counters) if one is reserved; nullopt if
  // the reserved ids ran out (then WaitForIds). Never waits on the store.
  std::optional<int64_t> TakeId(const std::string& counter);
  // Waits up to `timeout` until an id of `counter` is available (UNAVAILABLE if not).
  absl::Status WaitForIds(const std::string& counter, absl::Duration timeout);

  // Records queued and not yet written (for tests and status).
  size_t backlog();

 private:
  // Marks an actor's id in order_ and in_flight_ (job ids never start with it).
  static constexpr char kActorMark = '\x01';
  // Jobs and actors share one keyed path: queued by id (`key` in order_ and
  // in_flight_: the id, marked for an actor), coalesced, written in order off the lock
  // by `write`, and put back first in line if the write failed.
  template <typename Record>
  void QueueLocked(std::map<std::string, Record>& queued, const std::string& id,
                   const std::string& key, Record record) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  template <typename Record, typename Write>
  void WriteKeyedLocked(std::map<std::string, Record>& queued, const std::string& id,
                        const std::string& key, const std::string& what, Write write)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  struct IdBlocks {
    std::deque<std::pair<int64_t, int64_t>> ranges;  // [first, last], oldest first
    int64_t left = 0;                                // ids in `ranges`
  };

  void Loop();
  // Runs the WhenStored callbacks whose jobs are all stored (or all, with `stored`
  // false, when cancelling). Takes and releases mu_ around the calls.
  void RunWaitersLocked(bool cancel) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool StoredLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return queued_.count(job_id) == 0 && in_flight_ != job_id;
  }
  struct Waiter {
    std::vector<std::string> job_ids;
    std::function<void(bool)> done;
  };
  // A counter whose reserved ids are low; "" if none.
  std::string CounterToRefillLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RefillLocked(const std::string& counter) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WriteFrontLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Bookkeeping after a store call: back-off and the outage's start on failure.
  void NoteResultLocked(const absl::Status& s, const std::string& what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // UNAVAILABLE: `what`, why (the store's last error), and `then` (what the caller
  // should do; it differs: a refused call may simply be retried, an accepted one that is
  // not saved yet must be retried only with the same idempotency key).
  absl::Status UnavailableLocked(const std::string& what, const std::string& then)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddBlockLocked(const std::string& counter, int64_t last)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  StateStore* const store_;
  Clock* const clock_;
  const absl::Duration write_delay_;

  absl::Mutex mu_;
  // Signalled when work is queued, a store call ends, or Stop is called.
  absl::CondVar cv_;
  std::map<std::string, proto::JobInfo> queued_ ABSL_GUARDED_BY(mu_);
  // Actors' records not written yet: id -> (version, record).
  std::map<std::string, std::pair<int64_t, std::string>> actors_queued_ ABSL_GUARDED_BY(mu_);
  // Write order: ids of queued_, and kActorMark + id of actors_queued_.
  std::deque<std::string> order_ ABSL_GUARDED_BY(mu_);
  std::string in_flight_ ABSL_GUARDED_BY(mu_);          // job being written, or ""
  std::map<std::string, IdBlocks> ids_ ABSL_GUARDED_BY(mu_);
  // After a failed store call: no call before retry_at_; failing since when
  // (InfiniteFuture while the store answers) and with what error.
  absl::Time retry_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Duration backoff_ ABSL_GUARDED_BY(mu_);
  absl::Time failing_since_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);
  std::vector<Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  bool waits_cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;  // the thread has exited
  absl::Time stop_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  std::thread thread_;
};

}  // namespace drover

#endif  // DROVER_SCHEDULER_JOB_PERSISTER_H_
