#include "sdk/runtime/actor_client.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/rpc.h"
#include "common/status.h"
#include "common/status_macros.h"

namespace drover::internal {
namespace {

constexpr absl::Duration kPollWait = absl::Seconds(2);
// How long an actor call to the scheduler waits for it while it is away (a restart).
constexpr absl::Duration kHeadAwayPatience = absl::Seconds(60);

std::string Describe(const proto::ActorInfo& info) {
  std::string s = absl::StrCat("actor ", info.actor_id());
  if (!info.class_name().empty()) absl::StrAppend(&s, " (", info.class_name());
  if (!info.name().empty()) absl::StrAppend(&s, info.class_name().empty() ? " (" : ", ", "named '", info.name(), "'");
  if (!info.class_name().empty() || !info.name().empty()) absl::StrAppend(&s, ")");
  return s;
}

}  // namespace

absl::Status ActorDeadError(const proto::ActorInfo& info) {
  return absl::FailedPreconditionError(
      absl::StrCat(Describe(info), " is dead: ", info.reason().empty() ? "unknown cause" : info.reason()));
}

ActorClient::ActorClient(Deps deps)
    : owner_(std::move(deps.owner)),
      directory_(deps.directory),
      connector_(deps.connector),
      agents_(deps.agents),
      objects_(*deps.objects),
      clock_(deps.clock != nullptr ? deps.clock : Clock::Real()),
      scheduler_address_(std::move(deps.scheduler_address)),
      own_outage_(deps.outage == nullptr ? std::make_unique<SchedulerOutage>(scheduler_address_)
                                         : nullptr),
      outage_(deps.outage != nullptr ? deps.outage : own_outage_.get()),
      own_loop_(deps.loop == nullptr ? std::make_unique<ConnectionLoop>() : nullptr),
      loop_(deps.loop != nullptr ? deps.loop : own_loop_.get()) {}

ActorClient::~ActorClient() { Shutdown(); }

std::shared_ptr<ActorState> ActorClient::FromId(const std::string& id) {
  absl::MutexLock l(&mu_);
  std::weak_ptr<ActorState>& slot = actors_[id];
  std::shared_ptr<ActorState> a = slot.lock();
  if (a == nullptr) {
    a = std::make_shared<ActorState>(id);
    slot = a;
  }
  return a;
}

std::shared_ptr<ActorState> ActorClient::Create(const std::string& factory_key,
                                                const CallOptions& options,
                                                std::vector<TaskArgument> args) {
  const std::string id = absl::StrCat("actor-", owner_.new_id());
  std::shared_ptr<ActorState> a = FromId(id);
  const FunctionInfo* fn = FindFunctionByKey(factory_key);
  if (fn == nullptr || fn->kind != FunctionKind::kFactory) {
    absl::MutexLock l(&a->mu_);
    a->dead_ = absl::InvalidArgumentError(absl::StrCat(
        "cannot create an actor: ", DescribeUnregistered(factory_key),
        " is not registered as an actor factory; add it to DROVER_REMOTE(...)"));
    return a;
  }
  auto task = std::make_shared<TaskRecord>();
  task->function = fn->name;
  task->display = options.name.empty() ? fn->name : options.name;
  task->options = options;
  task->args = std::move(args);
  ResolveArguments(objects_, task, [this, a, task, fn](absl::Status s) {
    if (!s.ok()) {
      FailAll(a, s);
      return;
    }
    threads_.Spawn([this, a, task, fn] {
      proto::TaskSpec spec;
      absl::Status built = BuildTaskSpec(objects_, *task, 0, &spec);
      if (!built.ok()) {
        FailAll(a, built);
        return;
      }
      proto::CreateActorRequest req;
      req.set_job_id(owner_.job_id);
      req.set_owner(owner_.owner);
      proto::ActorCreation* c = req.mutable_creation();
      c->set_actor_id(a->id);
      c->set_factory(fn->name);
      *c->mutable_args() = std::move(*spec.mutable_args());
      *c->mutable_dependencies() = std::move(*spec.mutable_dependencies());
      c->set_class_name(TypeName(*fn->cls));
      c->set_name(task->options.name);
      const CallOptions& o = task->options;
      req.mutable_shape()->set_cpus(o.resources.cpus);
      req.mutable_shape()->set_gpus(o.resources.gpus);
      req.mutable_shape()->set_memory_bytes(o.resources.memory_bytes);
      for (const auto& [k, v] : o.resources.custom) (*req.mutable_shape()->mutable_custom())[k] = v;
      *req.mutable_package() = owner_.package;
      req.mutable_hint()->set_node_id(o.node_id);
      req.mutable_hint()->set_soft(o.soft_affinity);
      req.mutable_hint()->set_spread(o.spread);  // SetSpread holds for actors too
      req.set_max_restarts(o.max_restarts);
      req.set_request_id(a->id);
      proto::CreateActorReply reply;
      absl::Status st =
          WhileSchedulerAway(absl::StrCat("creating actor ", a->id), kHeadAwayPatience,
                             [&] { return directory_->CreateActor(req, &reply); });
      if (!st.ok()) {
        FailAll(a, absl::Status(st.code(), absl::StrCat("cannot create actor ", a->id, " (",
                                                        task->display, "): ", st.message())));
        return;
      }
      Update(a, reply.actor());
      Pump(a);
    });
  });
  return a;
}

std::shared_ptr<RefState> ActorClient::Call(const std::shared_ptr<ActorState>& a,
                                            const std::string& method_key,
                                            const CallOptions& options,
                                            std::vector<TaskArgument> args) {
  const std::string id = owner_.new_id();
  const FunctionInfo* fn = FindFunctionByKey(method_key);
  if (fn == nullptr || fn->kind != FunctionKind::kMethod) {
    return objects_.NewFailed(
        id, absl::InvalidArgumentError(absl::StrCat(
                "cannot call ", DescribeUnregistered(method_key), " on actor ", a->id,
                ": it is not registered; add &Class::Method to DROVER_REMOTE(...)")));
  }
  auto task = std::make_shared<TaskRecord>();
  task->function = fn->name;
  task->display = options.name.empty() ? fn->name : options.name;
  task->options = options;
  task->args = std::move(args);
  task->result = objects_.NewPending(id);
  task->return_id = id;
  std::shared_ptr<RefState> result = task->result;
  absl::Status dead;
  {
    absl::MutexLock l(&a->mu_);
    dead = a->dead_;
    if (dead.ok()) a->queue_.push_back(ActorState::Call{task, false, absl::OkStatus()});
  }
  if (!dead.ok()) {
    objects_.Fail(result, std::move(dead));
    return result;
  }
  std::weak_ptr<ActorState> weak = a;
  ResolveArguments(objects_, task, [this, weak, task](absl::Status s) {
    std::shared_ptr<ActorState> a = weak.lock();
    if (a == nullptr) return;
    {
      absl::MutexLock l(&a->mu_);
      for (ActorState::Call& c : a->queue_) {
        if (c.task == task) {
          c.resolved = true;
          c.error = s;
        }
      }
    }
    Pump(a);
  });
  return result;
}

void ActorClient::Pump(const std::shared_ptr<ActorState>& a) {
  std::vector<std::pair<std::shared_ptr<TaskRecord>, absl::Status>> failed;
  SendReady(a, &failed);
  // After send_mu_ is released: a failed call's dependents may be calls on this actor,
  // whose callbacks Pump again.
  for (auto& [t, s] : failed) objects_.Fail(t->result, s);
}

void ActorClient::SendReady(const std::shared_ptr<ActorState>& a,
                            std::vector<std::pair<std::shared_ptr<TaskRecord>, absl::Status>>* out) {
  absl::MutexLock send_lock(&a->send_mu_);
  std::string frames;
  std::shared_ptr<FramedSocket> sock;
  std::vector<std::pair<std::shared_ptr<TaskRecord>, absl::Status>>& failed = *out;
  {
    absl::MutexLock l(&a->mu_);
    while (!a->queue_.empty() && a->queue_.front().resolved && !a->queue_.front().error.ok()) {
      failed.emplace_back(a->queue_.front().task, a->queue_.front().error);
      a->queue_.pop_front();
    }
    if (stopped_.load()) {
      // After Shutdown: a connection it shut may still be listed (the loop stops before
      // handling its close) and no thread may connect, so nothing sent or queued now
      // would ever end.
      for (auto& c : a->queue_) {
        failed.emplace_back(c.task, absl::CancelledError(absl::StrCat(
                                        "drover::Shutdown was called; the call ", c.task->display,
                                        " to actor ", a->id, " was not sent")));
      }
      a->queue_.clear();
    } else if (!a->dead_.ok()) {
      for (auto& c : a->queue_) failed.emplace_back(c.task, a->dead_);
      a->queue_.clear();
    } else if (a->sock_ == nullptr) {
      if (!a->connecting_ && !a->queue_.empty()) {
        a->connecting_ = true;
        if (!threads_.Spawn([this, a] { Connect(a); })) a->connecting_ = false;
      }
    } else {
      sock = a->sock_;
      while (!a->queue_.empty() && a->queue_.front().resolved) {
        ActorState::Call c = std::move(a->queue_.front());
        a->queue_.pop_front();
        if (!c.error.ok()) {
          failed.emplace_back(c.task, c.error);
          continue;
        }
        const uint64_t seq = a->next_seq_++;
        proto::TaskFrame frame;
        absl::Status built = BuildTaskSpec(objects_, *c.task, seq, frame.mutable_push());
        if (!built.ok()) {
          failed.emplace_back(c.task, built);
          continue;
        }
        a->in_flight_.emplace(seq, c.task);
        AppendFrame(frame, &frames);
      }
    }
  }
  if (sock != nullptr && !frames.empty()) sock->SendFrames(frames).IgnoreError();  // the reader sees a break
}

absl::StatusOr<proto::ActorInfo> ActorClient::Fetch(const std::string& id, const std::string& name,
                                                    int64_t after, absl::Duration wait,
                                                    absl::Duration patience) {
  proto::GetActorRequest req;
  req.set_actor_id(id);
  req.set_name(name);
  req.set_after_version(after);
  req.set_wait_ms(absl::ToInt64Milliseconds(wait));
  proto::GetActorReply reply;
  DROVER_RETURN_IF_ERROR(WhileSchedulerAway(
      id.empty() ? absl::StrCat("looking up actor '", name, "'") : absl::StrCat("actor ", id),
      patience, [&] { return directory_->GetActor(req, &reply); }));
  return reply.actor();
}

void ActorClient::Update(const std::shared_ptr<ActorState>& a, const proto::ActorInfo& info) {
  absl::MutexLock l(&a->mu_);
  if (a->known_ && info.version() < a->info_.version()) return;
  a->info_ = info;
  a->known_ = true;
  if (info.state() == proto::ACTOR_DEAD && a->dead_.ok()) a->dead_ = ActorDeadError(info);
  if (!info.agent_address().empty()) agents_->NoteAgent(info.node_id(), info.agent_address());
  a->changed_.SignalAll();
}

void ActorClient::FailAll(const std::shared_ptr<ActorState>& a, const absl::Status& s) {
  std::vector<std::shared_ptr<TaskRecord>> failed;
  {
    absl::MutexLock l(&a->mu_);
    if (a->dead_.ok()) a->dead_ = s;
    for (auto& c : a->queue_) failed.push_back(c.task);
    a->queue_.clear();
    for (auto& [seq, t] : a->in_flight_) failed.push_back(t);
    a->in_flight_.clear();
    a->connecting_ = false;
    a->changed_.SignalAll();
  }
  for (auto& t : failed) objects_.Fail(t->result, s);
}

void ActorClient::Connect(std::shared_ptr<ActorState> a) {
  for (;;) {
    int64_t after = 0;
    {
      absl::MutexLock l(&mu_);
      if (shutdown_) break;
    }
    {
      absl::MutexLock l(&a->mu_);
      if (!a->dead_.ok()) break;
      // Once the record says ALIVE, connect; else wait for it to change.
      if (a->known_ && a->info_.state() != proto::ACTOR_ALIVE) after = a->info_.version();
    }
    absl::StatusOr<proto::ActorInfo> info = Fetch(a->id, "", after, kPollWait, kHeadAwayPatience);
    if (!info.ok()) {
      if (info.status().code() == absl::StatusCode::kNotFound) {
        // Creation not yet recorded (CreateActor in flight) or an unknown id.
        absl::MutexLock l(&a->mu_);
        if (!a->known_) {
          clock_->WaitWithDeadline(&a->changed_, &a->mu_, clock_->Now() + absl::Milliseconds(50));
          continue;
        }
      }
      FailAll(a, absl::Status(info.status().code(),
                              absl::StrCat("cannot reach actor ", a->id, ": ", info.status().message())));
      return;
    }
    Update(a, *info);
    if (info->state() == proto::ACTOR_DEAD) break;
    if (info->state() != proto::ACTOR_ALIVE) continue;
    absl::StatusOr<std::unique_ptr<FramedSocket>> sock =
        connector_->Connect(info->node_id(), info->unix_path(), info->tcp_address(), "", a->id);
    if (!sock.ok()) {
      // Moved or restarting: wait for its record to change.
      absl::MutexLock l(&a->mu_);
      a->info_.set_state(proto::ACTOR_RESTARTING);
      continue;
    }
    std::shared_ptr<FramedSocket> shared(std::move(*sock));
    // Set (under a->mu_) once the loop saw the connection end, maybe before it is
    // published below.
    auto closed = std::make_shared<bool>(false);
    absl::Status watched = loop_->Watch(
        shared.get(), absl::StrCat("actor ", a->id),
        [this, a](std::string_view payload) { OnFrame(a, payload); },
        [this, a, shared, closed](const absl::Status&) { ConnectionClosed(a, shared, closed); });
    if (!watched.ok()) {
      FailAll(a, absl::Status(watched.code(), absl::StrCat("cannot read from actor ", a->id, ": ",
                                                           watched.message())));
      return;
    }
    bool shutting_down = false;
    {
      absl::MutexLock l(&mu_);
      shutting_down = shutdown_;
      // Not published once Shutdown has collected the sockets and calls: the loop may
      // stop before it handles this one's close, and calls pumped to it would never
      // fail.
      if (!shutting_down) sockets_[a->id] = shared;
    }
    if (shutting_down) {
      shared->Shutdown();
      FailAll(a, absl::CancelledError(absl::StrCat(
                     "drover::Shutdown was called while connecting to actor ", a->id)));
      return;
    }
    bool closed_first = false;
    {
      absl::MutexLock l(&a->mu_);
      closed_first = *closed;
      if (closed_first) {
        // Gone already (it died, or is restarting): wait for its record to change.
        a->info_.set_state(proto::ACTOR_RESTARTING);
      } else {
        a->sock_ = shared;
        a->connecting_ = false;
      }
    }
    if (closed_first) {
      // Its close may have run before it was listed above: take it off the list (unless
      // a newer connection replaced it).
      absl::MutexLock l(&mu_);
      auto it = sockets_.find(a->id);
      if (it != sockets_.end() && it->second == shared) sockets_.erase(it);
      continue;
    }
    Pump(a);
    return;
  }
  {
    absl::MutexLock l(&a->mu_);
    a->connecting_ = false;
  }
  Pump(a);  // fails what is queued if it is dead
}

void ActorClient::OnFrame(const std::shared_ptr<ActorState>& a, std::string_view payload) {
  proto::TaskFrame frame;
  if (!frame.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    std::shared_ptr<FramedSocket> sock;
    {
      absl::MutexLock l(&a->mu_);
      sock = a->sock_;
    }
    if (sock != nullptr) sock->Shutdown();  // its close path fails what is in flight
    return;
  }
  if (!frame.has_reply()) return;
  std::shared_ptr<TaskRecord> t;
  {
    absl::MutexLock l(&a->mu_);
    auto it = a->in_flight_.find(frame.reply().seq());
    if (it == a->in_flight_.end()) return;
    t = std::move(it->second);
    a->in_flight_.erase(it);
  }
  // An actor call is not run again (the actor's state moved on): no lineage.
  ApplyReply(objects_, t, *frame.mutable_reply(), /*lineage=*/false);
}

void ActorClient::ConnectionClosed(const std::shared_ptr<ActorState>& a,
                                   const std::shared_ptr<FramedSocket>& sock,
                                   const std::shared_ptr<bool>& closed) {
  // The connection broke: the actor's worker died (or we are shutting down).
  bool shutdown = false;
  {
    absl::MutexLock l(&mu_);
    auto it = sockets_.find(a->id);
    if (it != sockets_.end() && it->second == sock) sockets_.erase(it);
    shutdown = shutdown_;
  }
  std::vector<std::shared_ptr<TaskRecord>> lost;
  int64_t version = 0;
  {
    absl::MutexLock l(&a->mu_);
    *closed = true;
    if (a->sock_ != sock) return;  // never published (Connect tries again)
    a->sock_ = nullptr;
    for (auto& [seq, t] : a->in_flight_) lost.push_back(t);
    a->in_flight_.clear();
    version = a->info_.version();
  }
  // What happened? Asking the scheduler waits (up to seconds): not on the loop's thread.
  auto shared_lost = std::make_shared<std::vector<std::shared_ptr<TaskRecord>>>(std::move(lost));
  if (!shutdown &&
      threads_.Spawn([this, a, shared_lost, version] { Lost(a, std::move(*shared_lost), version); })) {
    return;
  }
  for (auto& t : *shared_lost) {
    objects_.Fail(t->result, absl::CancelledError("drover::Shutdown was called"));
  }
}

void ActorClient::Lost(const std::shared_ptr<ActorState>& a,
                       std::vector<std::shared_ptr<TaskRecord>> lost, int64_t version) {
  // The scheduler hears of the worker's exit from its agent.
  absl::StatusOr<proto::ActorInfo> info = Fetch(a->id, "", version, absl::Seconds(5), kHeadAwayPatience);
  std::string cause = "its worker's connection broke";
  if (info.ok()) {
    Update(a, *info);
    if (!info->reason().empty()) cause = info->reason();
  }
  for (auto& t : lost) {
    objects_.Fail(t->result, absl::UnavailableError(absl::StrCat(
                                         "actor ", a->id, " died while running ", t->display, ": ",
                                         cause)));
  }
  Pump(a);  // queued calls go to the restarted actor, or fail if it is dead
}

absl::StatusOr<std::shared_ptr<ActorState>> ActorClient::Lookup(const std::string& name,
                                                                absl::Duration timeout) {
  absl::StatusOr<proto::ActorInfo> info = Fetch("", name, 0, timeout, timeout);
  if (!info.ok()) return info.status();
  std::shared_ptr<ActorState> a = FromId(info->actor_id());
  Update(a, *info);
  if (info->state() == proto::ACTOR_DEAD) return ActorDeadError(*info);
  return a;
}

absl::Status ActorClient::Kill(const std::shared_ptr<ActorState>& a) {
  proto::KillActorRequest req;
  req.set_actor_id(a->id);
  req.set_reason("killed by drover::Kill");
  proto::KillActorReply reply;
  absl::Status s = WhileSchedulerAway(absl::StrCat("killing actor ", a->id), kHeadAwayPatience,
                                      [&] { return directory_->KillActor(req, &reply); });
  if (!s.ok()) return s;
  // The scheduler's record says DEAD now: so does this handle, at once (as ray.kill), so
  // a call made after Kill returns fails with the kill's reason instead of racing the
  // worker's death (it may reach the worker before the kill does).
  {
    absl::MutexLock l(&a->mu_);
    if (a->dead_.ok()) {
      proto::ActorInfo info = a->info_;
      info.set_actor_id(a->id);
      info.set_state(proto::ACTOR_DEAD);
      info.set_reason(req.reason());
      a->dead_ = ActorDeadError(info);
    }
    a->changed_.SignalAll();
  }
  Pump(a);  // fails the calls still queued here
  return absl::OkStatus();
}

absl::Status ActorClient::WaitReady(const std::shared_ptr<ActorState>& a, absl::Duration timeout) {
  const absl::Time deadline = clock_->Now() + timeout;
  for (;;) {
    int64_t after = 0;
    {
      absl::MutexLock l(&a->mu_);
      if (!a->dead_.ok()) return a->dead_;
      if (a->known_ && a->info_.state() == proto::ACTOR_ALIVE) return absl::OkStatus();
      if (a->known_) after = a->info_.version();
    }
    const absl::Duration left = deadline - clock_->Now();
    if (left <= absl::ZeroDuration()) {
      absl::MutexLock l(&a->mu_);
      return absl::DeadlineExceededError(absl::StrCat(
          "actor ", a->id, " is not ready",
          a->info_.pending_reason().empty() ? "" : absl::StrCat(": ", a->info_.pending_reason())));
    }
    absl::StatusOr<proto::ActorInfo> info = Fetch(a->id, "", after, std::min(left, kPollWait), left);
    if (!info.ok()) {
      if (info.status().code() != absl::StatusCode::kNotFound) return info.status();
      absl::MutexLock l(&a->mu_);
      // Creation in flight.
      clock_->WaitWithDeadline(&a->changed_, &a->mu_, clock_->Now() + absl::Milliseconds(20));
      continue;
    }
    Update(a, *info);
  }
}

absl::Status ActorClient::WaitDead(const std::shared_ptr<ActorState>& a, absl::Duration timeout) {
  const absl::Time deadline = clock_->Now() + timeout;
  for (;;) {
    int64_t after = 0;
    {
      absl::MutexLock l(&a->mu_);
      if (!a->dead_.ok()) return a->dead_;
      if (a->known_) after = a->info_.version();
    }
    const absl::Duration left = deadline - clock_->Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat("actor ", a->id, " is not dead"));
    }
    absl::StatusOr<proto::ActorInfo> info = Fetch(a->id, "", after, std::min(left, kPollWait), left);
    if (!info.ok()) return info.status();
    Update(a, *info);
  }
}

