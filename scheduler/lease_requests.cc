// LeaseManager's queue of lease requests (lease_manager.h): RequestLease, the grant pass,
// worker starts, waits and their deadlines, and forgetting requests nobody asks about.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/log.h"
#include "common/status.h"
#include "scheduler/lease_manager.h"

namespace drover {
namespace {

// Back-off after a node failed to start a worker (doubling up to the max).
constexpr absl::Duration kStartRetry = absl::Milliseconds(100);
constexpr absl::Duration kStartRetryMax = absl::Seconds(2);
// The timer's thread looks at least this often (forgetting requests, passes).
constexpr absl::Duration kTimerPeriod = absl::Seconds(1);

proto::RequestLeaseReply Pending(std::string reason) {
  proto::RequestLeaseReply pending;
  pending.set_pending_reason(std::move(reason));
  return pending;
}

}  // namespace

void LeaseManager::Answers::Run() {
  for (auto& [done, reply] : calls) done(std::move(reply));
  calls.clear();
}

absl::StatusOr<proto::RequestLeaseReply> LeaseManager::RequestLease(
    const proto::RequestLeaseRequest& req) {
  absl::Notification answered;
  absl::StatusOr<proto::RequestLeaseReply> out;
  RequestLease(req, [&](absl::StatusOr<proto::RequestLeaseReply> r) {
    out = std::move(r);
    answered.Notify();
  });
  answered.WaitForNotification();
  return out;
}

void LeaseManager::RequestLease(const proto::RequestLeaseRequest& req, LeaseDone done) {
  if (req.job_id().empty() || req.request_id().empty()) {
    return done(absl::InvalidArgumentError("RequestLease needs a job id and a request id"));
  }
  if (req.package().hash().empty()) {
    return done(absl::InvalidArgumentError("RequestLease needs the program's package (hash)"));
  }
  if (absl::Status s = ValidateLeaseShape(req.shape()); !s.ok()) return done(s);
  if (absl::Status s = book_->CheckJobRunning(req.job_id()); !s.ok()) return done(s);
  const absl::Duration wait = absl::Milliseconds(std::clamp<int64_t>(req.wait_ms(), 0, kMaxWaitMs));
  Answers answers;
  {
    absl::MutexLock l(&mu_);
    if (stopped_) {
      answers.Add(std::move(done), absl::UnavailableError("the scheduler is stopping; ask again"));
    } else {
      const absl::Time now = clock_->Now();
      ForgetLocked(now);
      auto [it, fresh] = requests_.try_emplace(req.request_id());
      it->second.expires = now + std::max(options_.request_memory, 2 * wait);
      it->second.claim_until = now + std::max(kClaimWindow, 2 * wait);
      expiry_.emplace_back(it->second.expires, req.request_id());
      bool ok = true;
      if (fresh) {
        absl::StatusOr<LeaseQueue::Entry*> e = queue_.Push(&it->first, req);
        if (!e.ok()) {
          requests_.erase(it);
          answers.Add(std::move(done), e.status());
          ok = false;
        } else {
          it->second.queued = *e;
          // Behind others of its shape it waits its turn: they do not fit either.
          if (LeaseQueue::IsHead(*e)) pass_needed_ = true;
          SettleLocked(&answers);
          // The pass may have dropped it (its job ended meanwhile).
          it = requests_.find(req.request_id());
          if (it == requests_.end()) {
            absl::Status why = book_->CheckJobRunning(req.job_id());
            answers.Add(std::move(done), why.ok() ? absl::AbortedError(absl::StrCat(
                                                        "lease request ", req.request_id(),
                                                        " was dropped; ask again"))
                                                  : why);
            ok = false;
          }
        }
      }
      if (ok) {
        Request& r = it->second;
        if (r.state == Request::kDone) {
          r.delivered = true;
          answers.Add(std::move(done), *r.reply);
        } else if (wait == absl::ZeroDuration() && !(fresh && r.state == Request::kStarting)) {
          answers.Add(std::move(done), Pending(PendingReasonLocked(r)));
        } else {
          // Its own grant, made by this call, is waited for however long the start
          // takes (as a call that starts the worker itself would); otherwise the wait.
          const uint64_t id = next_waiter_++;
          Waiter& w = waiters_[id];
          w.done = std::move(done);
          w.request_id = req.request_id();
          w.deadline = now + wait;
          w.hold = fresh && r.state == Request::kStarting;
          r.waiters.push_back(id);
          if (!w.hold) {
            if (deadlines_.empty() || w.deadline < deadlines_.begin()->first) timer_cv_.Signal();
            deadlines_.emplace(w.deadline, id);
          }
        }
      }
    }
  }
  answers.Run();
}

std::string LeaseManager::PendingReasonLocked(const Request& r) {
  if (r.note != nullptr) return *r.note;
  if (r.state == Request::kStarting) return "its worker is starting";
  if (r.queued == nullptr) return "waiting to be queued again";
  LeaseQueue::Class& cls = *r.queued->cls;
  if (cls.reason_version != room_version_) {
    const LeaseQueue::Entry& head = cls.entries.front();
    cls.reason = book_->Explain(cls.shape, LeaseQueue::HintOf(head));
    cls.reason_version = room_version_;
  }
  if (cls.entries.size() == 1) return cls.reason;
  return absl::StrCat(cls.reason, " (", cls.entries.size(),
                      " lease requests of this shape wait, served in order)");
}

void LeaseManager::AnswerLocked(Request& r, const absl::StatusOr<proto::RequestLeaseReply>& reply,
                                Answers* answers) {
  for (uint64_t id : r.waiters) {
    auto w = waiters_.find(id);
    if (w == waiters_.end()) continue;
    if (!w->second.hold) deadlines_.erase({w->second.deadline, id});
    answers->Add(std::move(w->second.done), reply);
    waiters_.erase(w);
  }
  r.waiters.clear();
}

void LeaseManager::DropLocked(const std::string& request_id, const absl::Status& why,
                              Answers* answers) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return;
  AnswerLocked(it->second, why, answers);
  if (it->second.queued != nullptr) queue_.Remove(it->second.queued);
  requests_.erase(it);
}

