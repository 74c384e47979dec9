#include "sdk/runtime/worker_server.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/env.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "sdk/runtime/package.h"
#include "sdk/runtime/store_draft.h"

namespace drover::internal {
namespace {

// Results up to this size travel in the reply; larger ones go into the store.
constexpr size_t kInlineResultLimit = 100 * 1024;
// Run queued tasks for at most this long before reading new frames and writing replies.
constexpr absl::Duration kBatchTime = absl::Microseconds(500);
// How long a lease may wait for its holder to connect before the worker gives it back.
constexpr absl::Duration kLeaseClaimTime = absl::Seconds(30);
// How long the worker keeps polling for the next call after it ran some.
constexpr absl::Duration kStayAwake = absl::Microseconds(50);
// How long a task waits for its arguments to arrive on this node.
constexpr absl::Duration kArgumentWait = absl::Minutes(5);

// Set while the user's code runs (a task, a factory): SIGTERM then kills at once.
volatile sig_atomic_t g_in_user_code = 0;
struct InUserCode {
  InUserCode() { g_in_user_code = 1; }
  ~InUserCode() { g_in_user_code = 0; }
};

class UnpackedArgs : public ArgList {
 public:
  size_t size() const override { return handles_.size(); }
  const msgpack::object& at(size_t i) const override { return handles_[i].get(); }
  std::vector<msgpack::object_handle> handles_;
  std::vector<std::shared_ptr<const void>> pins_;
};

// Decodes `args` (values inline or in store objects) into `out`.
absl::Status UnpackArgs(RuntimeContext* ctx, const google::protobuf::RepeatedPtrField<proto::TaskArg>& args,
                        const google::protobuf::RepeatedPtrField<proto::StoredObject>& deps,
                        const std::string& what, UnpackedArgs* out) {
  const absl::Time deadline = absl::Now() + kArgumentWait;
  // Tensors inside the values: make them present here first (pulled from other nodes).
  for (const proto::StoredObject& d : deps) {
    absl::StatusOr<ValueView> v =
        ctx->store->Load(StoredRef{d.object_id(), d.node_id(), d.size()}, deadline);
    if (!v.ok()) {
      return absl::Status(v.status().code(), absl::StrCat("a tensor argument of ", what,
                                                          " is not available: ", v.status().message()));
    }
    out->pins_.push_back(v->keepalive);
  }
  out->handles_.resize(args.size());
  for (int i = 0; i < args.size(); ++i) {
    absl::string_view bytes;
    if (args[i].has_stored()) {
      const proto::StoredObject& s = args[i].stored();
      absl::StatusOr<ValueView> v =
          ctx->store->Load(StoredRef{s.object_id(), s.node_id(), s.size()}, deadline);
      if (!v.ok()) {
        return absl::Status(v.status().code(), absl::StrCat("argument ", i + 1, " of ", what,
                                                            " is not available: ", v.status().message()));
      }
      bytes = v->bytes;
      out->pins_.push_back(v->keepalive);
    } else {
      bytes = args[i].value();
    }
    absl::Status s = Unpack(bytes, &out->handles_[i]);
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat("argument ", i + 1, " of ", what, ": ", s.message()));
  }
  return absl::OkStatus();
}

}  // namespace

bool WorkerEnvironment::Present() { return !Env("DROVER_WORKER_ID").empty(); }

absl::StatusOr<WorkerEnvironment> WorkerEnvironment::Read() {
  WorkerEnvironment e;
  e.worker_id = Env("DROVER_WORKER_ID");
  e.control_socket = Env("DROVER_WORKER_CONTROL");
  e.socket_dir = Env("DROVER_WORKER_DIR");
  e.node_ip = Env("DROVER_NODE_IP");
  e.expected_build_id = Env("DROVER_EXPECTED_BUILD_ID");
  if (e.control_socket.empty() || e.socket_dir.empty()) {
    return absl::FailedPreconditionError(
        "DROVER_WORKER_ID is set but DROVER_WORKER_CONTROL or DROVER_WORKER_DIR is not: worker "
        "processes are started by a drover agent, not by hand");
  }
  if (e.node_ip.empty()) e.node_ip = "127.0.0.1";
  return e;
}

