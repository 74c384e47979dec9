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
// Reported events (Report: tasks, actor calls, object pulls, collective operations,
// told by the workers, agents and ranks that saw them) are kept apart from the
// scheduler's own, under bounds of their own: at most `activity_per_job` per job and
// `activity_total` across jobs (the oldest go first: of the job, then of the job whose
// last event is oldest); what reporters dropped and what these bounds let go is counted
// per job (Events::activity_dropped). Reports of jobs without a timeline here are
// ignored; a batch already applied (same reporter, seq not above its last) is not
// applied again. Strings of reported events are cut to a few hundred bytes, so the
// memory a job's timeline takes is bounded whatever reporters send.
//
// A listener, if set, hears every event the scheduler records itself (the scheduler's
// metrics take placement latency from it), not reported ones.
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
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "proto/scheduler.pb.h"

namespace drover {

struct TimelineLimits {
  size_t events_per_job = 2000;
  size_t jobs = 256;
  size_t failures = 200;
  // Reported events (tasks, pulls, collectives).
  size_t activity_per_job = 10000;
  size_t activity_total = 50000;
  // Reporters whose last batch number is remembered (the least recent go first).
  size_t reporters = 4096;
};

// The largest batch ReportTimeline takes.
inline constexpr int kMaxReportedEvents = 16384;

class JobTimeline {
 public:
  using Listener = std::function<void(const std::string& job_id, const proto::TimelineEvent&)>;
  struct Events {
    // The scheduler's and the reported events, oldest first (by time_us).
    std::vector<proto::TimelineEvent> events;
    int64_t dropped = 0;
    int64_t activity_dropped = 0;
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

  // Keeps the events of a reporter's batch (ReportTimeline). INVALID_ARGUMENT, and
  // nothing kept, if the batch is malformed (no reporter, seq 0, a kind reporters may
  // not send, too many events, a negative drop count).
  absl::StatusOr<proto::ReportTimelineReply> Report(const proto::ReportTimelineRequest& req);

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
    std::deque<proto::TimelineEvent> activity;  // reported, in arrival order
    int64_t activity_dropped = 0;
  };
  struct Reporter {
    uint64_t seq = 0;  // the last batch applied
    uint64_t touch = 0;
  };

  // Marks `j` (of `job_id`) the most recently active job.
  void TouchLocked(const std::string& job_id, JobEvents& j) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops whole jobs beyond limits_.jobs, least recently active first.
  void EvictJobsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops reported events beyond limits_.activity_total, oldest job first.
  void EvictActivityLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // False (and nothing changes) if `reporter` had batch `seq` applied already.
  bool NewBatchLocked(const std::string& reporter, uint64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Clock* const clock_;
  const TimelineLimits limits_;
  Listener listener_;

  absl::Mutex mu_;
  std::map<std::string, JobEvents> jobs_ ABSL_GUARDED_BY(mu_);
  // last_touch -> job id: which job's events go first when there are too many jobs.
  std::map<uint64_t, std::string> by_touch_ ABSL_GUARDED_BY(mu_);
  uint64_t touches_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Failure> failures_ ABSL_GUARDED_BY(mu_);
  size_t activity_ ABSL_GUARDED_BY(mu_) = 0;  // reported events kept, all jobs
  std::map<std::string, Reporter> reporters_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::string> reporters_by_touch_ ABSL_GUARDED_BY(mu_);
  uint64_t reporter_touches_ ABSL_GUARDED_BY(mu_) = 0;
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
