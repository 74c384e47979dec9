#include "sdk/runtime/queue_client.h"

#include <poll.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "drover/task.h"
#include "sdk/runtime/store_tensor.h"

namespace drover::internal {
namespace {

// How long the host may take beyond a request's own timeout before the client gives up
// on it (a host that is alive always answers by then).
constexpr absl::Duration kAnswerMargin = absl::Seconds(30);
// How long a client that lost its connection waits for the scheduler to say why.
constexpr absl::Duration kDeathCauseWait = absl::Seconds(5);
// How often a call waiting for its answer asks whether the host is still alive.
constexpr absl::Duration kLivenessCheck = absl::Seconds(5);
// How long Create waits for the queue's host to start.
constexpr absl::Duration kStartWait = absl::Minutes(2);
// How long a drained queue waits at its creator's exit for a consumer to ask again and
// be told the end, before the job (and the queue) ends anyway.
constexpr absl::Duration kEndGrace = absl::Seconds(10);
constexpr absl::Duration kDrainPoll = absl::Milliseconds(20);

// Queues to drain before this driver's job ends (keep_until_drained), with their limits.
absl::Mutex drain_mu(absl::kConstInit);
std::vector<std::pair<std::shared_ptr<QueueClient>, absl::Duration>>& ToDrain()
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(drain_mu) {
  static auto* queues = new std::vector<std::pair<std::shared_ptr<QueueClient>, absl::Duration>>();
  return *queues;
}

// Waits until `q` is closed and drained and a consumer saw the end (QueueOptions).
void DrainOne(QueueClient& q, absl::Duration limit) {
  if (!QueueClose(q).ok()) return;  // destroyed or gone: nothing to wait for
  const absl::Time start = absl::Now();
  absl::Time drained_at = absl::InfiniteFuture();
  bool told = false;
  while (true) {
    proto::QueueRequest req;
    req.mutable_stats();
    absl::StatusOr<proto::QueueReply> reply = q.Call(std::move(req), absl::ZeroDuration());
    if (!reply.ok()) return;
    const proto::QueueStats& s = reply->stats();
    const absl::Time now = absl::Now();
    if (s.size() == 0) {
      if (s.ends_seen() > 0) return;
      drained_at = std::min(drained_at, now);
      if (now - drained_at >= kEndGrace) return;
    } else if (!told) {
      std::cerr << "drover: queue '" << q.name() << "' keeps this job until its consumers take its "
                << s.size() << " item(s) (QueueOptions::keep_until_drained)\n";
      told = true;
    }
    if (now - start >= limit) {
      std::cerr << "drover: queue '" << q.name() << "' still holds " << s.size() << " item(s) after "
                << absl::FormatDuration(limit) << " (its drain_timeout): ending the job with it\n";
      return;
    }
    absl::SleepFor(kDrainPoll);
  }
}

int64_t TimeoutMs(absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) return -1;
  if (timeout <= absl::ZeroDuration()) return 0;
  return std::max<int64_t>(1, absl::ToInt64Milliseconds(absl::Ceil(timeout, absl::Milliseconds(1))));
}

// True if WaitActorDead's answer says the actor is dead (its cause), not that it is
// alive (DEADLINE_EXCEEDED) or that the scheduler could not be asked.
bool IsDead(const absl::Status& s) {
  return s.code() == absl::StatusCode::kFailedPrecondition || s.code() == absl::StatusCode::kNotFound;
}

absl::Status ReplyStatus(const proto::QueueReply& r) {
  return absl::Status(static_cast<absl::StatusCode>(r.code()), r.message());
}

// One QueueClient per queue in this process.
absl::Mutex g_clients_mu;
std::map<std::string, std::weak_ptr<QueueClient>>& Clients() ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_clients_mu) {
  static auto* m = new std::map<std::string, std::weak_ptr<QueueClient>>();
  return *m;
}

