// JobTimeline: what happened to each job, as the scheduler saw it, for `drover timeline`
// (GetJobTimeline), the dashboard and the scheduler's metrics: submission, each
// generation's placement per node, each node's start of its ranks, each rank's exit,
// restarts, the end; for drivers, their leases and actors (proto/scheduler.proto,
// TimelineEvent).
//
// In memory only, and bounded: at most `events_per_job` events per job (its oldest go
// first and are counted as dropped) and the events of at most `jobs` jobs (the job
// whose last event is oldest goes first). The last `failures` failure events of all
// jobs (failed ranks and workers, dead actors, failed jobs) are kept apart for the
// dashboard's failure list. A restarted scheduler starts empty.
//
// A listener, if set, hears every event as it is recorded (the scheduler's metrics
// take placement latency from it).
//
// Threading: thread-safe. Its mutex is a leaf: SchedulerCore calls Record under its
// own mutex, LeaseManager under its own; the listener is called under the caller's
// lock, not this one, and must be quick and take only leaf locks.
#ifndef DROVER_SCHEDULER_JOB_TIMELINE_H_
#define DROVER_SCHEDULER_JOB_TIMELINE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "proto/scheduler.pb.h"

namespace drover {

struct TimelineLimits {
  size_t events_per_job = 2000;
  size_t jobs = 256;
  size_t failures = 200;
};

class JobTimeline {
 public:
  using Listener = std::function<void(const std::string& job_id, const proto::TimelineEvent&)>;
  struct Events {
    std::vector<proto::TimelineEvent> events;  // oldest first
    int64_t dropped = 0;
  };
  struct Failure {
    std::string job_id;
    proto::TimelineEvent event;
  };

  // `clock` (not owned) stamps the events; it must outlive this.
  explicit JobTimeline(Clock* clock, TimelineLimits limits = {});

  // Stamps `event` with the clock's time (unless it has one) and keeps it.
  void Record(const std::string& job_id, proto::TimelineEvent event);
  // REQUIRES: before the first Record.
  void SetListener(Listener listener) { listener_ = std::move(listener); }

  // The job's events, or nullopt if none are kept.
  std::optional<Events> Get(const std::string& job_id);
  // The most recent failure events of all jobs, newest first.
  std::vector<Failure> RecentFailures();

  // True for the events the failure list keeps.
  static bool IsFailure(const proto::TimelineEvent& e);

 private:
  struct JobEvents {
    std::deque<proto::TimelineEvent> events;
    int64_t dropped = 0;
    uint64_t last_touch = 0;
  };

  Clock* const clock_;
  const TimelineLimits limits_;
  Listener listener_;

  absl::Mutex mu_;
  std::map<std::string, JobEvents> jobs_ ABSL_GUARDED_BY(mu_);
  // last_touch -> job id: which job's events go first when there are too many jobs.
  std::map<uint64_t, std::string> by_touch_ ABSL_GUARDED_BY(mu_);
  uint64_t touches_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Failure> failures_ ABSL_GUARDED_BY(mu_);
};

// An event of `kind` for `generation` on `node_id` (may be empty) with `ranks`.
proto::TimelineEvent TimelineEventOf(proto::TimelineEventKind kind, int generation,
                                     const std::string& node_id = "",
                                     const std::vector<int>& ranks = {},
                                     const std::string& detail = "");

// RANK_EXITED for `exit` (the stderr tail kept only for a failure).
proto::TimelineEvent RankExitEvent(const proto::ExitInfo& exit);
// ENDED in `state` for `reason`.
proto::TimelineEvent JobEndEvent(proto::JobState state, int generation, const std::string& reason);

}  // namespace drover

#endif  // DROVER_SCHEDULER_JOB_TIMELINE_H_