absl::Status ActorClient::WhileSchedulerAway(const std::string& what, absl::Duration patience,
                                             const std::function<absl::Status()>& attempt) {
  absl::Status s = attempt();
  if (!SchedulerOutage::IsAway(s)) return s;
  const absl::Time give_up = clock_->Now() + patience;
  Backoff pause;
  while (SchedulerOutage::IsAway(s)) {
    outage_->Away(s, absl::StrCat(what, " (up to ", absl::FormatDuration(patience), ")"));
    if (clock_->Now() + pause.Peek() > give_up) {
      return absl::UnavailableError(absl::StrCat(
          "the scheduler at ", scheduler_address_, " has not answered for ",
          absl::FormatDuration(patience), " (", what, "; last error: ", s.message(), ")"));
    }
    {
      absl::MutexLock l(&mu_);
      const absl::Time until = clock_->Now() + pause.Next();
      while (!shutdown_ && !clock_->WaitWithDeadline(&stopping_, &mu_, until)) {
      }
      if (shutdown_) {
        return absl::CancelledError(absl::StrCat("drover::Shutdown was called while ", what,
                                                 " waited for the scheduler at ",
                                                 scheduler_address_));
      }
    }
    s = attempt();
  }
  outage_->Back();
  return s;
}

std::pair<size_t, size_t> ActorClient::CallCounts(const std::shared_ptr<ActorState>& a) {
  absl::MutexLock l(&a->mu_);
  return {a->queue_.size(), a->in_flight_.size()};
}

