#include "scheduler/job_timeline.h"

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
  if (j.last_touch != 0) by_touch_.erase(j.last_touch);
  j.last_touch = ++touches_;
  by_touch_[j.last_touch] = job_id;
  j.events.push_back(std::move(event));
  if (j.events.size() > limits_.events_per_job) {
    j.events.pop_front();
    ++j.dropped;
  }
  while (jobs_.size() > limits_.jobs && !by_touch_.empty()) {
    auto oldest = by_touch_.begin();
    jobs_.erase(oldest->second);
    by_touch_.erase(oldest);
  }
}

std::optional<JobTimeline::Events> JobTimeline::Get(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return std::nullopt;
  Events out;
  out.events.assign(it->second.events.begin(), it->second.events.end());
  out.dropped = it->second.dropped;
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