WorkerServer::WorkerServer(RuntimeContext* ctx, WorkerEnvironment env)
    : ctx_(ctx), env_(std::move(env)), server_(this, [&] {
        FrameServer::Options o;
        o.name = absl::StrCat("worker ", env_.worker_id);
        // Callers from other nodes: TLS in a TLS cluster.
        o.tcp_security = ctx_->transport.get();
        return o;
      }()) {}

WorkerServer::~WorkerServer() {
  if (actor_ != nullptr && actor_deleter_ != nullptr) actor_deleter_(actor_);
  for (int fd : term_pipe_) {
    if (fd >= 0) ::close(fd);
  }
  // server_ closes the sockets and removes the Unix socket's file.
}

std::string WorkerServer::Where() const {
  return absl::StrCat("node ", ctx_->node_id, ", worker ", env_.worker_id);
}

absl::Status WorkerServer::Setup() {
  DROVER_RETURN_IF_ERROR(server_.Init());
  unix_path_ = absl::StrCat(env_.socket_dir, "/", env_.worker_id, ".sock");
  DROVER_RETURN_IF_ERROR(server_.ListenUnix(unix_path_));
  DROVER_ASSIGN_OR_RETURN(tcp_port_, server_.ListenTcp(env_.node_ip));
  return absl::OkStatus();
}

int WorkerServer::Run() {
  build_id_ = BuildId();
  absl::StatusOr<std::unique_ptr<FramedSocket>> agent = ConnectToAgent();
  if (!agent.ok()) return 3;
  proto::WorkerControl reg = Registration();
  if (absl::Status s = CheckBuildId(); !s.ok()) return Refuse(**agent, reg, s);
  if (absl::Status s = Setup(); !s.ok()) return Refuse(**agent, reg, s);
  reg.mutable_register_()->set_unix_path(unix_path_);
  reg.mutable_register_()->set_tcp_port(tcp_port_);
  UseStoreForLargeTensors();
  if (absl::Status s = (*agent)->Send(reg); !s.ok()) return 3;
  StartTimeline();
  if (absl::Status s = JoinControl(*std::move(agent)); !s.ok()) {
    std::cerr << "drover worker " << env_.worker_id << ": " << s.message() << "\n";
    return 3;
  }
  return Serve();
}

absl::StatusOr<std::unique_ptr<FramedSocket>> WorkerServer::ConnectToAgent() {
  absl::StatusOr<std::unique_ptr<FramedSocket>> agent = FramedSocket::ConnectUnix(env_.control_socket);
  if (!agent.ok()) {
    std::cerr << "drover worker " << env_.worker_id << ": cannot reach the agent's control socket "
              << env_.control_socket << ": " << agent.status().message() << "\n";
  }
  return agent;
}

proto::WorkerControl WorkerServer::Registration() const {
  proto::WorkerControl reg;
  proto::WorkerRegister* r = reg.mutable_register_();
  r->set_token(ctx_->token);
  r->set_worker_id(env_.worker_id);
  r->set_pid(static_cast<int32_t>(::getpid()));
  r->set_build_id(build_id_);
  return reg;
}

absl::Status WorkerServer::CheckBuildId() const {
  if (env_.expected_build_id.empty() || env_.expected_build_id == build_id_) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "this binary (build id ", build_id_.empty() ? "none" : build_id_,
      ") is not the program whose tasks it was started for (build id ", env_.expected_build_id,
      "): the package on this node is a different build; rebuild and run the driver again so "
      "that the cluster gets the current binary"));
}

int WorkerServer::Refuse(FramedSocket& agent, proto::WorkerControl& reg, const absl::Status& why) {
  std::cerr << "drover worker " << env_.worker_id << ": " << why.message() << "\n";
  reg.mutable_register_()->set_error(std::string(why.message()));
  (void)agent.Send(reg);
  return 3;
}

void WorkerServer::UseStoreForLargeTensors() {
  if (!ctx_->store->has_store()) return;
  // Returning such a tensor then seals it in place.
  StoreDraft::Configure(ctx_->store->store(), ctx_->node_id,
                        [ctx = ctx_] { return ctx->NewObjectId(); });
  SetLargeTensorAllocator(&StoreDraft::Allocate, StoreDraft::kMinBytes);
}

