// SchedulerCore's counts for the metrics (scheduler_metrics.h) and the dashboard.
#include "scheduler/queue_policy.h"
#include "scheduler/scheduler_core.h"

namespace drover {

SchedulerCore::QueueCounts SchedulerCore::CountQueue() {
  QueueCounts counts;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, job] : jobs_) {
    if (job.info.state() == proto::PENDING) {
      ++counts.pending_by_reason[PendingReasonClass(job.info.reason())];
    }
    if (job.info.restarting()) ++counts.restarting;
  }
  return counts;
}

}  // namespace drover
