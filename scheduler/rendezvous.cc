#include "scheduler/rendezvous.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/job_state.h"

namespace drover {

void Rendezvous::JobChanged(const std::string& job_id, proto::JobState state, int generation,
                            bool failing) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (IsTerminal(state)) {
    // Forgotten with its values: a cluster that ran a million jobs keeps none of them
    // here. Its waiters are woken and find the scope gone (ABORTED).
    if (it == jobs_.end()) return;
    if (it->second.changed != nullptr) it->second.changed->SignalAll();
    jobs_.erase(it);
    kv_.DropJob(job_id);
    return;
  }
  // A queued job that never ran has no rank to call: no entry until it starts.
  if (it == jobs_.end() && state == proto::PENDING) return;
  if (it == jobs_.end()) added_.SignalAll();
  Job& job = jobs_[job_id];
  if (job.state == state && job.generation == generation && job.failing == failing) return;
  job.state = state;
  job.generation = generation;
  job.failing = failing;
  kv_.DropOlderThan(job_id, generation);
  if (job.changed != nullptr) job.changed->SignalAll();
}

Rendezvous::Seen Rendezvous::Observe(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  Seen seen;
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return seen;
  seen.known = true;
  seen.state = it->second.state;
  seen.generation = it->second.generation;
  seen.failing = it->second.failing;
  return seen;
}

void Rendezvous::AwaitChange(const std::string& job_id, const Seen& seen, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  while (!stopped_) {
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) {
      if (seen.known) return;  // forgotten: it ended
      // Not known yet: waits for news of it, never returning at once (a caller that
      // polls again would spin).
      if (clock_->WaitWithDeadline(&added_, &mu_, deadline)) return;
      continue;
    }
    Job& job = it->second;
    if (!seen.known || job.state != seen.state || job.generation != seen.generation ||
        job.failing != seen.failing) {
      return;
    }
    if (job.changed == nullptr) job.changed = std::make_shared<absl::CondVar>();
    std::shared_ptr<absl::CondVar> changed = job.changed;
    if (clock_->WaitWithDeadline(changed.get(), &mu_, deadline)) return;
  }
}

absl::Status Rendezvous::CheckScopeLocked(const proto::KvScope& scope) {
  auto it = jobs_.find(scope.job_id());
  if (it == jobs_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("KV: job '", scope.job_id(),
                     "' is not running on this cluster (not started yet, or ended)"));
  }
  const Job& job = it->second;
  if (job.generation != scope.generation()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "KV: job ", scope.job_id(), " is not running generation ", scope.generation(),
        " (state ", proto::JobState_Name(job.state), ", generation ", job.generation,
        "); a restarted process must use its own TORCHELASTIC_RESTART_COUNT"));
  }
  return absl::OkStatus();
}

void Rendezvous::SignalLocked(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  if (it != jobs_.end() && it->second.changed != nullptr) it->second.changed->SignalAll();
}

absl::Status Rendezvous::Set(const proto::KvSetRequest& req) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckScopeLocked(req.scope()); !s.ok()) return s;
  absl::Status s =
      kv_.Set({req.scope().job_id(), req.scope().generation()}, req.key(), req.value());
  if (s.ok()) SignalLocked(req.scope().job_id());
  return s;
}

absl::StatusOr<proto::KvGetReply> Rendezvous::Get(const proto::KvGetRequest& req,
                                                  absl::Duration wait) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckScopeLocked(req.scope()); !s.ok()) return s;
  const JobKv::Scope scope{req.scope().job_id(), req.scope().generation()};
  std::optional<std::string> value = kv_.Get(scope, req.key());
  if (!value && wait > absl::ZeroDuration()) {
    // The scope was checked above: its job is known.
    Job& job = jobs_[scope.first];
    if (job.changed == nullptr) job.changed = std::make_shared<absl::CondVar>();
    std::shared_ptr<absl::CondVar> changed = job.changed;
    const absl::Time deadline = clock_->Now() + std::min(wait, absl::Minutes(5));
    bool scope_ended = false;
    bool timed_out = false;
    while (true) {
      if (stopped_ || !CheckScopeLocked(req.scope()).ok()) {
        scope_ended = true;
        break;
      }
      value = kv_.Get(scope, req.key());
      if (value || timed_out) break;
      timed_out = clock_->WaitWithDeadline(changed.get(), &mu_, deadline);
    }
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
  proto::KvGetReply reply;
  reply.set_found(value.has_value());
  if (value) reply.set_value(*value);
  return reply;
}

absl::StatusOr<proto::KvCompareAndSetReply> Rendezvous::CompareAndSet(
    const proto::KvCompareAndSetRequest& req) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckScopeLocked(req.scope()); !s.ok()) return s;
  std::optional<std::string> expected;
  if (!req.expect_absent()) expected = req.expected();
  std::optional<std::string> current;
  auto swapped = kv_.CompareAndSet({req.scope().job_id(), req.scope().generation()}, req.key(),
                                   expected, req.desired(), &current);
  if (!swapped.ok()) return swapped.status();
  if (*swapped) SignalLocked(req.scope().job_id());
  proto::KvCompareAndSetReply reply;
  reply.set_swapped(*swapped);
  reply.set_found(current.has_value());
  if (current) reply.set_current(*current);
  return reply;
}

absl::StatusOr<proto::KvAddReply> Rendezvous::Add(const proto::KvAddRequest& req) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckScopeLocked(req.scope()); !s.ok()) return s;
  auto sum = kv_.Add({req.scope().job_id(), req.scope().generation()}, req.key(), req.delta(),
                     req.request_id());
  if (!sum.ok()) return sum.status();
  SignalLocked(req.scope().job_id());
  proto::KvAddReply reply;
  reply.set_value(*sum);
  return reply;
}

void Rendezvous::Stop() {
  absl::MutexLock lock(&mu_);
  stopped_ = true;
  added_.SignalAll();
  for (auto& [id, job] : jobs_) {
    if (job.changed != nullptr) job.changed->SignalAll();
  }
}

size_t Rendezvous::scopes() {
  absl::MutexLock lock(&mu_);
  return kv_.scopes();
}

size_t Rendezvous::jobs() {
  absl::MutexLock lock(&mu_);
  return jobs_.size();
}

}  // namespace drover
