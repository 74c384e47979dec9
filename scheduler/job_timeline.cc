#include "scheduler/job_timeline.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "common/exit_text.h"
#include "proto/lease.pb.h"
#include "scheduler/generation.h"

namespace drover {

JobTimeline::JobTimeline(Clock* clock, TimelineLimits limits) : clock_(clock), limits_(limits) {}

bool JobTimeline::IsFailure(const proto::TimelineEvent& e) {
  switch (e.kind()) {
    case proto::TIMELINE_RANK_EXITED:
    case proto::TIMELINE_WORKER_EXITED:
      return Failed(e.exit());
    case proto::TIMELINE_ACTOR:
      return e.state() == proto::ActorState_Name(proto::ACTOR_DEAD) ||
             e.state() == proto::ActorState_Name(proto::ACTOR_RESTARTING);
    case proto::TIMELINE_ENDED:
      return e.state() == proto::JobState_Name(proto::FAILED);
    default:
      return false;
  }
}

void JobTimeline::Record(const std::string& job_id, proto::TimelineEvent event) {
  if (event.time_us() == 0) event.set_time_us(absl::ToUnixMicros(clock_->Now()));
  if (listener_) listener_(job_id, event);
  absl::MutexLock lock(&mu_);
  if (IsFailure(event)) {
    failures_.push_front({job_id, event});
    if (failures_.size() > limits_.failures) failures_.pop_back();
  }
  JobEvents& j = jobs_[job_id];
  TouchLocked(job_id, j);
  j.events.push_back(std::move(event));
  if (j.events.size() > limits_.events_per_job) {
    j.events.pop_front();
    ++j.dropped;
  }
  EvictJobsLocked();
}

void JobTimeline::TouchLocked(const std::string& job_id, JobEvents& j) {
  if (j.last_touch != 0) by_touch_.erase(j.last_touch);
  j.last_touch = ++touches_;
  by_touch_[j.last_touch] = job_id;
}

void JobTimeline::EvictJobsLocked() {
  while (jobs_.size() > limits_.jobs && !by_touch_.empty()) {
    auto oldest = by_touch_.begin();
    auto it = jobs_.find(oldest->second);
    if (it != jobs_.end()) {
      activity_ -= it->second.activity.size();
      jobs_.erase(it);
    }
    by_touch_.erase(oldest);
  }
}

void JobTimeline::EvictActivityLocked() {
  for (auto t = by_touch_.begin(); activity_ > limits_.activity_total && t != by_touch_.end(); ++t) {
    auto it = jobs_.find(t->second);
    if (it == jobs_.end()) continue;
    JobEvents& j = it->second;
    while (activity_ > limits_.activity_total && !j.activity.empty()) {
      j.activity.pop_front();
      ++j.activity_dropped;
      --activity_;
    }
  }
}

bool JobTimeline::NewBatchLocked(const std::string& reporter, uint64_t seq) {
  Reporter& r = reporters_[reporter];
  if (seq <= r.seq) return false;
  r.seq = seq;
  if (r.touch != 0) reporters_by_touch_.erase(r.touch);
  r.touch = ++reporter_touches_;
  reporters_by_touch_[r.touch] = reporter;
  while (reporters_.size() > limits_.reporters && !reporters_by_touch_.empty()) {
    reporters_.erase(reporters_by_touch_.begin()->second);
    reporters_by_touch_.erase(reporters_by_touch_.begin());
  }
  return true;
}

namespace {

bool Reportable(proto::TimelineEventKind kind) {
  return kind == proto::TIMELINE_TASK || kind == proto::TIMELINE_PULL ||
         kind == proto::TIMELINE_COLLECTIVE;
}

// Cuts what a reporter sent to sizes a person reads, so a timeline's memory is bounded.
void Clip(std::string* s, size_t max) {
  if (s->size() > max) {
    s->resize(max - 3);
    s->append("...");
  }
}

void ClipStrings(proto::TimelineEvent* e) {
  Clip(e->mutable_node_id(), 128);
  Clip(e->mutable_worker_id(), 128);
  Clip(e->mutable_actor_id(), 128);
  Clip(e->mutable_lease_id(), 128);
  Clip(e->mutable_source_node_id(), 128);
  Clip(e->mutable_object_id(), 192);
  Clip(e->mutable_name(), 192);
  Clip(e->mutable_detail(), 512);
  Clip(e->mutable_state(), 64);
  if (e->ranks_size() > 1) e->mutable_ranks()->Truncate(1);
  e->clear_exit();
}

}  // namespace

absl::StatusOr<proto::ReportTimelineReply> JobTimeline::Report(
    const proto::ReportTimelineRequest& req) {
  if (req.reporter().empty() || req.seq() == 0) {
    return absl::InvalidArgumentError("ReportTimeline needs a reporter and a batch number (seq) from 1");
  }
  int events = 0;
  for (const proto::JobTimelineReport& j : req.jobs()) {
    if (j.job_id().empty()) return absl::InvalidArgumentError("ReportTimeline: a job's events without its job_id");
    if (j.dropped() < 0) {
      return absl::InvalidArgumentError(absl::StrCat("ReportTimeline: job ", j.job_id(),
                                                     ": negative dropped count ", j.dropped()));
    }
    for (const proto::TimelineEvent& e : j.events()) {
      if (!Reportable(e.kind())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "ReportTimeline: job ", j.job_id(), ": an event of kind ",
            proto::TimelineEventKind_Name(e.kind()),
            "; only TIMELINE_TASK, TIMELINE_PULL and TIMELINE_COLLECTIVE may be reported"));
      }
    }
    events += j.events_size();
  }
  if (events > kMaxReportedEvents) {
    return absl::InvalidArgumentError(absl::StrCat("ReportTimeline: ", events,
                                                   " events in one batch; at most ",
                                                   kMaxReportedEvents));
  }
  const int64_t now_us = absl::ToUnixMicros(clock_->Now());
  proto::ReportTimelineReply reply;
  absl::MutexLock lock(&mu_);
  if (!NewBatchLocked(req.reporter(), req.seq())) {
    reply.set_duplicate(true);
    return reply;
  }
  for (const proto::JobTimelineReport& r : req.jobs()) {
    auto it = jobs_.find(r.job_id());
    if (it == jobs_.end()) {
      reply.set_unknown_job(reply.unknown_job() + r.events_size());
      continue;
    }
    JobEvents& j = it->second;
    TouchLocked(r.job_id(), j);
    j.activity_dropped += r.dropped();
    for (const proto::TimelineEvent& in : r.events()) {
      proto::TimelineEvent& e = j.activity.emplace_back(in);
      ClipStrings(&e);
      if (e.time_us() == 0) e.set_time_us(now_us);
      ++activity_;
    }
    reply.set_recorded(reply.recorded() + r.events_size());
    while (j.activity.size() > limits_.activity_per_job) {
      j.activity.pop_front();
      ++j.activity_dropped;
      --activity_;
    }
  }
  EvictActivityLocked();
  return reply;
}