void ActorClient::Shutdown() {
  // Two phases: shut every connection and fail what is in flight (nothing here waits
  // on a worker), then wait for this client's threads and its loop (each bounded).
  std::vector<std::shared_ptr<FramedSocket>> socks;
  std::vector<std::shared_ptr<ActorState>> actors;
  {
    absl::MutexLock l(&mu_);
    if (shutdown_) return;
    shutdown_ = true;
    stopped_.store(true);
    stopping_.SignalAll();  // calls waiting for an away scheduler
    for (auto& [id, s] : sockets_) socks.push_back(s);
    for (auto& [id, weak] : actors_) {
      if (std::shared_ptr<ActorState> a = weak.lock()) actors.push_back(std::move(a));
    }
  }
  for (auto& s : socks) s->Shutdown();
  auto fail_in_flight = [&] {
    std::vector<std::shared_ptr<TaskRecord>> in_flight;
    for (auto& a : actors) {
      absl::MutexLock l(&a->mu_);
      for (auto& [seq, t] : a->in_flight_) in_flight.push_back(std::move(t));
      a->in_flight_.clear();
    }
    for (auto& t : in_flight) {
      objects_.Fail(t->result, absl::CancelledError("drover::Shutdown was called"));
    }
  };
  fail_in_flight();
  threads_.Close();
  threads_.Wait();
  // Again: a connect or a lost connection's thread that was finishing may have pumped
  // calls meanwhile, and the loop may stop before it handles their connection's close.
  fail_in_flight();
  if (own_loop_ != nullptr) own_loop_->Stop();
}

}  // namespace drover::internal