void WorkerServer::StartTimeline() {
  if (!TimelineSwitch("DROVER_TIMELINE", true) || ctx_->job_id.empty() ||
      ctx_->scheduler_address.empty()) {
    return;
  }
  TimelineReporterOptions to;
  to.reporter = absl::StrCat(env_.worker_id, "@", ctx_->node_id);
  to.job_id = ctx_->job_id;
  to.node_id = ctx_->node_id;
  to.worker_id = env_.worker_id;
  to.capacity = TimelineBufferFromEnvironment(to.capacity);
  to.batch = std::min(to.batch, to.capacity);
  timeline_ = std::make_unique<TimelineReporter>(
      to, SchedulerTimelineSender(ctx_->scheduler_address, ctx_->token));
  CatchTerm();
}

absl::Status WorkerServer::JoinControl(std::unique_ptr<FramedSocket> agent) {
  // The loop owns the framing from here: it gets its own descriptor of the socket.
  const int fd = ::dup(agent->fd());
  agent.reset();
  if (fd < 0) return absl::InternalError(absl::StrCat("dup of the control socket: ", std::strerror(errno)));
  auto control = std::make_shared<Conn>();
  control->control = true;
  control->hello = true;
  DROVER_RETURN_IF_ERROR(server_.Adopt(std::make_unique<SocketStream>(fd), control).status());
  control_ = std::move(control);
  return absl::OkStatus();
}

int WorkerServer::Serve() {
  absl::Time idle_since = absl::InfiniteFuture();
  bool stay_awake = true;
  while (!stop_) {
    if (WaitForWork(&idle_since, &stay_awake) < 0) {
      DROVER_LOG(ERROR) << "epoll_wait: " << std::strerror(errno);
      return 1;
    }
    const bool ran = RunPending();
    server_.FlushAll();
    if (ran && pending_.empty()) idle_since = absl::Now();
  }
  if (terminated_) DieOfTerm();
  return 0;
}

// Stay awake a moment after work (polling, yielding the CPU between polls) while calls
// come back to back: the next call of a caller that waits for each result comes within
// microseconds, and a worker that went to sleep would first have to be woken (tens of
// microseconds on a VM whose idle CPU halts). When calls came further apart than that,
// polling would only take the CPU from others: sleep at once.
int WorkerServer::WaitForWork(absl::Time* idle_since, bool* stay_awake) {
  if (!pending_.empty()) return server_.Poll(0);
  const absl::Time until = *stay_awake ? *idle_since + kStayAwake : absl::InfinitePast();
  int n;
  while ((n = server_.Poll(0)) == 0 && absl::Now() < until && !stop_) sched_yield();
  if (n == 0 && !stop_) {
    // Sleep until something arrives, or until a lease nobody claimed expires.
    const bool waiting_for_holder = !lease_id_.empty() && !lease_connected_;
    n = server_.Poll(waiting_for_holder ? EventLoop::TimeoutMs(lease_claim_by_) : -1);
    if (n == 0 && waiting_for_holder && absl::Now() >= lease_claim_by_) ReleaseUnclaimedLease();
  }
  if (*idle_since != absl::InfiniteFuture()) {
    *stay_awake = absl::Now() - *idle_since <= kStayAwake;
    *idle_since = absl::InfiniteFuture();
  }
  return n;
}

bool WorkerServer::RunPending() {
  // Run what arrived, for a bounded time, then read and reply again.
  const absl::Time until = absl::Now() + kBatchTime;
  const bool ran = !pending_.empty();
  while (!pending_.empty() && !stop_) {
    Pending p = std::move(pending_.front());
    pending_.pop_front();
    RunTask(p);
    if (absl::Now() >= until) break;
  }
  return ran;
}

namespace {
int g_term_fd = -1;
void OnTerm(int) {
  if (g_in_user_code) {
    // A task or a factory runs (maybe for long): die now, as without a timeline.
    ::signal(SIGTERM, SIG_DFL);
    ::raise(SIGTERM);
    return;
  }
  const char c = 't';
  (void)!::write(g_term_fd, &c, 1);
}
}  // namespace

void WorkerServer::CatchTerm() {
  if (::pipe2(term_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) return;
  g_term_fd = term_pipe_[1];
  if (!server_.WatchFd(term_pipe_[0], [this] {
        terminated_ = true;
        stop_ = true;
      }).ok()) {
    return;
  }
  struct sigaction sa {};
  sa.sa_handler = OnTerm;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, nullptr);
}