void LeaseManager::SettleLocked(Answers* answers) {
  if (!pass_needed_ || stopped_) return;
  pass_needed_ = false;
  std::vector<Start> starts;
  std::vector<std::pair<std::string, absl::Status>> dropped;
  std::vector<std::string> forgotten;
  queue_.ForEachHead([&](LeaseQueue::Entry& e) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    const proto::PlacementHint hint = LeaseQueue::HintOf(e);
    std::optional<ResourceBook::Grant> g = book_->TryReserve(e.cls->shape, hint);
    if (!g.has_value()) return LeaseQueue::Offer::kBlocked;
    // Checked at the grant, under mu_: a job that ended since the request came gets
    // nothing (JobEnded drops its requests too, but may come after this pass).
    if (absl::Status running = book_->CheckJobRunning(e.job_id); !running.ok()) {
      book_->Release(*g);
      dropped.emplace_back(*e.request_id, running);
      return LeaseQueue::Offer::kDropped;
    }
    Request& r = requests_[*e.request_id];
    if (r.waiters.empty() && clock_->Now() > r.claim_until) {
      // Its caller gave up (wait_ms passed twice without a retry): forgotten, not
      // granted a lease nobody would use. Only when its turn comes with room: a pass
      // never walks the requests that wait.
      book_->Release(*g);
      forgotten.push_back(*e.request_id);
      return LeaseQueue::Offer::kDropped;
    }
    const Lease& lease = NewLeaseLocked(*g, e.job_id, e.owner, "");
    r.queued = nullptr;
    r.state = Request::kStarting;
    r.note.reset();
    ++starting_;
    // Whoever waits now waits for the start, not for the deadline.
    for (uint64_t id : r.waiters) {
      auto w = waiters_.find(id);
      if (w == waiters_.end() || w->second.hold) continue;
      deadlines_.erase({w->second.deadline, id});
      w->second.hold = true;
    }
    starts.push_back(
        Start{*e.request_id, lease.id, lease.grant, e.job_id, e.owner, hint, e.package, e.seq});
    return LeaseQueue::Offer::kTaken;
  });
  for (auto& [id, why] : dropped) {
    auto it = requests_.find(id);
    if (it != requests_.end()) it->second.queued = nullptr;  // the pass took it out
    DropLocked(id, why, answers);
  }
  for (const std::string& id : forgotten) {
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;
    it->second.queued = nullptr;
    requests_.erase(it);
  }
  if (!starts.empty()) ++room_version_;
  for (Start& s : starts) starts_.Post([this, s = std::move(s)]() mutable { RunStart(std::move(s)); });
}