std::shared_ptr<QueueClient> Shared(RuntimeContext* ctx, std::shared_ptr<ActorState> actor,
                                    QueueEndpoint endpoint) {
  absl::MutexLock l(&g_clients_mu);
  auto& clients = Clients();
  for (auto it = clients.begin(); it != clients.end();) {  // forget queues nobody here holds
    it = it->second.expired() ? clients.erase(it) : std::next(it);
  }
  std::weak_ptr<QueueClient>& slot = clients[endpoint.spec.queue_id];
  if (std::shared_ptr<QueueClient> c = slot.lock()) return c;
  auto c = std::make_shared<QueueClient>(ctx, std::move(actor), std::move(endpoint));
  slot = c;
  return c;
}

absl::StatusOr<RuntimeContext*> Context() {
  RuntimeContext* ctx = CurrentRuntimeContext();
  if (ctx == nullptr) return absl::FailedPreconditionError("a drover::Queue needs drover::Init first");
  return ctx;
}

absl::StatusOr<std::shared_ptr<QueueClient>> Attach(RuntimeContext* ctx, const ActorHandle<QueueHost>& host,
                                                    absl::Duration timeout) {
  absl::StatusOr<QueueEndpoint> ep = Get(host.Task(&QueueHost::Endpoint).Remote(), timeout);
  if (!ep.ok()) {
    return absl::Status(ep.status().code(), absl::StrCat("the queue's host did not start: ", ep.status().message()));
  }
  return Shared(ctx, host.state(), *std::move(ep));
}

}  // namespace

QueueClient::QueueClient(RuntimeContext* ctx, std::shared_ptr<ActorState> actor, QueueEndpoint endpoint)
    : ctx_(ctx), actor_(std::move(actor)), endpoint_(std::move(endpoint)) {}

absl::StatusOr<std::unique_ptr<FramedSocket>> QueueClient::Connect() {
  const bool local = endpoint_.node_id == ctx_->node_id && !endpoint_.unix_path.empty();
  absl::StatusOr<std::unique_ptr<FramedSocket>> sock =
      local ? FramedSocket::ConnectUnix(endpoint_.unix_path)
            : FramedSocket::ConnectTcp(endpoint_.tcp_address, *ctx_->transport);
  if (!sock.ok()) return Lost(sock.status());
  SetNoDelay((*sock)->fd());
  proto::QueueRequest hello;
  proto::QueueHello* h = hello.mutable_hello();
  h->set_token(ctx_->token);
  h->set_queue_id(endpoint_.spec.queue_id);
  h->set_caller(ctx_->owner);
  proto::QueueReply reply;
  absl::Status s = (*sock)->Send(hello);
  if (s.ok()) s = (*sock)->Read(&reply);
  if (!s.ok()) return Lost(s);
  DROVER_RETURN_IF_ERROR(ReplyStatus(reply));
  return sock;
}

absl::Status QueueClient::Lost(const absl::Status& transport) {
  absl::Status cause = WaitActorDead(actor_, kDeathCauseWait);
  if (!IsDead(cause)) {
    return absl::UnavailableError(absl::StrCat("queue '", name(), "': lost the connection to its host (",
                                               transport.message(), "), which the scheduler still lists as alive"));
  }
  absl::Status gone = absl::AbortedError(absl::StrCat(
      "queue '", name(), "' is gone with its items: its host (actor ", ActorId(*actor_), ", pid ",
      endpoint_.pid, " on node ", endpoint_.node_id, ") died: ", cause.message()));
  absl::MutexLock l(&mu_);
  if (gone_.ok()) gone_ = gone;
  return gone_;
}

void QueueClient::MarkDestroyed() {
  absl::MutexLock l(&mu_);
  if (gone_.ok()) gone_ = absl::FailedPreconditionError(absl::StrCat("queue '", name(), "' was destroyed"));
  idle_.clear();
}

