// SchedulerCore's rendezvous part: the KV of running job generations (rendezvous.h,
// with a lock of its own) and the generation watches (WatchGeneration, under mu_: they
// read the jobs' state); the rules they apply are the pure functions of generation.h.
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "scheduler/generation.h"
#include "scheduler/scheduler_core.h"

namespace drover {

// ---------------------------------------------------------------------------
// Rendezvous KV: its own class and lock (rendezvous.h); none of these takes mu_.

absl::Status SchedulerCore::KvSet(const proto::KvSetRequest& req) { return kv_.Set(req); }

absl::StatusOr<proto::KvGetReply> SchedulerCore::KvGet(const proto::KvGetRequest& req,
                                                       absl::Duration wait) {
  return kv_.Get(req, wait);
}

absl::StatusOr<proto::KvCompareAndSetReply> SchedulerCore::KvCompareAndSet(
    const proto::KvCompareAndSetRequest& req) {
  return kv_.CompareAndSet(req);
}

absl::StatusOr<proto::KvAddReply> SchedulerCore::KvAdd(const proto::KvAddRequest& req) {
  return kv_.Add(req);
}

// ---------------------------------------------------------------------------
// Generation watch

absl::StatusOr<proto::WatchGenerationReply> SchedulerCore::WatchGeneration(
    const proto::WatchGenerationRequest& req, absl::Duration wait) {
  absl::MutexLock lock(&mu_);
  const std::string& job_id = req.scope().job_id();
  const int generation = req.scope().generation();
  Job* job = FindJobLocked(job_id);
  if (job == nullptr) {
    return absl::NotFoundError(absl::StrCat("WatchGeneration: no job '", job_id, "'"));
  }
  if (generation > job->info.restart_count()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WatchGeneration: job ", job_id, " has not reached generation ", generation,
        " (it runs generation ", job->info.restart_count(), ")"));
  }
  if (generation == job->info.restart_count() && job->live.count(req.rank())) {
    job->watchers.insert(req.rank());
  }
  std::optional<proto::WatchGenerationReply> reply;
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (stopping_) return true;
    Job* j = FindJobLocked(job_id);
    if (j == nullptr) return true;
    reply = GenerationEnd(j->info, generation, NodeIpLocked(j->info.root_cause().node_id()));
    return reply.has_value();
  };
  if (wait > absl::ZeroDuration()) {
    AwaitJobLocked(*job, clock_->Now() + std::min(wait, absl::Seconds(60)), done);
  } else {
    done();
  }
  if (!reply) return proto::WatchGenerationReply();  // still running
  return *reply;
}

}  // namespace drover
