// SchedulerCore's rendezvous part: the KV of running job generations (rendezvous.h,
// with a lock of its own) and the generation watches (WatchGeneration: they read the
// jobs' state under mu_ and wait on kv_, which is told every change they read); the
// rules they apply are the pure functions of generation.h.
#include <algorithm>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "scheduler/generation.h"
#include "scheduler/scheduler_core.h"

namespace drover {

// ---------------------------------------------------------------------------
// Generation watch

absl::StatusOr<proto::WatchGenerationReply> SchedulerCore::WatchGeneration(
    const proto::WatchGenerationRequest& req, absl::Duration wait) {
  const std::string& job_id = req.scope().job_id();
  const int generation = req.scope().generation();
  const absl::Time deadline = clock_->Now() + std::min(wait, absl::Seconds(60));
  for (bool first = true;; first = false) {
    Rendezvous::Seen seen;
    {
      absl::MutexLock lock(&mu_);
      Job* job = FindJobLocked(job_id);
      if (job == nullptr) {
        return absl::NotFoundError(absl::StrCat("WatchGeneration: no job '", job_id, "'"));
      }
      if (first) {
        if (generation > job->info.restart_count()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "WatchGeneration: job ", job_id, " has not reached generation ", generation,
              " (it runs generation ", job->info.restart_count(), ")"));
        }
        if (generation == job->info.restart_count() && job->live.count(req.rank())) {
          job->watchers.insert(req.rank());
        }
      }
      if (stopping_) return proto::WatchGenerationReply();
      if (std::optional<proto::WatchGenerationReply> reply = GenerationEnd(
              job->info, generation, NodeIpLocked(job->info.root_cause().node_id()))) {
        return *reply;
      }
      // Still running. kv_ is told, under mu_, of every change GenerationEnd reads
      // (IndexLocked): read here, a change made after it is one AwaitChange sees.
      seen = kv_.Observe(job_id);
      if (clock_->Now() >= deadline) return proto::WatchGenerationReply();
    }
    // The wait holds kv_'s lock only: a long poll per rank never waits on mu_.
    kv_.AwaitChange(job_id, seen, deadline);
  }
}

}  // namespace drover
