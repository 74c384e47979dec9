// SchedulerCore's rendezvous part: the KV of running job generations (job_kv.h) and
// the generation watches (WatchGeneration). Same class and lock as scheduler_core.cc;
// the rules they apply are the pure functions of generation.h.
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "scheduler/generation.h"
#include "scheduler/scheduler_core.h"

namespace drover {

// ---------------------------------------------------------------------------
// Rendezvous KV

absl::Status SchedulerCore::CheckKvScopeLocked(const proto::KvScope& scope) {
  const Job* job = FindJobLocked(scope.job_id());
  return CheckKvScope(job == nullptr ? nullptr : &job->info, scope);
}

absl::Status SchedulerCore::KvSet(const proto::KvSetRequest& req) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckKvScopeLocked(req.scope()); !s.ok()) return s;
  absl::Status s =
      kv_.Set({req.scope().job_id(), req.scope().generation()}, req.key(), req.value());
  if (s.ok()) SignalJobLocked(req.scope().job_id());
  return s;
}

absl::StatusOr<proto::KvGetReply> SchedulerCore::KvGet(const proto::KvGetRequest& req,
                                                       absl::Duration wait) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckKvScopeLocked(req.scope()); !s.ok()) return s;
  const JobKv::Scope scope{req.scope().job_id(), req.scope().generation()};
  proto::KvGetReply reply;
  std::optional<std::string> value = kv_.Get(scope, req.key());
  if (!value && wait > absl::ZeroDuration()) {
    bool scope_ended = false;
    auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (stopping_ || !CheckKvScopeLocked(req.scope()).ok()) {
        scope_ended = true;
        return true;
      }
      value = kv_.Get(scope, req.key());
      return value.has_value();
    };
    // The scope was checked above: its job exists.
    AwaitJobLocked(*FindJobLocked(scope.first),
                   clock_->Now() + std::min(wait, absl::Minutes(5)), ready);
    if (scope_ended) {
      return absl::AbortedError(absl::StrCat("KV: job ", scope.first, " generation ",
                                             scope.second, " ended while waiting for '",
                                             req.key(), "'"));
    }
    if (!value) {
      return absl::DeadlineExceededError(absl::StrCat(
          "KV: key '", req.key(), "' of job ", scope.first, " did not appear within ",
          absl::FormatDuration(wait), "; did every rank reach the rendezvous?"));
    }
  }
  reply.set_found(value.has_value());
  if (value) reply.set_value(*value);
  return reply;
}

absl::StatusOr<proto::KvCompareAndSetReply> SchedulerCore::KvCompareAndSet(
    const proto::KvCompareAndSetRequest& req) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckKvScopeLocked(req.scope()); !s.ok()) return s;
  std::optional<std::string> expected;
  if (!req.expect_absent()) expected = req.expected();
  std::optional<std::string> current;
  auto swapped = kv_.CompareAndSet({req.scope().job_id(), req.scope().generation()}, req.key(),
                                   expected, req.desired(), &current);
  if (!swapped.ok()) return swapped.status();
  if (*swapped) SignalJobLocked(req.scope().job_id());
  proto::KvCompareAndSetReply reply;
  reply.set_swapped(*swapped);
  reply.set_found(current.has_value());
  if (current) reply.set_current(*current);
  return reply;
}

absl::StatusOr<proto::KvAddReply> SchedulerCore::KvAdd(const proto::KvAddRequest& req) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckKvScopeLocked(req.scope()); !s.ok()) return s;
  auto sum = kv_.Add({req.scope().job_id(), req.scope().generation()}, req.key(), req.delta(),
                     req.request_id());
  if (!sum.ok()) return sum.status();
  SignalJobLocked(req.scope().job_id());
  proto::KvAddReply reply;
  reply.set_value(*sum);
  return reply;
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
