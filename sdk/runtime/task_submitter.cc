#include "sdk/runtime/task_submitter.h"

#include <signal.h>
#include <string.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/status.h"

namespace drover::internal {
namespace {

// Bytes of task arguments in flight per worker: below a socket buffer, so a send never
// blocks on a worker that is busy running a task.
constexpr size_t kMaxInFlightBytes = 64 * 1024;
// Keep about this much work queued at each worker (by its tasks' average run time).
constexpr double kTargetQueuedUs = 1000;
constexpr size_t kMaxDepth = 512;
// Lease requests outstanding per scheduling key, and workers per key.
constexpr int kMaxLeaseRequests = 4;
constexpr size_t kMaxWorkersPerKey = 256;
// Callers spin for the results of tasks that run shorter than this (µs).
constexpr double kSpinRunUs = 20;
constexpr absl::Duration kHousekeepingPeriod = absl::Milliseconds(50);
// How long one RequestLease call waits at the scheduler.
constexpr int64_t kLeaseWaitMs = 2000;


}  // namespace

TaskSubmitter::TaskSubmitter(Deps deps)
    : owner_(std::move(deps.owner)),
      leases_(deps.leases),
      connector_(deps.connector),
      agents_(deps.agents),
      objects_(*deps.objects),
      clock_(deps.clock != nullptr ? deps.clock : Clock::Real()),
      outage_(deps.outage),
      own_loop_(deps.loop == nullptr ? std::make_unique<ConnectionLoop>() : nullptr),
      loop_(deps.loop != nullptr ? deps.loop : own_loop_.get()),
      watched_for_test_(std::move(deps.watched_for_test)) {
  housekeeping_ = std::thread([this] { HousekeepingLoop(); });
}

TaskSubmitter::~TaskSubmitter() { Shutdown(); }

void TaskSubmitter::Submit(std::shared_ptr<TaskRecord> task) {
  {
    absl::MutexLock l(&mu_);
    by_result_[task->result.get()] = task;
  }
  ResolveArguments(objects_, task, [this, task](absl::Status s) {
    if (!s.ok()) {
      FailTask(task, s);
    } else {
      Enqueue(task);
    }
  });
}

std::string TaskSubmitter::KeyName(const TaskRecord& t,
                                   const std::map<std::string, uint64_t>& bytes) const {
  const CallOptions& o = t.options;
  // Per function, as Ray's scheduling keys: the pipeline depth follows each function's
  // own run time, so a slow function's tasks never queue a fast one's behind them.
  std::string name = absl::StrCat(t.function, "|", o.resources.cpus, "/", o.resources.gpus, "/",
                                  o.resources.memory_bytes);
  for (const auto& [k, v] : o.resources.custom) absl::StrAppend(&name, "/", k, "=", v);
  if (!o.node_id.empty()) absl::StrAppend(&name, "@", o.node_id, o.soft_affinity ? "~" : "");
  if (o.spread) absl::StrAppend(&name, "+spread");
  // Locality: tasks whose arguments sit mostly on one node prefer a worker there.
  uint64_t best = 0;
  std::string best_node;
  for (const auto& [node, n] : bytes) {
    if (n > best) {
      best = n;
      best_node = node;
    }
  }
  if (o.node_id.empty() && best >= (1u << 20)) absl::StrAppend(&name, "#", best_node);
  return name;
}

void TaskSubmitter::Enqueue(std::shared_ptr<TaskRecord> task) {
  std::map<std::string, uint64_t> bytes;
  for (const TaskArgument& a : task->args) {
    task->wire_bytes += a.value.bytes.size();
    for (const StoredRef& s : a.value.stored) bytes[s.node_id] += s.size;
    if (a.ref) {
      ObjectTable::Outcome o = objects_.Read(a.ref);
      if (o.value.stored) bytes[o.value.stored->node_id] += o.value.stored->size;
      if (o.value.inline_bytes) task->wire_bytes += o.value.inline_bytes->size();
      for (const StoredRef& s : o.value.contained) bytes[s.node_id] += s.size;
    }
  }
  const std::string name = KeyName(*task, bytes);
  Outbox out;
  absl::Status refused;
  {
    absl::MutexLock l(&mu_);
    if (shutdown_) {
      refused = absl::FailedPreconditionError("drover::Shutdown was called");
    } else if (!loop_failed_.ok()) {
      refused = LoopFailedError(*task);
    } else if (task->cancelled) {
      refused = TaskError(*task, absl::StatusCode::kCancelled, "cancelled");
    } else {
      auto& slot = keys_[name];
      if (slot == nullptr) {
        slot = std::make_unique<Key>();
        Key& k = *slot;
        k.name = name;
        const CallOptions& o = task->options;
        k.shape.set_cpus(o.resources.cpus);
        k.shape.set_gpus(o.resources.gpus);
        k.shape.set_memory_bytes(o.resources.memory_bytes);
        for (const auto& [rk, rv] : o.resources.custom) (*k.shape.mutable_custom())[rk] = rv;
        k.hint.set_node_id(o.node_id);
        k.hint.set_soft(o.soft_affinity);
        k.hint.set_spread(o.spread);
        for (const auto& [node, n] : bytes) (*k.hint.mutable_data_bytes())[node] = n;
      }
      slot->queue.push_back(task);
      PumpLocked(*slot, &out);
      // Still queued: it waits for the same reason as the others (set for all of them
      // when it changes; not here for all, which cost a pass over the queue per reply).
      if (!slot->pending_reason.empty() && !slot->queue.empty() && slot->queue.back() == task) {
        objects_.SetPendingReason(task->result, slot->pending_reason);
      }
    }
  }
  if (!refused.ok()) {
    FailTask(task, refused);
    return;
  }
  Flush(out);
}

size_t TaskSubmitter::DepthOf(const Worker& w) const {
  if (w.avg_run_us < 0) return 1;  // nothing known yet: one at a time
  double d = kTargetQueuedUs / std::max(w.avg_run_us, 1.0);
  return static_cast<size_t>(std::clamp(d, 1.0, static_cast<double>(kMaxDepth)));
}

void TaskSubmitter::PumpLocked(Key& k, Outbox* out) {
  while (!k.queue.empty()) {
    std::shared_ptr<Worker> best;
    for (const auto& w : k.workers) {
      if (w->lost || w->revoked) continue;
      const bool room = w->in_flight.empty() ||
                        (w->in_flight.size() < DepthOf(*w) && w->in_flight_bytes < kMaxInFlightBytes);
      if (room && (best == nullptr || w->in_flight.size() < best->in_flight.size())) best = w;
    }
    if (best == nullptr) break;
    std::shared_ptr<TaskRecord> t = std::move(k.queue.front());
    k.queue.pop_front();
    if (t->cancelled) {
      by_result_.erase(t->result.get());
      absl::Status cancelled = TaskError(*t, absl::StatusCode::kCancelled, "cancelled");
      out->failures.emplace_back(std::move(t), std::move(cancelled));
      continue;
    }
    const uint64_t seq = best->next_seq++;
    proto::TaskFrame frame;
    absl::Status built = BuildTaskSpec(objects_, *t, seq, frame.mutable_push());
    if (!built.ok()) {
      by_result_.erase(t->result.get());
      out->failures.emplace_back(std::move(t), std::move(built));
      continue;
    }
    best->in_flight_bytes += t->wire_bytes;
    // A caller waiting for it spins only if such tasks come back within microseconds.
    t->result->spin_us.store(best->avg_run_us >= 0 && best->avg_run_us > kSpinRunUs ? 0 : 50,
                             std::memory_order_relaxed);
    best->in_flight.emplace(seq, std::move(t));
    Send* s = nullptr;
    for (Send& existing : out->sends) {
      if (existing.worker == best) s = &existing;
    }
    if (s == nullptr) {
      out->sends.push_back(Send{best, {}});
      s = &out->sends.back();
    }
    AppendFrame(frame, &s->frames);
  }
  if (k.queue.empty()) return;
  // Tasks wait and no worker has room: ask for more workers.
  StartRequestsLocked(k);
}

int TaskSubmitter::WantedRequestsLocked(const Key& k) const {
  if (k.queue.empty() || k.workers.size() >= kMaxWorkersPerKey) return 0;
  bool known = false;
  for (const auto& w : k.workers) known |= w->avg_run_us >= 0;
  // One at a time until a task's run time is known: a long task needs no more workers.
  const size_t max_requests = (k.workers.empty() || known) ? kMaxLeaseRequests : 1;
  return static_cast<int>(
      std::min({max_requests, k.queue.size(), kMaxWorkersPerKey - k.workers.size()}));
}

void TaskSubmitter::StartRequestsLocked(Key& k) {
  if (shutdown_ || total_requests_ >= kMaxLeaseRequestsTotal) return;
  const int wanted = WantedRequestsLocked(k);
  if (k.lease_requests >= wanted) return;
  // While slots are free no other key waits for one (a freed slot is handed out at
  // once), so taking them in turn here is fair.
  if (k.backoff_until > clock_->Now()) return;  // the housekeeping timer starts it
  while (k.lease_requests < wanted && total_requests_ < kMaxLeaseRequestsTotal) {
    StartRequestLocked(k);
  }
}

absl::Time TaskSubmitter::AdmitLocked() {
  absl::Time next_backoff_end = absl::InfiniteFuture();
  if (shutdown_) return next_backoff_end;
  const absl::Time now = clock_->Now();
  for (;;) {
    Key* best = nullptr;
    for (auto& [name, k] : keys_) {
      if (k->lease_requests >= WantedRequestsLocked(*k)) continue;
      if (k->backoff_until > now) {
        next_backoff_end = std::min(next_backoff_end, k->backoff_until);
        continue;
      }
      if (best == nullptr || k->lease_requests < best->lease_requests ||
          (k->lease_requests == best->lease_requests && k->last_admitted < best->last_admitted)) {
        best = k.get();
      }
    }
    if (best == nullptr || total_requests_ >= kMaxLeaseRequestsTotal) return next_backoff_end;
    StartRequestLocked(*best);
  }
}

void TaskSubmitter::StartRequestLocked(Key& k) {
  ++k.lease_requests;
  ++total_requests_;
  k.last_admitted = ++admissions_;
  std::string request_id;
  if (!k.parked_ids.empty()) {
    request_id = std::move(k.parked_ids.back());
    k.parked_ids.pop_back();
  } else {
    request_id = absl::StrCat(owner_.owner_tag, "-", k.name, "-", ++k.request_counter);
  }
  if (lease_pool_ == nullptr) lease_pool_ = std::make_unique<ThreadPool>(kMaxLeaseRequestsTotal);
  Key* kp = &k;
  lease_pool_->Post([this, kp, request_id = std::move(request_id)]() mutable {
    RequestLease(kp, std::move(request_id));
  });
}

void TaskSubmitter::Flush(Outbox& out) {
  for (Send& s : out.sends) {
    // A failed send breaks the connection: the loop sees it close, and WorkerLost
    // retries or fails the worker's tasks.
    s.worker->sock->SendFrames(s.frames).IgnoreError();
  }
  for (auto& [t, status] : out.failures) objects_.Fail(t->result, std::move(status));
}

void TaskSubmitter::FlushLoopOutbox() {
  if (loop_out_.sends.empty() && loop_out_.failures.empty()) return;
  Outbox out = std::exchange(loop_out_, {});
  Flush(out);
}

void TaskSubmitter::RequestLease(Key* k, std::string request_id) {
  proto::RequestLeaseRequest req;
  {
    absl::MutexLock l(&mu_);
    if (shutdown_) {
      --k->lease_requests;
      --total_requests_;
      return;
    }
    req.set_job_id(owner_.job_id);
    req.set_owner(owner_.owner);
    *req.mutable_shape() = k->shape;
    *req.mutable_package() = owner_.package;
    *req.mutable_hint() = k->hint;
    req.set_wait_ms(kLeaseWaitMs);
    req.set_request_id(request_id);
  }
  proto::RequestLeaseReply reply;
  absl::Status s = leases_->RequestLease(req, &reply);
  // An answer ends an outage the session or an actor call told. A failed request
  // tells none itself: the scheduler also answers UNAVAILABLE for a worker that
  // failed to start, which is no outage.
  if (s.ok() && outage_ != nullptr) outage_->Back();
  std::shared_ptr<Worker> w;
  // Set when the loop that reads every worker connection has failed: no grant can be
  // used again, so waiting tasks fail instead of being asked for again and again.
  absl::Status loop_failed;
  if (s.ok() && reply.granted()) {
    agents_->NoteAgent(reply.node_id(), reply.agent_address());
    absl::StatusOr<std::unique_ptr<FramedSocket>> c =
        connector_->Connect(reply.node_id(), reply.unix_path(), reply.tcp_address(),
                            reply.lease_id(), "");
    if (c.ok()) {
      // Read by the loop from now on; a frame or a close may come before the worker is
      // listed below (its handlers wait for mu_, and a close marks it lost).
      w = std::make_shared<Worker>();
      w->sock = *std::move(c);
      absl::Status watched = loop_->Watch(
          w->sock.get(), absl::StrCat("worker ", reply.worker_id(), " on node ", reply.node_id()),
          [this, w](std::string_view payload) { OnFrame(w, payload); },
          [this, w](const absl::Status& why) { WorkerLost(w, why); },
          [this] { FlushLoopOutbox(); });
      if (!watched.ok()) {
        c = watched;
        w = nullptr;
        loop_failed = loop_->failure();
      } else if (watched_for_test_) {
        watched_for_test_();
      }
    }
    if (!c.ok()) {
      s = absl::Status(c.status().code(), absl::StrCat("cannot reach worker ", reply.worker_id(),
                                                       " on node ", reply.node_id(), ": ",
                                                       c.status().message()));
      // Give the lease back; the next request (a new id) gets another worker.
      leases_->ReturnLease(reply.lease_id(), "the owner could not connect to its worker");
      request_id += "r";
    }
  }
  Outbox out;
  {
    absl::MutexLock l(&mu_);
    --k->lease_requests;
    --total_requests_;
    if (w != nullptr && w->lost && !shutdown_) {
      // Its connection closed before it could be used: as unusable as one never reached.
      s = absl::UnavailableError(absl::StrCat("worker ", reply.worker_id(), " on node ",
                                              reply.node_id(), " closed its connection at once"));
      w = nullptr;
      request_id += "r";  // that grant is spent: the next request is a new one
    }
    // A grant that could not be used counts as a failed request: asking again at once
    // would loop request, grant, connect, return without pause.
    const bool answered = s.ok();
    if (!loop_failed.ok() && loop_failed_.ok()) loop_failed_ = loop_failed;
    if (w != nullptr && !shutdown_) {
      w->key = k;
      w->lease_id = reply.lease_id();
      w->node_id = reply.node_id();
      w->worker_id = reply.worker_id();
      w->agent_address = reply.agent_address();
      w->idle_since = clock_->Now();
      k->workers.push_back(w);
      k->pending_reason.clear();
      k->backoff.Reset();
      // The scheduler wanted it back before it was listed (the revoke came first):
      // nothing is in flight on it yet, so it goes back now, not held while tasks wait.
      if (w->revoked) HandBackLocked(w);
      PumpLocked(*k, &out);
    } else if (shutdown_ || k->queue.empty() || w != nullptr) {
      // Nothing left to run (or shutting down): a granted worker goes back unused.
      if (w != nullptr) {
        w->lost = true;
        w->sock->Shutdown();
      }
    } else if (!loop_failed_.ok()) {
      // The loop reading every worker connection failed: no worker can be used again.
      FailAllQueuedLocked(&out);
    } else if (s.code() == absl::StatusCode::kFailedPrecondition ||
               s.code() == absl::StatusCode::kInvalidArgument) {
      // Refused for good (the job has ended, the request is wrong): the queued tasks
      // fail now with why, instead of each waiting out its Get's timeout (found by the
      // chaos campaign: a driver whose job a scheduler restart had ended hung for
      // minutes on "not ready after 30s").
      for (auto& t : k->queue) {
        by_result_.erase(t->result.get());
        absl::Status refused =
            TaskError(*t, s.code(), absl::StrCat("cannot get a worker: ", s.message()));
        out.failures.emplace_back(std::move(t), std::move(refused));
      }
      k->queue.clear();
    } else {
      if (!s.ok()) {
        k->pending_reason = absl::StrCat("cannot get a worker: ", s.message());
      } else if (!reply.granted()) {
        k->pending_reason = absl::StrCat("pending: ", reply.pending_reason());
      }
      for (const auto& t : k->queue) objects_.SetPendingReason(t->result, k->pending_reason);
      if (answered) {
        k->backoff.Reset();
      } else {
        // The scheduler is unreachable or refused: back off before asking again. The
        // housekeeping thread's timer starts the next request once this time comes.
        ++lease_backoffs_;
        k->backoff_until = clock_->Now() + k->backoff.Next();
        cv_.SignalAll();
      }
      // Asked again with the same id when the key next gets a slot (at once, unless
      // other keys have fewer requests out, or it backs off).
      if (k->lease_requests < WantedRequestsLocked(*k)) {
        k->parked_ids.push_back(std::move(request_id));
      }
    }
    AdmitLocked();  // the freed slot
  }
  Flush(out);
}

absl::Status TaskSubmitter::LoopFailedError(const TaskRecord& t) const {
  return TaskError(t, loop_failed_.code(),
                   absl::StrCat("cannot run: no worker can be reached: ", loop_failed_.message()));
}

void TaskSubmitter::FailAllQueuedLocked(Outbox* out) {
  for (auto& [name, k] : keys_) {
    for (auto& t : k->queue) {
      by_result_.erase(t->result.get());
      absl::Status failed = LoopFailedError(*t);
      out->failures.emplace_back(std::move(t), std::move(failed));
    }
    k->queue.clear();
    k->parked_ids.clear();
  }
}

void TaskSubmitter::OnFrame(const std::shared_ptr<Worker>& w, std::string_view payload) {
  proto::TaskFrame frame;
  if (!frame.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    DROVER_LOG(WARNING) << "worker " << w->worker_id << " on node " << w->node_id
                        << " sent a frame that does not parse (protocol mismatch?); dropping it";
    w->sock->Shutdown();  // its close path retries its tasks elsewhere
    return;
  }
  if (frame.has_revoked()) {
    Outbox& out = loop_out_;
    {
      absl::MutexLock l(&mu_);
      DROVER_LOG(INFO) << "lease " << w->lease_id << " of worker " << w->worker_id << " on node "
                       << w->node_id << " is wanted back (" << frame.revoked().reason()
                       << "); handing it back once its " << w->in_flight.size()
                       << " task(s) in flight finish";
      w->revoked = true;
      ++revoke_frames_;
      if (w->key != nullptr) {
        if (w->in_flight.empty()) HandBackLocked(w);
        PumpLocked(*w->key, &out);  // its queued tasks ask for other leases
      }
    }
    return;
  }
  if (!frame.has_reply()) return;
  proto::TaskReply& reply = *frame.mutable_reply();
  std::shared_ptr<TaskRecord> t;
  {
    absl::MutexLock l(&mu_);
    auto it = w->in_flight.find(reply.seq());
    if (it == w->in_flight.end()) return;  // answered already (a cancel raced)
    t = std::move(it->second);
    w->in_flight.erase(it);
    w->in_flight_bytes -= std::min(w->in_flight_bytes, t->wire_bytes);
    if (reply.code() == static_cast<int>(absl::StatusCode::kOk) || reply.user_error()) {
      const double run = static_cast<double>(reply.run_us());
      w->avg_run_us = w->avg_run_us < 0 ? run : 0.8 * w->avg_run_us + 0.2 * run;
    }
    if (w->in_flight.empty()) w->idle_since = clock_->Now();
    if (w->revoked && w->in_flight.empty()) HandBackLocked(w);
    by_result_.erase(t->result.get());
    // Sent at the end of the loop's wake-up with what the other replies of it decided
    // (FlushLoopOutbox): one write per worker, not one per reply.
    PumpLocked(*w->key, &loop_out_);
  }
  if (reply.code() == static_cast<int>(absl::StatusCode::kCancelled) && !t->cancelled) {
    // A cancel of an earlier attempt: run it again.
    Enqueue(t);
    return;
  }
  ApplyReply(objects_, t, reply, /*lineage=*/true);
}

void TaskSubmitter::WorkerLost(const std::shared_ptr<Worker>& w, const absl::Status& why) {
  auto unfinished = std::make_shared<std::vector<std::shared_ptr<TaskRecord>>>();
  {
    absl::MutexLock l(&mu_);
    if (w->key != nullptr) {
      Key& k = *w->key;
      k.workers.erase(std::remove(k.workers.begin(), k.workers.end(), w), k.workers.end());
    }
    if (w->lost) return;  // handed back on purpose
    w->lost = true;
    for (auto& [seq, t] : w->in_flight) unfinished->push_back(std::move(t));
    w->in_flight.clear();
  }
  if (unfinished->empty()) return;
  // Asking the agent how the worker ended waits up to seconds: not on the loop's
  // thread, and not behind other losses (a node's workers die together).
  if (threads_.Spawn([this, w, why, unfinished] { RetryOrFail(w, why, std::move(*unfinished)); })) {
    return;
  }
  for (auto& t : *unfinished) {  // shutting down
    FailTask(t, TaskError(*t, absl::StatusCode::kCancelled,
                          "drover::Shutdown was called before it finished"));
  }
}

void TaskSubmitter::RetryOrFail(const std::shared_ptr<Worker>& w, const absl::Status& why,
                                std::vector<std::shared_ptr<TaskRecord>> unfinished) {
  std::string how = agents_->DescribeExit(w->agent_address, w->worker_id, absl::Seconds(2));
  if (how.empty()) how = std::string(why.message());
  for (auto& t : unfinished) {
    if (t->cancelled) {
      FailTask(t, TaskError(*t, absl::StatusCode::kCancelled, "cancelled (its worker was stopped)"));
    } else if (t->retries_left > 0) {
      --t->retries_left;
      ++t->attempt;
      DROVER_LOG(INFO) << "task " << t->display << ": worker " << w->worker_id << " on node "
                       << w->node_id << " died (" << how << "); retrying (attempt " << t->attempt
                       << ")";
      Enqueue(t);
    } else {
      FailTask(t, TaskError(*t, absl::StatusCode::kUnavailable,
                            absl::StrCat("its worker ", w->worker_id, " on node ", w->node_id,
                                         " died while running it and no retries are left "
                                         "(SetMaxRetries): the worker ",
                                         how)));
    }
  }
}

void TaskSubmitter::HandBackLocked(const std::shared_ptr<Worker>& w) {
  if (w->lost) return;
  w->lost = true;
  w->sock->Shutdown();
  std::vector<std::shared_ptr<Worker>>& ws = w->key->workers;
  ws.erase(std::remove(ws.begin(), ws.end(), w), ws.end());
}

void TaskSubmitter::FailTask(const std::shared_ptr<TaskRecord>& t, absl::Status s) {
  {
    absl::MutexLock l(&mu_);
    by_result_.erase(t->result.get());
  }
  objects_.Fail(t->result, std::move(s));
}

absl::Status TaskSubmitter::Cancel(const RefState* ref, bool force) {
  std::shared_ptr<TaskRecord> t;
  std::shared_ptr<Worker> on;
  uint64_t seq = 0;
  bool queued = false;
  {
    absl::MutexLock l(&mu_);
    auto it = by_result_.find(ref);
    if (it == by_result_.end()) return absl::NotFoundError("no such task in flight");
    t = it->second.lock();
    if (t == nullptr) return absl::NotFoundError("no such task in flight");
    t->cancelled = true;
    for (auto& [name, k] : keys_) {
      auto q = std::find(k->queue.begin(), k->queue.end(), t);
      if (q != k->queue.end()) {
        k->queue.erase(q);
        queued = true;
        break;
      }
      for (const auto& w : k->workers) {
        for (const auto& [s, task] : w->in_flight) {
          if (task == t) {
            on = w;
            seq = s;
          }
        }
      }
    }
  }
  if (queued) {
    FailTask(t, TaskError(*t, absl::StatusCode::kCancelled, "cancelled before it started"));
    return absl::OkStatus();
  }
  if (on == nullptr) return absl::OkStatus();  // resolving its arguments: never sent
  if (force) {
    return agents_->KillWorker(on->agent_address, on->worker_id,
                               absl::StrCat("drover::Cancel(force) of ", t->display));
  }
  proto::TaskFrame frame;
  frame.mutable_cancel()->set_seq(seq);
  return on->sock->Send(frame);
}

void TaskSubmitter::HousekeepingLoop() {
  absl::MutexLock l(&mu_);
  absl::Time next_backoff_end = absl::InfiniteFuture();
  while (!shutdown_) {
    // Also the lease requests' back-off timer: wakes when the first back-off ends (a
    // request that starts one signals cv_, so this recomputes).
    clock_->WaitWithDeadline(&cv_, &mu_,
                             std::min(clock_->Now() + kHousekeepingPeriod, next_backoff_end));
    if (shutdown_) break;
    next_backoff_end = AdmitLocked();
    const absl::Time now = clock_->Now();
    for (auto& [name, k] : keys_) {
      if (!k->queue.empty()) continue;
      for (auto it = k->workers.begin(); it != k->workers.end();) {
        Worker& w = **it;
        if (w.in_flight.empty() && now - w.idle_since > kIdleReturn) {
          // Handing the lease back is closing the connection: the worker tells its
          // agent, which frees the lease and keeps the process warm.
          w.lost = true;
          w.sock->Shutdown();
          it = k->workers.erase(it);
        } else {
          ++it;
        }
      }
    }
    ++housekeeping_passes_;
  }
}

int TaskSubmitter::LeasedWorkers() {
  absl::MutexLock l(&mu_);
  int n = 0;
  for (auto& [name, k] : keys_) n += static_cast<int>(k->workers.size());
  return n;
}

TaskSubmitter::Progress TaskSubmitter::ProgressForTest() {
  absl::MutexLock l(&mu_);
  Progress p;
  p.housekeeping_passes = housekeeping_passes_;
  p.lease_backoffs = lease_backoffs_;
  p.revoke_frames = revoke_frames_;
  for (auto& [name, k] : keys_) {
    for (const auto& w : k->workers) p.revoked_workers += w->revoked && !w->lost ? 1 : 0;
  }
  return p;
}

void TaskSubmitter::Shutdown() {
  std::vector<std::shared_ptr<TaskRecord>> dropped;
  {
    absl::MutexLock l(&mu_);
    if (shutdown_) return;
    shutdown_ = true;
    cv_.SignalAll();
    for (auto& [name, k] : keys_) {
      for (auto& t : k->queue) dropped.push_back(std::move(t));
      k->queue.clear();
      for (auto& w : k->workers) {
        w->lost = true;
        for (auto& [seq, t] : w->in_flight) dropped.push_back(std::move(t));
        w->in_flight.clear();
        w->sock->Shutdown();
      }
    }
  }
  leases_->CancelAll();
  for (auto& t : dropped) {
    objects_.Fail(t->result, TaskError(*t, absl::StatusCode::kCancelled,
                                               "drover::Shutdown was called before it finished"));
  }
  if (housekeeping_.joinable()) housekeeping_.join();
  // Lease requests end when cancelled (those not begun return at once); readers once
  // their socket is shut.
  std::unique_ptr<ThreadPool> pool;
  {
    absl::MutexLock l(&mu_);
    pool = std::move(lease_pool_);
  }
  pool.reset();
  // Every socket is shut (above): the loop sees each close and lets go; it never
  // waits on a peer, so stopping it is bounded.
  if (own_loop_ != nullptr) own_loop_->Stop();
  threads_.Close();
  threads_.Wait();
}

}  // namespace drover::internal