std::optional<JobTimeline::Events> JobTimeline::Get(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return std::nullopt;
  const JobEvents& j = it->second;
  Events out;
  out.dropped = j.dropped;
  out.activity_dropped = j.activity_dropped;
  // Reports arrive in batches from many processes: order them by time, then merge
  // them into the scheduler's own events (already in time order).
  std::vector<proto::TimelineEvent> reported(j.activity.begin(), j.activity.end());
  auto by_time = [](const proto::TimelineEvent& a, const proto::TimelineEvent& b) {
    return a.time_us() < b.time_us();
  };
  std::stable_sort(reported.begin(), reported.end(), by_time);
  out.events.reserve(j.events.size() + reported.size());
  std::merge(j.events.begin(), j.events.end(), reported.begin(), reported.end(),
             std::back_inserter(out.events), by_time);
  return out;
}

std::vector<JobTimeline::Failure> JobTimeline::RecentFailures() {
  absl::MutexLock lock(&mu_);
  return std::vector<Failure>(failures_.begin(), failures_.end());
}

proto::TimelineEvent TimelineEventOf(proto::TimelineEventKind kind, int generation,
                                     const std::string& node_id, const std::vector<int>& ranks,
                                     const std::string& detail) {
  proto::TimelineEvent e;
  e.set_kind(kind);
  e.set_generation(generation);
  e.set_node_id(node_id);
  for (int r : ranks) e.add_ranks(r);
  e.set_detail(detail);
  return e;
}

proto::TimelineEvent RankExitEvent(const proto::ExitInfo& exit) {
  proto::TimelineEvent e = TimelineEventOf(proto::TIMELINE_RANK_EXITED, exit.generation(),
                                           exit.node_id(), {exit.rank()},
                                           DescribeExit(exit, /*with_stderr=*/false));
  *e.mutable_exit() = exit;
  if (!Failed(exit)) e.mutable_exit()->clear_stderr_tail();
  return e;
}

proto::TimelineEvent JobEndEvent(proto::JobState state, int generation, const std::string& reason) {
  proto::TimelineEvent e = TimelineEventOf(proto::TIMELINE_ENDED, generation, "", {}, reason);
  e.set_state(proto::JobState_Name(state));
  return e;
}

}  // namespace drover