absl::StatusOr<proto::QueueReply> QueueClient::Call(proto::QueueRequest request, absl::Duration wait) {
  std::unique_ptr<FramedSocket> sock;
  {
    absl::MutexLock l(&mu_);
    if (!gone_.ok()) return gone_;
    request.set_request_id(next_request_++);
    if (!idle_.empty()) {
      sock = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  if (sock == nullptr) {
    DROVER_ASSIGN_OR_RETURN(sock, Connect());
  }
  if (absl::Status s = sock->Send(request); !s.ok()) return Lost(s);
  // Wait for the answer a while at a time: a host whose machine vanished without
  // closing anything (power loss) breaks no connection, but the scheduler declares its
  // node, and so the actor, dead.
  const absl::Time deadline =
      wait == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + std::max(wait, absl::ZeroDuration()) + kAnswerMargin;
  for (;;) {
    pollfd p{sock->fd(), POLLIN, 0};
    const absl::Duration slice = std::min(kLivenessCheck, std::max(deadline - absl::Now(), absl::ZeroDuration()));
    if (::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(absl::Ceil(slice, absl::Milliseconds(1))))) != 0) break;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("queue '", name(), "': its host did not answer within ",
                                                      absl::FormatDuration(wait + kAnswerMargin)));
    }
    if (IsDead(WaitActorDead(actor_, absl::Milliseconds(1)))) return Lost(absl::UnavailableError("no answer"));
  }
  proto::QueueReply reply;
  if (absl::Status s = sock->Read(&reply); !s.ok()) return Lost(s);
  {
    absl::MutexLock l(&mu_);
    if (gone_.ok()) idle_.push_back(std::move(sock));
  }
  DROVER_RETURN_IF_ERROR(ReplyStatus(reply));
  return reply;
}

std::unique_ptr<CodecContext> NewOwningContext(std::vector<StoredRef> owned, bool pin) {
  return std::make_unique<OwningCodecContext>(std::move(owned), pin);
}

absl::StatusOr<std::shared_ptr<QueueClient>> CreateQueue(const QueueOptions& options) {
  DROVER_ASSIGN_OR_RETURN(RuntimeContext * ctx, Context());
  QueueSpec spec;
  spec.queue_id = ctx->NewObjectId();
  spec.name = options.name.empty() ? spec.queue_id : options.name;
  spec.capacity = options.capacity;
  // Its host takes no CPU from the books: it only moves handles.
  auto actor = Actor(MakeQueueHost).SetResources({.cpus = 0}).SetMaxRestarts(0);
  if (!options.name.empty()) actor.SetName(options.name);
  if (!options.node_id.empty()) {
    actor.SetNodeAffinity(options.node_id);
  } else if (!ctx->node_id.empty()) {
    actor.SetNodeAffinity(ctx->node_id, /*soft=*/true);
  }
  if (options.keep_until_drained && RunningAsWorker()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "queue '", spec.name, "': keep_until_drained is for queues a driver creates (a task's process does not "
        "decide when its job ends); create the queue in the driver and pass it to the tasks"));
  }
  absl::StatusOr<std::shared_ptr<QueueClient>> q = Attach(ctx, actor.Remote(spec), kStartWait);
  if (q.ok() && options.keep_until_drained) {
    absl::MutexLock l(&drain_mu);
    ToDrain().emplace_back(*q, options.drain_timeout);
  }
  return q;
}


void DrainQueuesBeforeExit() {
  std::vector<std::pair<std::shared_ptr<QueueClient>, absl::Duration>> queues;
  {
    absl::MutexLock l(&drain_mu);
    queues.swap(ToDrain());
  }
  for (auto& [q, limit] : queues) DrainOne(*q, limit);
}

absl::StatusOr<std::shared_ptr<QueueClient>> OpenQueue(const std::string& name, absl::Duration timeout) {
  DROVER_ASSIGN_OR_RETURN(RuntimeContext * ctx, Context());
  DROVER_ASSIGN_OR_RETURN(ActorHandle<QueueHost> host, GetActor<QueueHost>(name, timeout));
  return Attach(ctx, host, std::max(timeout, absl::Seconds(10)));
}

