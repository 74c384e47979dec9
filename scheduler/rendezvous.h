// Rendezvous: the key-value scopes of running job generations (the KV that collective
// groups, torchrun's c10d store and Gloo meet in), with the waits on them.
//
// A scope is (job id, generation). Calls are accepted only while the scope's job runs
// that generation, which SchedulerCore tells as jobs change (JobChanged: from a job's
// first start on, so a queued job costs nothing here): a job that ends is forgotten
// with its scopes (only jobs not ended are kept), a restarted one drops those of older
// generations, and a wait on a scope that ends is answered ABORTED at once. Values live
// in a JobKv (job_kv.h).
//
// Why a class and a lock of its own: rendezvous traffic (every rank's sets and
// blocking gets at each group's start) must not queue behind placement and heartbeats
// on the core's mutex, and a wait for a key must not wake on every change of the
// scheduler. Waits are woken per job: a change in one job's KV wakes only its waiters.
//
// Thread safety: thread-safe. Lock order: SchedulerCore's mutex before this one (the
// core calls JobChanged holding it); nothing is called out while it is held.
#ifndef DROVER_SCHEDULER_RENDEZVOUS_H_
#define DROVER_SCHEDULER_RENDEZVOUS_H_

#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "proto/scheduler.pb.h"
#include "scheduler/job_kv.h"

namespace drover {

class Rendezvous {
 public:
  // `clock` times the waits; not owned.
  explicit Rendezvous(Clock* clock = Clock::Real()) : clock_(clock) {}

  // The job `job_id` is now in `state` running generation `generation` (its restart
  // count). Scopes of older generations are dropped; an ended job is forgotten with all
  // of them. Idempotent (cheap when nothing changed); PENDING for a job not known here
  // (it never ran) is ignored.
  // `failing`: a process of that generation failed and the job restarts (what a
  // generation watch hears, with the state and the generation).
  void JobChanged(const std::string& job_id, proto::JobState state, int generation,
                  bool failing = false) ABSL_LOCKS_EXCLUDED(mu_);
  // What is known of a job, for a generation watch (SchedulerCore::WatchGeneration)
  // waiting here instead of under the core's lock: it reads Seen, then AwaitChange.
  struct Seen {
    bool known = false;  // false: not started, or ended (forgotten)
    proto::JobState state = proto::PENDING;
    int generation = 0;
    bool failing = false;
  };
  Seen Observe(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until the job is no longer as `seen` says (a JobChanged that changed it, or
  // the job is forgotten), Stop() is called, or `deadline` passes. Returns at once for
  // a job not known.
  void AwaitChange(const std::string& job_id, const Seen& seen, absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Each call fails with FAILED_PRECONDITION unless the scope's job runs that generation
  // (a job never started or ended included), and as JobKv says for bad keys and values.
  absl::Status Set(const proto::KvSetRequest& req) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits up to `wait` (at most 5 minutes) for the key: DEADLINE_EXCEEDED naming it;
  // ABORTED if the generation ends (or Stop() is called) while waiting.
  absl::StatusOr<proto::KvGetReply> Get(const proto::KvGetRequest& req, absl::Duration wait)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<proto::KvCompareAndSetReply> CompareAndSet(
      const proto::KvCompareAndSetRequest& req) ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<proto::KvAddReply> Add(const proto::KvAddRequest& req) ABSL_LOCKS_EXCLUDED(mu_);

  // Ends every wait, now and later. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);
  // For lock-order annotations only (scheduler_core.h: ABSL_ACQUIRED_BEFORE).
  absl::Mutex* mutex() ABSL_LOCK_RETURNED(mu_) { return &mu_; }

  // Scopes holding values, and jobs known (for tests).
  size_t scopes() ABSL_LOCKS_EXCLUDED(mu_);
  size_t jobs() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Job {
    proto::JobState state = proto::PENDING;
    int generation = 0;
    bool failing = false;
    // Signalled (SignalAll) when the job's KV or state changes, and by Stop(). Made by
    // the first wait (most jobs never wait); shared, so a waiter keeps it alive.
    std::shared_ptr<absl::CondVar> changed;
  };
  // OK if `scope`'s job runs that generation.
  absl::Status CheckScopeLocked(const proto::KvScope& scope) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SignalLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Clock* const clock_;
  absl::Mutex mu_;
  std::map<std::string, Job> jobs_ ABSL_GUARDED_BY(mu_);
  JobKv kv_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  // Signalled when a job becomes known here, and by Stop(): what a wait for a job not
  // known yet (queued, or placed again after a restart) wakes on.
  absl::CondVar added_;
};

}  // namespace drover

#endif  // DROVER_SCHEDULER_RENDEZVOUS_H_