void LeaseManager::RunStart(Start s) {
  Lease lease;
  lease.id = s.lease_id;
  lease.job_id = s.job_id;
  lease.owner = s.owner;
  lease.grant = s.grant;
  absl::StatusOr<proto::StartWorkerReply> started =
      workers_->StartWorker(s.grant.agent_address, StartRequest(lease, *s.package, nullptr));
  Answers answers;
  {
    absl::MutexLock l(&mu_);
    bool retry = false;
    absl::StatusOr<Lease> done = StartedLocked(lease, started, /*actor=*/false, &retry);
    --starting_;
    auto it = requests_.find(s.request_id);
    if (it == requests_.end() || it->second.state != Request::kStarting) {
      // Forgotten meanwhile (cannot happen while starting; kept safe): give it back.
      if (done.ok()) ReleaseLocked(done->id, "its request was forgotten");
    } else if (Request& r = it->second; done.ok()) {
      auto reply = std::make_unique<proto::RequestLeaseReply>();
      reply->set_granted(true);
      reply->set_lease_id(done->id);
      reply->set_node_id(done->grant.node_id);
      reply->set_worker_id(done->worker_id);
      reply->set_unix_path(done->unix_path);
      reply->set_tcp_address(done->tcp_address);
      reply->set_agent_address(done->grant.agent_address);
      r.state = Request::kDone;
      r.delivered = !r.waiters.empty();
      r.reply = std::move(reply);
      AnswerLocked(r, *r.reply, &answers);
    } else if (!retry) {
      DropLocked(s.request_id, done.status(), &answers);
    } else if (absl::Status running = book_->CheckJobRunning(s.job_id); !running.ok()) {
      DropLocked(s.request_id, running, &answers);
    } else {
      // A node did not answer StartWorker (another may, or this one later: not at
      // once), or the lease ended while its worker started: back in its place.
      const bool node_failed = started.ok() == false;
      r.state = Request::kQueued;
      if (node_failed) {
        r.note = std::make_unique<std::string>(done.status().message());
        const absl::Duration backoff =
            std::min(kStartRetry * (int64_t{1} << std::min<int>(r.start_failures, 5)), kStartRetryMax);
        r.start_failures = static_cast<int8_t>(std::min(r.start_failures + 1, 100));
        retries_.emplace(clock_->Now() + backoff, std::move(s));
        timer_cv_.Signal();
      } else {
        r.queued = queue_.Requeue(&it->first, s.job_id, s.owner, s.grant.shape, s.hint,
                                  std::move(s.package), s.seq);
        pass_needed_ = true;
      }
      // Those that waited for this start wait again, until their deadline.
      for (uint64_t id : r.waiters) {
        auto w = waiters_.find(id);
        if (w == waiters_.end() || !w->second.hold) continue;
        w->second.hold = false;
        deadlines_.emplace(w->second.deadline, id);
      }
    }
    SettleLocked(&answers);
  }
  answers.Run();
}

void LeaseManager::ForgetLocked(absl::Time now) {
  // The oldest first, as they were asked (a request asked again since has a later entry).
  while (!expiry_.empty() && expiry_.front().first < now) {
    auto it = requests_.find(expiry_.front().second);
    if (it != requests_.end() && it->second.expires < now) {
      Request& r = it->second;
      if (r.state == Request::kStarting || !r.waiters.empty()) {
        expiry_.emplace_back(now + options_.request_memory, it->first);  // look again later
      } else {
        if (r.state == Request::kDone && !r.delivered) {
          // Granted while nobody waited, and nobody came for it: its worker goes.
          auto lease = leases_.find(r.reply->lease_id());
          if (lease != leases_.end()) {
            proto::KillWorkerRequest kill;
            kill.set_worker_id(lease->second.worker_id);
            kill.set_reason("nobody came for its lease");
            background_.Post([this, agent = lease->second.grant.agent_address, kill] {
              workers_->KillWorker(agent, kill).IgnoreError();
            });
            ReleaseLocked(lease->first, "nobody came for it");
          }
        }
        if (r.queued != nullptr) queue_.Remove(r.queued);
        requests_.erase(it);  // a request waiting out a back-off is skipped by the timer
      }
    }
    expiry_.pop_front();
  }
}

void LeaseManager::TimerLoop() {
  Answers answers;
  absl::MutexLock l(&mu_);
  while (!stopped_) {
    absl::Time next = clock_->Now() + kTimerPeriod;
    if (!deadlines_.empty()) next = std::min(next, deadlines_.begin()->first);
    if (!retries_.empty()) next = std::min(next, retries_.begin()->first);
    clock_->WaitWithDeadline(&timer_cv_, &mu_, next);
    if (stopped_) break;
    const absl::Time now = clock_->Now();
    while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
      const uint64_t id = deadlines_.begin()->second;
      deadlines_.erase(deadlines_.begin());
      auto w = waiters_.find(id);
      if (w == waiters_.end()) continue;
      auto r = requests_.find(w->second.request_id);
      if (r != requests_.end()) {
        std::vector<uint64_t>& ws = r->second.waiters;
        ws.erase(std::remove(ws.begin(), ws.end(), id), ws.end());
        answers.Add(std::move(w->second.done), Pending(PendingReasonLocked(r->second)));
      } else {
        answers.Add(std::move(w->second.done), Pending("waiting for a worker"));
      }
      waiters_.erase(w);
    }
    while (!retries_.empty() && retries_.begin()->first <= now) {
      Start s = std::move(retries_.begin()->second);
      retries_.erase(retries_.begin());
      auto it = requests_.find(s.request_id);
      if (it == requests_.end() || it->second.queued != nullptr ||
          it->second.state != Request::kQueued) {
        continue;
      }
      if (absl::Status running = book_->CheckJobRunning(s.job_id); !running.ok()) {
        DropLocked(s.request_id, running, &answers);
        continue;
      }
      it->second.queued = queue_.Requeue(&it->first, s.job_id, s.owner, s.grant.shape, s.hint,
                                         std::move(s.package), s.seq);
      pass_needed_ = true;
    }
    ForgetLocked(now);
    if (now >= next_reclaim_) ReclaimLocked();  // leases started after a claim appeared
    SettleLocked(&answers);
    if (!answers.calls.empty()) {
      mu_.Unlock();
      answers.Run();
      mu_.Lock();
    }
  }
}

}  // namespace drover