void WorkerServer::DieOfTerm() {
  timeline_.reset();  // sends what it holds (bounded by the sender's deadline)
  ::signal(SIGTERM, SIG_DFL);
  ::raise(SIGTERM);
  std::_Exit(128 + SIGTERM);
}

void WorkerServer::OnFrame(const std::shared_ptr<FrameConn>& fc, std::string_view payload) {
  std::shared_ptr<Conn> c = std::static_pointer_cast<Conn>(fc);
  if (c->control) {
    OnControl(c, payload);
  } else {
    OnTaskFrame(c, payload);
  }
}

void WorkerServer::OnTaskFrame(const std::shared_ptr<Conn>& c, std::string_view payload) {
  proto::TaskFrame frame;
  if (!frame.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    c->MarkClosed();  // not our protocol
    return;
  }
  if (!c->hello) {
    proto::TaskFrame reply;
    proto::TaskHelloReply* hr = reply.mutable_hello_reply();
    hr->set_worker_id(env_.worker_id);
    hr->set_node_id(ctx_->node_id);
    absl::Status ok;
    const proto::TaskHello& h = frame.hello();
    if (!frame.has_hello() || !ConstantTimeEquals(h.token(), ctx_->token)) {
      ok = absl::UnauthenticatedError("wrong or missing cluster token");
    } else if (!h.lease_id().empty()) {
      if (h.lease_id() != lease_id_) {
        ok = absl::FailedPreconditionError(absl::StrCat(
            "worker ", env_.worker_id, " does not serve lease ", h.lease_id(),
            lease_id_.empty() ? " (it serves none)" : absl::StrCat(" (it serves ", lease_id_, ")")));
      } else if (lease_connected_) {
        ok = absl::AlreadyExistsError(absl::StrCat("lease ", h.lease_id(), " is already connected"));
      }
    } else if (h.actor_id().empty() || h.actor_id() != actor_id_) {
      ok = absl::NotFoundError(absl::StrCat("actor ", h.actor_id(), " is not on worker ",
                                            env_.worker_id, " (it may have been restarted elsewhere)"));
    }
    hr->set_code(static_cast<int>(ok.code()));
    hr->set_message(std::string(ok.message()));
    server_.Send(c, reply);
    if (!ok.ok()) {
      c->MarkClosed();
      return;
    }
    c->hello = true;
    c->caller = h.caller();
    if (!h.lease_id().empty()) {
      c->lease = true;
      lease_connected_ = true;
      if (!lease_revoked_.empty()) TellRevoked();
    }
    return;
  }
  if (frame.has_push()) {
    pending_.push_back(Pending{c, std::move(*frame.mutable_push())});
  } else if (frame.has_cancel()) {
    cancelled_.insert({c.get(), frame.cancel().seq()});
  }
}

void WorkerServer::OnControl(const std::shared_ptr<Conn>& c, std::string_view payload) {
  proto::WorkerControl msg;
  if (!msg.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) return;
  if (msg.has_assign()) {
    lease_id_ = msg.assign().lease_id();
    lease_connected_ = false;
    lease_revoked_.clear();
    lease_claim_by_ = absl::Now() + kLeaseClaimTime;
  } else if (msg.has_create_actor()) {
    CreateActor(msg.create_actor());
  } else if (msg.has_revoke() && !lease_id_.empty() && msg.revoke().lease_id() == lease_id_) {
    lease_revoked_ = msg.revoke().reason().empty() ? "revoked" : msg.revoke().reason();
    if (lease_connected_) TellRevoked();
  }
}

void WorkerServer::TellRevoked() {
  server_.ForEach([&](const std::shared_ptr<FrameConn>& fc) {
    const Conn& c = static_cast<const Conn&>(*fc);
    if (!c.lease || c.closed() || !c.hello) return;
    proto::TaskFrame frame;
    frame.mutable_revoked()->set_lease_id(lease_id_);
    frame.mutable_revoked()->set_reason(lease_revoked_);
    server_.Send(fc, frame);
  });
}

void WorkerServer::SendControl(const proto::WorkerControl& msg) {
  if (control_ != nullptr && !control_->closed()) server_.Send(control_, msg);
}

