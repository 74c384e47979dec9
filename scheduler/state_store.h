// Where the scheduler keeps the records that must survive it: jobs, actors and id
// counters.
//
// Two implementations: in memory (the default; lost when the scheduler exits) and
// Redis through hiredis (durable; a restarted scheduler reloads every job and
// reattaches to the ones still running on the agents). Node records are not stored:
// agents re-register on their own after a scheduler restart.
//
// Thread safety: implementations are safe to call from several threads.
// Errors: UNAVAILABLE when the backend cannot be reached (the caller may retry).
#ifndef DROVER_SCHEDULER_STATE_STORE_H_
#define DROVER_SCHEDULER_STATE_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/common.pb.h"

namespace drover {

class StateStore {
 public:
  virtual ~StateStore() = default;

  // Inserts or replaces the record keyed by job.job_id(), unless the stored record has
  // a higher `version` (then it does nothing and returns OK): a write that arrives late
  // (sent on a connection that timed out, then executed) never undoes a newer one.
  virtual absl::Status PutJob(const proto::JobInfo& job) = 0;
  // Every stored job, in no particular order.
  virtual absl::StatusOr<std::vector<proto::JobInfo>> LoadJobs() = 0;
  // Inserts or replaces the actor record `record` (opaque bytes: LeaseManager encodes
  // it) keyed by `actor_id`, unless the stored one has a higher `version` (as PutJob).
  // The default keeps nothing (a store that does not outlive the scheduler).
  virtual absl::Status PutActor(const std::string& actor_id, int64_t version,
                                const std::string& record) {
    return absl::OkStatus();
  }
  // Every stored actor record, in no particular order.
  virtual absl::StatusOr<std::vector<std::string>> LoadActors() {
    return std::vector<std::string>();
  }
  // Atomically advances the named counter by `count` (>= 1) and returns its new value:
  // the ids new_value - count + 1 .. new_value are the caller's (first call: 1..count).
  virtual absl::StatusOr<int64_t> ReserveIds(const std::string& counter, int64_t count) = 0;
  // One id: ReserveIds(counter, 1).
  absl::StatusOr<int64_t> NextId(const std::string& counter) { return ReserveIds(counter, 1); }
  // "memory" or "redis HOST:PORT", for `drover status`.
  virtual std::string Describe() const = 0;
  // True if every call completes in memory, at once and without I/O (so a caller may
  // make it under its own lock); false for a store behind a network connection.
  virtual bool InMemory() const { return false; }
  // False if records put are dropped (never loaded back): callers need not make them.
  virtual bool KeepsRecords() const { return true; }
};

// Keeps everything in this process. With `keep_jobs` false it keeps only the counters
// and drops job and actor records (LoadJobs and LoadActors return none): for a scheduler whose state ends with
// its process and is never loaded back (drover-scheduler without --redis), where
// keeping a copy of every record would only cost memory (docs/scaling.md).
std::unique_ptr<StateStore> NewMemoryStateStore(bool keep_jobs = true);

// Connects to Redis at host:port; every key is prefixed with `key_prefix` so several
// clusters can share one server. Fails with UNAVAILABLE if Redis does not answer.
// A non-empty `password` is sent with AUTH on every connection (the first and each
// reconnect); FAILED_PRECONDITION if the server refuses it, or asks for one (NOAUTH)
// and `password` is empty.
absl::StatusOr<std::unique_ptr<StateStore>> NewRedisStateStore(
    const std::string& host, int port, const std::string& key_prefix,
    const std::string& password = "");

}  // namespace drover

#endif  // DROVER_SCHEDULER_STATE_STORE_H_