absl::Status QueuePut(QueueClient& q, EncodedValue value, absl::Duration timeout) {
  proto::QueueRequest req;
  proto::QueuePut* put = req.mutable_put();
  put->set_timeout_ms(TimeoutMs(timeout));
  put->mutable_item()->set_value(std::move(value.bytes));
  for (const StoredRef& r : value.stored) {
    proto::StoredObject* o = put->mutable_item()->add_owned();
    o->set_object_id(r.object_id);
    o->set_node_id(r.node_id);
    o->set_size(r.size);
  }
  absl::StatusOr<proto::QueueReply> reply = q.Call(std::move(req), timeout);
  // An item that was not queued gives its objects back (a tensor of this process that
  // was sealed for it owns its object again) or frees them (copies made for it).
  if (!reply.ok() && !value.stored.empty()) StoreObjectStorage::ReturnOrDelete(value.stored);
  return reply.status();
}

absl::StatusOr<std::vector<OwnedValue>> QueueGet(QueueClient& q, absl::Duration timeout, int max_items) {
  proto::QueueRequest req;
  req.mutable_get()->set_timeout_ms(TimeoutMs(timeout));
  req.mutable_get()->set_max_items(static_cast<uint32_t>(std::max(max_items, 1)));
  DROVER_ASSIGN_OR_RETURN(proto::QueueReply reply, q.Call(std::move(req), timeout));
  auto keep = std::make_shared<proto::QueueReply>(std::move(reply));
  std::vector<OwnedValue> out;
  for (const proto::QueueItem& item : keep->items()) {
    OwnedValue v;
    v.view = ValueView{item.value(), keep};
    for (const proto::StoredObject& o : item.owned()) v.owned.push_back(StoredRef{o.object_id(), o.node_id(), o.size()});
    out.push_back(std::move(v));
  }
  if (out.empty()) return absl::InternalError(absl::StrCat("queue '", q.name(), "' answered a get with no item"));
  return out;
}

absl::Status QueueClose(QueueClient& q) {
  proto::QueueRequest req;
  req.mutable_close();
  return q.Call(std::move(req), absl::ZeroDuration()).status();
}

absl::StatusOr<QueueInfo> QueueStats(QueueClient& q) {
  proto::QueueRequest req;
  req.mutable_stats();
  DROVER_ASSIGN_OR_RETURN(proto::QueueReply reply, q.Call(std::move(req), absl::ZeroDuration()));
  const proto::QueueStats& s = reply.stats();
  QueueInfo info;
  info.size = s.size();
  info.capacity = s.capacity();
  info.closed = s.closed();
  info.puts = s.puts();
  info.gets = s.gets();
  info.waiting_puts = s.waiting_puts();
  info.waiting_gets = s.waiting_gets();
  info.stored_bytes = s.stored_bytes();
  return info;
}

absl::Status QueueDestroy(QueueClient& q) {
  DROVER_RETURN_IF_ERROR(KillActor(q.actor()));
  q.MarkDestroyed();
  return absl::OkStatus();
}

const std::string& QueueName(const QueueClient& q) { return q.name(); }
const std::string& QueueId(const QueueClient& q) { return q.id(); }
int64_t QueueHostPid(const QueueClient& q) { return q.endpoint().pid; }
const std::string& QueueHostNode(const QueueClient& q) { return q.endpoint().node_id; }

std::string EncodeQueue(const QueueClient& q) {
  std::string out;
  struct Writer {
    std::string* s;
    void write(const char* d, size_t n) { s->append(d, n); }
  } w{&out};
  msgpack::pack(w, std::make_tuple(ActorId(*q.actor()), q.endpoint()));
  return out;
}

std::shared_ptr<QueueClient> DecodeQueue(const char* data, size_t size) {
  std::string actor_id;
  QueueEndpoint endpoint;
  try {
    msgpack::object_handle h = msgpack::unpack(data, size);
    std::tie(actor_id, endpoint) = h.get().as<std::tuple<std::string, QueueEndpoint>>();
  } catch (const std::exception& e) {
    throw DecodeError(absl::StrCat("a Queue value does not decode: ", e.what()));
  }
  absl::StatusOr<RuntimeContext*> ctx = Context();
  if (!ctx.ok()) throw DecodeError(std::string(ctx.status().message()));
  return Shared(*ctx, ActorFromId(actor_id), std::move(endpoint));
}

}  // namespace drover::internal