void WorkerServer::CreateActor(const proto::ActorCreation& creation) {
  proto::WorkerControl reply;
  proto::ActorCreated* done = reply.mutable_actor_created();
  done->set_actor_id(creation.actor_id());
  absl::Status status;
  const FunctionInfo* fn = FindFunctionByName(creation.factory());
  const std::string what = absl::StrCat(creation.factory(), " (on ", Where(), ")");
  if (fn == nullptr || fn->kind != FunctionKind::kFactory) {
    status = absl::NotFoundError(absl::StrCat(creation.factory(), " is not a registered actor factory "
                                              "in this binary: add it to DROVER_REMOTE"));
  } else if (actor_ != nullptr) {
    status = absl::FailedPreconditionError(absl::StrCat("worker ", env_.worker_id, " hosts actor ",
                                                        actor_id_, " already"));
  } else {
    UnpackedArgs args;
    status = UnpackArgs(ctx_, creation.args(), creation.dependencies(), what, &args);
    if (status.ok()) {
      bool user_error = false;
      absl::StatusOr<void*> made;
      ScopedCodecContext codec(RuntimeCodecContext());
      try {
        InUserCode busy;
        made = fn->create(args, &user_error);
      } catch (const std::exception& e) {
        made = absl::InternalError(absl::StrCat("threw ", TypeName(typeid(e)), ": ", e.what()));
      } catch (...) {
        made = absl::InternalError("threw an exception that is not a std::exception");
      }
      if (made.ok()) {
        actor_ = *made;
        actor_deleter_ = fn->deleter;
        actor_class_ = fn->cls;
        actor_id_ = creation.actor_id();
        if (timeline_ != nullptr) timeline_->SetActor(actor_id_);
      } else {
        status = made.status();
      }
    }
  }
  if (!status.ok()) {
    status = absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
  }
  done->set_code(static_cast<int>(status.code()));
  done->set_message(std::string(status.message()));
  SendControl(reply);
}

void WorkerServer::RunTask(Pending& p) {
  if (p.conn->closed()) return;
  proto::TaskFrame frame;
  proto::TaskReply* reply = frame.mutable_reply();
  if (cancelled_.erase({p.conn.get(), p.spec.seq()}) > 0) {
    reply->set_seq(p.spec.seq());
    reply->set_code(static_cast<int>(absl::StatusCode::kCancelled));
    reply->set_message(absl::StrCat(p.spec.name().empty() ? p.spec.function() : p.spec.name(),
                                    ": cancelled before it started"));
  } else {
    // With a full timeline buffer (over ~4,000 tasks a second) the task is only counted.
    const bool note = timeline_ != nullptr && timeline_->Accepting();
    const absl::Time start = note ? absl::Now() : absl::InfinitePast();
    {
      InUserCode busy;
      *reply = Execute(p.spec);
    }
    if (note) {
      NoteTask(p.spec, *reply, start);
    } else if (timeline_ != nullptr) {
      timeline_->CountDropped();
    }
  }
  p.conn->Queue(frame);  // written after the batch (Serve)
}

void WorkerServer::NoteTask(const proto::TaskSpec& spec, const proto::TaskReply& reply,
                            absl::Time start) {
  TimelineRecord r;
  r.start_us = absl::ToUnixMicros(start);
  r.duration_us = absl::ToInt64Microseconds(absl::Now() - start);
  r.name = spec.name().empty() ? spec.function() : spec.name();
  r.actor_call = actor_ != nullptr;
  if (reply.code() != static_cast<int>(absl::StatusCode::kOk)) {
    r.failed = true;
    r.detail = reply.message().substr(0, 512);
  }
  timeline_->Add(std::move(r));
}

