// TimelineReporter: tells the scheduler's job timelines what only this process saw
// (proto/scheduler.proto ReportTimeline): the tasks and actor calls a worker ran, the
// object pulls an agent made, the collective operations a rank ran. Used by task
// workers (sdk/runtime/worker_server.h), agents (node_agent/agent.h) and collective
// groups (collective/timed_group.h).
//
// Off the caller's path: Add() moves a compact record into a buffer under a mutex and
// returns; it never waits on the network. The buffer holds at most `capacity` records;
// a record that finds it full is dropped and counted, and the count goes to the
// scheduler with the next batch (per job), so a timeline says how much it is missing.
// A thread of the reporter's own sends the buffer every `interval`, or sooner when
// `batch` records wait (but at most once per `min_gap`, so a process that runs 10^5
// tasks a second costs the scheduler two batches a second, not 10^5 events). A batch
// that fails is sent again with the same number (the scheduler applies a number once)
// up to `attempts` times; then its records count as dropped. An older scheduler that
// does not know ReportTimeline (UNIMPLEMENTED) turns the reporter off.
//
// Memory: at most `capacity` buffered records plus one batch in flight.
// Thread safety: thread-safe. The destructor sends what is buffered (bounded by the
// sender's deadline) and stops the thread.
#ifndef DROVER_COMMON_TIMELINE_REPORTER_H_
#define DROVER_COMMON_TIMELINE_REPORTER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "proto/scheduler.pb.h"

namespace drover {

// One thing that happened, as a span. Empty strings take the reporter's defaults.
struct TimelineRecord {
  proto::TimelineEventKind kind = proto::TIMELINE_TASK;
  int64_t start_us = 0;  // since the Unix epoch
  int64_t duration_us = 0;
  int64_t bytes = 0;
  int rank = -1;
  bool failed = false;
  std::string name;       // TASK: the function; COLLECTIVE: the operation
  std::string job_id;     // empty: the reporter's job
  std::string node_id;    // empty: the reporter's node
  std::string actor_id;   // TASK: the actor a call went to
  bool actor_call = false;  // TASK: a call to the reporter's actor (SetActor)
  std::string object_id;  // PULL
  std::string source_node_id;  // PULL
  std::string detail;
};

struct TimelineReporterOptions {
  // Names the reporter in the scheduler's retry bookkeeping ("w-3@node-1", "agent
  // node-2"); the pid and a random tag are added.
  std::string reporter;
  // Defaults for every record's job and node, and the worker every event names.
  std::string job_id;
  std::string node_id;
  std::string worker_id;
  // At most capacity * (1 s / min_gap) records a second reach the scheduler (4,096
  // with these), whatever the rate of tasks: the rest are counted as dropped.
  size_t capacity = 2048;
  size_t batch = 1024;
  absl::Duration interval = absl::Seconds(1);
  absl::Duration min_gap = absl::Milliseconds(500);
  int attempts = 3;
  Clock* clock = Clock::Real();
};

// Sends one batch; the reporter's thread calls it. It must have a deadline.
using TimelineSender = std::function<absl::Status(const proto::ReportTimelineRequest&)>;

// A sender to the scheduler at `address` (a 2 s deadline per batch).
TimelineSender SchedulerTimelineSender(const std::string& address, const std::string& token);

// Reads the switches a job sets in its processes' environment: `name` ("0"/"1"), or
// `fallback` when unset or empty.
bool TimelineSwitch(const char* name, bool fallback);
// DROVER_TIMELINE_BUFFER (records a reporter buffers), or `fallback`.
size_t TimelineBufferFromEnvironment(size_t fallback);

class TimelineReporter {
 public:
  TimelineReporter(TimelineReporterOptions options, TimelineSender send);
  ~TimelineReporter();
  TimelineReporter(const TimelineReporter&) = delete;
  TimelineReporter& operator=(const TimelineReporter&) = delete;

  // Buffers `record`, or counts it dropped when the buffer is full. Never blocks on
  // the network.
  void Add(TimelineRecord record);
  // False while Add would drop whatever comes (a full buffer): a caller on a hot path
  // may then skip making its record (and reading clocks) and call CountDropped().
  bool Accepting() const { return !full_.load(std::memory_order_relaxed); }
  // Counts a record of the reporter's job as dropped. Lock-free.
  void CountDropped() { dropped_fast_.fetch_add(1, std::memory_order_relaxed); }

  // The actor whose calls records marked `actor_call` are (a worker hosts one).
  void SetActor(const std::string& actor_id);

  // Sends what is buffered now and waits until it was sent (or given up), at most
  // `timeout`. True if nothing is left to send.
  bool Flush(absl::Duration timeout);

  struct Counts {
    int64_t added = 0;    // records buffered
    int64_t dropped = 0;  // records dropped: buffer full, or their batch failed
    int64_t sent = 0;     // records the scheduler acknowledged
    int64_t batches = 0;  // batches acknowledged
  };
  Counts counts();

 private:
  struct Batch {
    proto::ReportTimelineRequest request;
    int attempts = 0;
    int64_t records = 0;
    std::map<std::string, int64_t> per_job;  // records per job, to count them if lost
  };
  // What the thread takes from under the lock to make a batch of, without it.
  struct Taken {
    std::vector<TimelineRecord> records;
    int64_t dropped_default = 0;
    std::map<std::string, int64_t> dropped_other;
    uint64_t seq = 0;
    std::string actor_id;
  };

  void Run();
  // True if records or drop counts wait to be sent.
  bool HasWorkLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the buffer (its memory is reused: spare_ becomes the buffer) and the drop
  // counts, and numbers the batch.
  Taken TakeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The batch of `t` (no lock needed).
  std::unique_ptr<Batch> Build(const Taken& t) const;
  // When the thread should send next.
  absl::Time NextSendLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FillEvent(const TimelineRecord& r, const std::string& actor_id,
                 proto::TimelineEvent* e) const;

  const TimelineReporterOptions options_;
  const TimelineSender send_;
  const std::string reporter_id_;

  absl::Mutex mu_;
  absl::CondVar wake_;  // the thread: stop, flush, a full batch, the first record
  absl::CondVar done_;  // Flush waiters: a batch was sent or given up
  std::vector<TimelineRecord> buffer_ ABSL_GUARDED_BY(mu_);
  // The other buffer, empty, its memory kept (fresh memory each batch would cost a page
  // fault per ~15 records on the caller's path).
  std::vector<TimelineRecord> spare_ ABSL_GUARDED_BY(mu_);
  std::string actor_id_ ABSL_GUARDED_BY(mu_);
  // Set while Add would drop whatever comes (a full buffer, stopped, off): Add then
  // counts a record of the default job in dropped_fast_ without taking mu_.
  std::atomic<bool> full_{false};
  std::atomic<int64_t> dropped_fast_{0};
  // Records dropped since the last batch: of the default job, and of others.
  int64_t dropped_default_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int64_t> dropped_other_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Batch> pending_ ABSL_GUARDED_BY(mu_);  // failed, to be sent again
  bool sending_ ABSL_GUARDED_BY(mu_) = false;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;  // a full batch signalled the thread
  bool idle_ ABSL_GUARDED_BY(mu_) = false;   // the thread waits for a first record
  bool flush_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool off_ ABSL_GUARDED_BY(mu_) = false;  // the scheduler does not take reports
  absl::Time last_send_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  Counts counts_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace drover

#endif  // DROVER_COMMON_TIMELINE_REPORTER_H_