proto::TaskReply WorkerServer::Execute(const proto::TaskSpec& spec) {
  proto::TaskReply reply;
  reply.set_seq(spec.seq());
  const std::string& name = spec.name().empty() ? spec.function() : spec.name();
  const std::string what = absl::StrCat(name, " (on ", Where(), ")");
  auto fail = [&](const absl::Status& s, bool user) {
    reply.set_code(static_cast<int>(s.code()));
    reply.set_message(absl::StrCat(what, ": ", s.message()));
    reply.set_user_error(user);
    return reply;
  };
  const FunctionInfo* fn = FindFunctionByName(spec.function());
  if (fn == nullptr) {
    return fail(absl::NotFoundError(absl::StrCat(spec.function(), " is not registered in this "
                                                 "worker's binary: add it to DROVER_REMOTE")),
                false);
  }
  void* self = nullptr;
  if (fn->kind == FunctionKind::kMethod) {
    if (actor_ == nullptr) {
      return fail(absl::FailedPreconditionError("a method call reached a worker with no actor"), false);
    }
    if (fn->cls != actor_class_ && *fn->cls != *actor_class_) {
      return fail(absl::InvalidArgumentError(absl::StrCat(
                      spec.function(), " is a method of ", TypeName(*fn->cls), ", but actor ",
                      actor_id_, " is a ", TypeName(*actor_class_))),
                  false);
    }
    self = actor_;
  } else if (fn->kind == FunctionKind::kFactory) {
    return fail(absl::InvalidArgumentError(absl::StrCat(spec.function(), " is an actor factory: use drover::Actor")),
                false);
  }
  UnpackedArgs args;
  if (absl::Status s = UnpackArgs(ctx_, spec.args(), spec.dependencies(), name, &args); !s.ok()) {
    return fail(s, false);
  }
  const absl::Time start = absl::Now();
  InvokeResult r;
  // Tensors in the arguments are read from (and results put into) this node's store.
  ScopedCodecContext codec(RuntimeCodecContext());
  try {
    r = fn->invoke(self, args);
  } catch (const std::exception& e) {
    r.status = absl::UnknownError(absl::StrCat("threw ", TypeName(typeid(e)), ": ", e.what()));
    r.user_error = true;
  } catch (...) {
    r.status = absl::UnknownError("threw an exception that is not a std::exception");
    r.user_error = true;
  }
  reply.set_run_us(absl::ToInt64Microseconds(absl::Now() - start));
  if (!r.status.ok()) return fail(r.status, r.user_error);
  for (const StoredRef& s : r.value.stored) {
    proto::StoredObject* o = reply.add_contained();
    o->set_object_id(s.object_id);
    o->set_node_id(s.node_id);
    o->set_size(s.size);
  }
  if (r.value.bytes.size() <= kInlineResultLimit) {
    reply.set_value(std::move(r.value.bytes));
    return reply;
  }
  absl::StatusOr<StoredRef> stored = ctx_->store->Put(spec.return_id(), r.value.bytes);
  if (!stored.ok()) {
    return fail(absl::Status(stored.status().code(),
                             absl::StrCat("cannot store its result (", r.value.bytes.size(),
                                          " bytes): ", stored.status().message())),
                false);
  }
  proto::StoredObject* o = reply.mutable_stored();
  o->set_object_id(stored->object_id);
  o->set_node_id(stored->node_id);
  o->set_size(stored->size);
  return reply;
}

void WorkerServer::ReleaseUnclaimedLease() {
  // Its holder never connected (it died after the lease was granted): give it back.
  DROVER_LOG(WARNING) << "worker " << env_.worker_id << ": lease " << lease_id_
                      << " was not claimed within " << absl::FormatDuration(kLeaseClaimTime)
                      << "; returning it";
  proto::WorkerControl msg;
  msg.mutable_lease_ended()->set_lease_id(lease_id_);
  lease_id_.clear();
  SendControl(msg);
}

void WorkerServer::OnClosed(const std::shared_ptr<FrameConn>& fc, std::string_view why) {
  const std::shared_ptr<Conn> c = std::static_pointer_cast<Conn>(fc);
  if (c->control) {
    // The agent is gone: so is this worker.
    stop_ = true;
  }
  if (c->lease) {
    int unfinished = 0;
    for (const Pending& p : pending_) unfinished += p.conn == c ? 1 : 0;
    proto::WorkerControl msg;
    msg.mutable_lease_ended()->set_lease_id(lease_id_);
    msg.mutable_lease_ended()->set_unfinished(unfinished);
    lease_id_.clear();
    lease_connected_ = false;
    SendControl(msg);
    // Its holder is done (or gone, and its job may end): send what the timeline holds.
    if (timeline_ != nullptr) timeline_->Flush(absl::ZeroDuration());
  }
  for (auto it = pending_.begin(); it != pending_.end();) {
    it = it->conn == c ? pending_.erase(it) : it + 1;
  }
  for (auto it = cancelled_.begin(); it != cancelled_.end();) {
    it = it->first == c.get() ? cancelled_.erase(it) : std::next(it);
  }
}

}  // namespace drover::internal
