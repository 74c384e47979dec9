#include "object_store/client.h"

#include <sys/random.h>
#include <sys/stat.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "object_store/internal/connection.h"
#include "object_store/internal/leased_put.h"
#include "object_store/parallel_copy.h"
#include "object_store/wire_status.h"
#include "proto/object_store.pb.h"

namespace drover::object_store {

namespace {

// The status of a Get result that was not found; a store that sent no code for it
// gets UNKNOWN.
absl::Status MissingStatus(const proto::GetResult& g) {
  absl::Status s = ReplyStatus(g);
  return s.ok() ? absl::UnknownError(g.message()) : s;
}

int64_t TimeoutMs(absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) return -1;
  if (timeout <= absl::ZeroDuration()) return 0;
  return std::max<int64_t>(1, absl::ToInt64Milliseconds(absl::Ceil(timeout, absl::Milliseconds(1))));
}

// Checks that [offset, offset + size) lies in the arena (the store is trusted, but a
// bad location must not turn into a wild pointer).
bool InArena(uint64_t offset, uint64_t size, uint64_t capacity) {
  return offset <= capacity && size <= capacity - offset;
}

absl::Status CheckLocation(const proto::ObjectLocation& loc, uint64_t capacity) {
  if (!InArena(loc.offset(), loc.metadata_size(), capacity) ||
      loc.data_offset() > capacity || !InArena(loc.offset(), loc.data_offset(), capacity) ||
      !InArena(loc.offset() + loc.data_offset(), loc.data_size(), capacity)) {
    return absl::InternalError(absl::StrCat(
        "the object store sent a location outside the arena (offset ", loc.offset(),
        ", data_offset ", loc.data_offset(), ", data_size ", loc.data_size(), ", capacity ",
        capacity, ")"));
  }
  return absl::OkStatus();
}

// Sends the connection's request and waits for its reply: the reply if its code is OK,
// else the reply's status (or the transport's).
// `wait_until`: what the request asks the store to wait until (a Get's timeout;
// InfinitePast for none); `deadline`: the call's.
absl::StatusOr<const proto::StoreReply*> CallChecked(internal::Connection& c,
                                                     absl::Time wait_until,
                                                     absl::Time deadline)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu()) {
  DROVER_ASSIGN_OR_RETURN(const proto::StoreReply* reply,
                          c.CallLocked(c.ReplyDeadline(wait_until, deadline)));
  DROVER_RETURN_IF_ERROR(ReplyStatus(*reply));
  return reply;
}

// Points `*data` and `*metadata` at the object at `loc` in the arena at `base`.
// REQUIRES: CheckLocation(loc) is OK.
void SetSpans(const uint8_t* base, const proto::ObjectLocation& loc,
              absl::Span<const uint8_t>* data, absl::Span<const uint8_t>* metadata) {
  *data = absl::Span<const uint8_t>(base + loc.offset() + loc.data_offset(), loc.data_size());
  *metadata = absl::Span<const uint8_t>(base + loc.offset(), loc.metadata_size());
}

}  // namespace

ObjectRef& ObjectRef::operator=(ObjectRef&& other) noexcept {
  if (this != &other) {
    Reset();
    conn_ = std::move(other.conn_);
    id_ = std::move(other.id_);
    data_ = other.data_;
    metadata_ = other.metadata_;
    mutable_ = other.mutable_;
    other.conn_.reset();
    other.data_ = {};
    other.metadata_ = {};
  }
  return *this;
}

void ObjectRef::Reset() {
  if (conn_ == nullptr) return;
  conn_->ReleaseAsync(id_);
  conn_.reset();
  data_ = {};
  metadata_ = {};
  mutable_ = false;
}

struct Client::Link {
  explicit Link(std::shared_ptr<internal::Connection> c)
      : conn(std::move(c)), leased(std::make_unique<internal::LeasedPuts>(conn.get())) {}
  std::shared_ptr<internal::Connection> conn;
  std::unique_ptr<internal::LeasedPuts> leased;  // borrows *conn
};

namespace {

// How many broken links a client keeps mapped (see Client::retired_).
constexpr size_t kMaxRetired = 4;
// The back-off between tries to connect to a store that went away.
constexpr absl::Duration kFirstReconnectPause = absl::Milliseconds(5);
constexpr absl::Duration kMaxReconnectPause = absl::Milliseconds(100);

internal::ConnectionTimeouts TimeoutsOf(const ClientOptions& o) {
  // A call's reply deadline is at most the grace away when it sends, and a call with
  // under kMinReplyWait left is refused before it is sent: a grace of kMinReplyWait or
  // less would refuse every call with no wait of its own.
  return internal::ConnectionTimeouts{.reply_grace = std::max(o.reply_grace,
                                                              2 * internal::kMinReplyWait),
                                      .call_timeout = o.call_timeout};
}

// A Get's times: until when the store is asked to wait, and the call's deadline.
struct GetTimes {
  absl::Time wait_until;
  absl::Time deadline;
};
GetTimes GetTimesFor(absl::Duration timeout, absl::Duration grace) {
  if (timeout == absl::InfiniteDuration()) {
    return {absl::InfiniteFuture(), absl::InfiniteFuture()};
  }
  const absl::Time until = absl::Now() + std::max(timeout, absl::ZeroDuration());
  return {until, until + grace};
}
// The timeout left to ask the store for (the caller may have waited for the connection).
absl::Duration LeftUntil(absl::Time until) {
  if (until == absl::InfiniteFuture()) return absl::InfiniteDuration();
  return std::max(until - absl::Now(), absl::ZeroDuration());
}

// True if the two descriptors map the same shared-memory file (the same store).
bool SameArena(int a, int b) {
  struct stat sa, sb;
  if (fstat(a, &sa) != 0 || fstat(b, &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

const absl::Status& StatusOf(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& s) {
  return s.status();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const std::string& socket_path,
                                                        ClientOptions options) {
  return Connect(socket_path, options, options.call_timeout);
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const std::string& socket_path,
                                                        ClientOptions options,
                                                        absl::Duration connect_timeout) {
  DROVER_ASSIGN_OR_RETURN(
      std::shared_ptr<internal::Connection> conn,
      internal::Connection::Open(socket_path,
                                 absl::Now() + std::min(connect_timeout, options.call_timeout),
                                 TimeoutsOf(options)));
  return std::unique_ptr<Client>(new Client(socket_path, options, std::move(conn)));
}

Client::Client(std::string socket_path, ClientOptions options,
               std::shared_ptr<internal::Connection> conn)
    : socket_path_(std::move(socket_path)),
      options_(options),
      link_(std::make_shared<Link>(std::move(conn))) {}

Client::~Client() = default;

const uint8_t* Client::arena_base() const {
  absl::MutexLock l(&link_mu_);
  return link_->conn->base();
}
uint64_t Client::arena_capacity() const {
  absl::MutexLock l(&link_mu_);
  return link_->conn->capacity();
}
int Client::arena_fd() const {
  absl::MutexLock l(&link_mu_);
  return link_->conn->arena_fd();
}
uint64_t Client::client_id() const {
  absl::MutexLock l(&link_mu_);
  return link_->conn->client_id();
}
uint64_t Client::reconnects() const {
  absl::MutexLock l(&link_mu_);
  return reconnects_;
}
absl::Time Client::store_lost_at() const {
  absl::MutexLock l(&link_mu_);
  return lost_at_;
}

absl::Time Client::CallDeadline() const { return absl::Now() + options_.call_timeout; }

namespace {
bool Idle(bool* reconnecting) { return !*reconnecting; }
}  // namespace

absl::StatusOr<std::shared_ptr<Client::Link>> Client::Current(absl::Time deadline) {
  absl::MutexLock l(&link_mu_);
  if (!link_->conn->broken()) return link_;
  // Another thread connecting again: wait for its outcome rather than race it.
  if (!link_mu_.AwaitWithDeadline(absl::Condition(&Idle, &reconnecting_), deadline)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "the object store at ", socket_path_, " is away since ",
        absl::FormatTime(away_since_),
        " and another call's connect to it had not ended by this call's deadline"));
  }
  if (!link_->conn->broken()) return link_;
  const absl::Time now = absl::Now();
  if (away_since_ == absl::InfiniteFuture()) {
    away_since_ = now;
    DROVER_LOG(WARNING) << "the object store at " << socket_path_ << " went away ("
                        << link_->conn->broken_status().message()
                        << "); connecting again as soon as it is back";
  }
  const absl::Time give_up =
      std::min(deadline, std::max(now, away_since_ + options_.reconnect_wait));
  reconnecting_ = true;
  // Connect without link_mu_: a stopped store accepts connections (its listen queue)
  // but sends no hello, and every caller's wait must stay within its own deadline.
  link_mu_.Unlock();
  absl::StatusOr<std::shared_ptr<internal::Connection>> conn;
  for (absl::Duration pause = kFirstReconnectPause;;
       pause = std::min(pause * 2, kMaxReconnectPause)) {
    conn = internal::Connection::Open(socket_path_, deadline, TimeoutsOf(options_));
    if (conn.ok()) break;
    const absl::Time t = absl::Now();
    if (t >= give_up) break;
    absl::SleepFor(std::min(pause, give_up - t));
  }
  link_mu_.Lock();
  reconnecting_ = false;
  if (conn.ok()) {
    // A store that was only stopped or slow (a call timed out) keeps its arena and its
    // objects; one that died and was started again has a new arena.
    const bool restarted = !SameArena(link_->conn->arena_fd(), (*conn)->arena_fd());
    retired_.push_back(std::move(link_));
    if (retired_.size() > kMaxRetired) retired_.erase(retired_.begin());
    link_ = std::make_shared<Link>(*std::move(conn));
    ++reconnects_;
    if (restarted) lost_at_ = away_since_;
    DROVER_LOG(WARNING) << "connected again to the object store at " << socket_path_ << " ("
                        << absl::FormatDuration(absl::Now() - away_since_)
                        << " after it went away); "
                        << (restarted ? "it restarted: the objects it held before are lost"
                                      : "the same store (its arena and objects are kept)");
    away_since_ = absl::InfiniteFuture();
    return link_;
  }
  const std::string why = absl::StrCat(
      "the object store at ", socket_path_, " is away since ", absl::FormatTime(away_since_),
      " (", absl::FormatDuration(absl::Now() - away_since_),
      "; its node agent restarts a store that died): ", conn.status().message());
  if (absl::Now() >= deadline && deadline < away_since_ + options_.reconnect_wait) {
    return absl::DeadlineExceededError(
        absl::StrCat(why, "; not back by this call's deadline"));
  }
  return absl::UnavailableError(absl::StrCat(why, "; retry later"));
}

template <typename F>
auto Client::Run(absl::Time deadline, F&& f) -> decltype(f(std::declval<Link&>())) {
  absl::StatusOr<std::shared_ptr<Link>> link = Current(deadline);
  if (!link.ok()) return link.status();
  auto r = f(**link);
  if (StatusOf(r).ok() || !(*link)->conn->broken()) return r;
  // A call that timed out is not made again: its deadline is spent.
  if (StatusOf(r).code() == absl::StatusCode::kDeadlineExceeded || absl::Now() >= deadline) {
    return r;
  }
  link = Current(deadline);
  if (!link.ok()) return link.status();
  return f(**link);
}

absl::StatusOr<MutableObject> Client::Create(const ObjectId& id, uint64_t data_size,
                                             absl::string_view metadata, bool secondary,
                                             bool mutable_object) {
  const absl::Time deadline = CallDeadline();
  return Run(deadline, [&](Link& link) {
    return CreateOn(link, id, data_size, metadata, secondary, mutable_object, deadline);
  });
}

absl::StatusOr<MutableObject> Client::CreateOn(Link& link, const ObjectId& id,
                                               uint64_t data_size, absl::string_view metadata,
                                               bool secondary, bool mutable_object,
                                               absl::Time deadline) {
  internal::Connection& c = *link.conn;
  internal::ConnectionLock lock(c, deadline);
  DROVER_RETURN_IF_ERROR(lock.status());
  auto* r = c.NewRequestLocked().mutable_create();
  r->set_id(id);
  r->set_data_size(data_size);
  r->set_metadata(metadata.data(), metadata.size());
  r->set_secondary(secondary);
  r->set_mutable_object(mutable_object);
  DROVER_ASSIGN_OR_RETURN(const proto::StoreReply* reply,
                          CallChecked(c, absl::InfinitePast(), deadline));
  const proto::ObjectLocation& loc = reply->create().location();
  DROVER_RETURN_IF_ERROR(CheckLocation(loc, c.capacity()));
  MutableObject out;
  out.id = id;
  out.data = absl::Span<uint8_t>(c.mutable_base() + loc.offset() + loc.data_offset(),
                                 loc.data_size());
  out.metadata = absl::Span<const uint8_t>(c.base() + loc.offset(), loc.metadata_size());
  out.mutable_object = loc.mutable_object();
  return out;
}

absl::Status Client::LostBeforeSeal(Link& link, const ObjectId& id, absl::Status s) {
  if (s.code() == absl::StatusCode::kNotFound && reconnects() > 0) {
    // Most likely created on the connection before the last reconnect.
    return absl::NotFoundError(absl::StrCat(
        s.message(), " (this client connected again to a restarted object store: an object "
        "created before the restart was lost with the old store; create it again)"));
  }
  if (s.ok() || !link.conn->broken()) return s;
  return absl::UnavailableError(absl::StrCat(
      "object ", id, " was being written when the connection to the object store broke (",
      s.message(), "): it is lost with that store; put it again (the next call connects "
      "to the store again)"));
}

absl::Status Client::Seal(const ObjectId& id) {
  const absl::Time deadline = CallDeadline();
  absl::StatusOr<std::shared_ptr<Link>> link = Current(deadline);
  if (!link.ok()) return link.status();
  return SealOn(**link, id, deadline);
}

absl::Status Client::SealOn(Link& link, const ObjectId& id, absl::Time deadline) {
  internal::Connection& c = *link.conn;
  absl::Status s;
  {
    internal::ConnectionLock lock(c, deadline);
    DROVER_RETURN_IF_ERROR(lock.status());
    c.NewRequestLocked().mutable_seal()->set_id(id);
    s = CallChecked(c, absl::InfinitePast(), deadline).status();
    if (s.ok()) {
      // Drop the creator's reference.
      c.NewRequestLocked().mutable_release()->set_id(id);
      c.SendAsyncLocked();
    }
  }
  return LostBeforeSeal(link, id, s);
}

absl::StatusOr<ObjectRef> Client::SealKeepingReference(const MutableObject& object) {
  const absl::Time deadline = CallDeadline();
  absl::StatusOr<std::shared_ptr<Link>> link = Current(deadline);
  if (!link.ok()) return link.status();
  internal::Connection& c = *(*link)->conn;
  absl::Status s;
  {
    internal::ConnectionLock lock(c, deadline);
    DROVER_RETURN_IF_ERROR(lock.status());
    c.NewRequestLocked().mutable_seal()->set_id(object.id);
    s = CallChecked(c, absl::InfinitePast(), deadline).status();
  }
  if (!s.ok()) return LostBeforeSeal(**link, object.id, s);
  // The creator's reference (taken by Create) is the ref's from here on.
  ObjectRef ref;
  ref.conn_ = (*link)->conn;
  ref.id_ = object.id;
  ref.data_ = object.data;
  ref.metadata_ = object.metadata;
  ref.mutable_ = object.mutable_object;
  return ref;
}

absl::Status Client::Abort(const ObjectId& id) {
  const absl::Time deadline = CallDeadline();
  absl::StatusOr<std::shared_ptr<Link>> link = Current(deadline);
  if (!link.ok()) return link.status();
  return AbortOn(**link, id, deadline);
}

absl::Status Client::AbortOn(Link& link, const ObjectId& id, absl::Time deadline) {
  internal::Connection& c = *link.conn;
  absl::Status s;
  {
    internal::ConnectionLock lock(c, deadline);
    DROVER_RETURN_IF_ERROR(lock.status());
    c.NewRequestLocked().mutable_abort()->set_id(id);
    s = CallChecked(c, absl::InfinitePast(), deadline).status();
  }
  return LostBeforeSeal(link, id, s);
}

namespace {

// Fills `r` as an inline put: the bytes ride along in the request.
void FillInlinePut(const ObjectId& id, absl::Span<const uint8_t> data,
                   absl::string_view metadata, proto::CreateRequest* r) {
  r->set_id(id);
  r->set_data_size(data.size());
  r->set_metadata(metadata.data(), metadata.size());
  r->set_inline_put(true);
  r->set_data(data.data(), data.size());
}

}  // namespace

absl::Status Client::Put(const ObjectId& id, absl::Span<const uint8_t> data,
                         absl::string_view metadata) {
  const absl::Time deadline = CallDeadline();
  return Run(deadline, [&](Link& link) -> absl::Status {
    if (data.size() <= kMaxInlinePut) {
      // Small: the bytes ride along in the request; one round trip in all.
      internal::Connection& c = *link.conn;
      internal::ConnectionLock lock(c, deadline);
      DROVER_RETURN_IF_ERROR(lock.status());
      FillInlinePut(id, data, metadata, c.NewRequestLocked().mutable_create());
      return CallChecked(c, absl::InfinitePast(), deadline).status();
    }
    // Medium: written into this client's lease and sealed in one round trip.
    if (std::optional<absl::Status> leased =
            link.leased->TryPut(id, data, metadata, deadline)) {
      return *leased;
    }
    // Large (or no lease to be had): Create, copy, Seal, all on this link (the span
    // is in its mapping).
    DROVER_ASSIGN_OR_RETURN(MutableObject obj,
                            CreateOn(link, id, data.size(), metadata, false, false, deadline));
    // Beyond the caches one thread's copy is bounded by the cache lines it keeps in
    // flight: several copy faster (parallel_copy.h).
    if (!data.empty()) ParallelCopy(obj.data.data(), data.data(), data.size());
    // The copy of a large object may take much of the call's time on its own: the
    // seal gets a deadline of its own, or the object would stay created and unsealed.
    const absl::Time seal_deadline = std::max(deadline, CallDeadline());
    absl::Status s = SealOn(link, id, seal_deadline);
    if (!s.ok() && !link.conn->broken()) (void)AbortOn(link, id, seal_deadline);
    return s;
  });
}

absl::Status Client::PutMany(const std::vector<ObjectId>& ids,
                             const std::vector<absl::Span<const uint8_t>>& data,
                             absl::string_view metadata) {
  if (ids.size() != data.size()) {
    return absl::InvalidArgumentError(absl::StrCat("PutMany: ", ids.size(), " ids but ",
                                                   data.size(), " data spans"));
  }
  int failed = 0;
  absl::Status first_error;
  auto note = [&](const ObjectId& id, absl::Status s) {
    if (s.ok()) return;
    if (failed++ == 0) {
      first_error = absl::Status(s.code(), absl::StrCat("put of ", id, ": ", s.message()));
    }
  };
  // Large objects go one by one (their bytes are copied into the arena, not sent).
  std::vector<size_t> small;
  small.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (data[i].size() <= kMaxInlinePut) {
      small.push_back(i);
    } else {
      note(ids[i], Put(ids[i], data[i], metadata));
    }
  }
  for (size_t start = 0; start < small.size(); start += kMaxBatch) {
    size_t end = std::min(small.size(), start + kMaxBatch);
    // The replies of a batch that broke are not counted: the batch is sent again whole.
    std::vector<absl::Status> replies;
    const absl::Time deadline = CallDeadline();
    DROVER_RETURN_IF_ERROR(Run(deadline, [&](Link& link) -> absl::Status {
      replies.assign(end - start, absl::OkStatus());
      internal::Connection& c = *link.conn;
      internal::ConnectionLock lock(c, deadline);
      DROVER_RETURN_IF_ERROR(lock.status());
      c.BeginBatchLocked();
      for (size_t k = start; k < end; ++k) {
        size_t i = small[k];
        FillInlinePut(ids[i], data[i], metadata, c.NewRequestLocked().mutable_create());
        DROVER_RETURN_IF_ERROR(c.AppendLocked());
      }
      return c.FinishBatchLocked(c.ReplyDeadline(absl::InfinitePast(), deadline),
                                 [&](int j, const proto::StoreReply& reply) {
                                   replies[j] = ReplyStatus(reply);
                                 });
    }));
    for (size_t k = start; k < end; ++k) note(ids[small[k]], replies[k - start]);
  }
  if (failed == 0) return absl::OkStatus();
  if (failed == 1) return first_error;
  return absl::Status(first_error.code(), absl::StrCat(failed, " of ", ids.size(),
                                                       " puts failed; the first: ",
                                                       first_error.message()));
}

void Client::Release(std::vector<ObjectRef>* refs) {
  std::shared_ptr<internal::Connection> current;
  {
    absl::MutexLock l(&link_mu_);
    current = link_->conn;
  }
  std::vector<ObjectId> ids;
  ids.reserve(refs->size());
  for (ObjectRef& ref : *refs) {
    if (ref.conn_ == nullptr) continue;
    if (ref.conn_ != current) {  // another client's (or connection's) ref: released through its own
      ref.Reset();
      continue;
    }
    ids.push_back(std::move(ref.id_));
    ref.conn_.reset();
    ref.data_ = {};
    ref.metadata_ = {};
  }
  // Never waits: sent now, or by the call holding the connection as it lets go.
  current->ReleaseAsync(ids);
  refs->clear();
}

absl::StatusOr<ObjectRef> Client::Get(const ObjectId& id, absl::Duration timeout) {
  const GetTimes t = GetTimesFor(timeout, options_.reply_grace);
  return Run(t.deadline, [&](Link& link) -> absl::StatusOr<ObjectRef> {
    ObjectRef ref;
    absl::Status status;
    {
      internal::Connection& c = *link.conn;
      internal::ConnectionLock lock(c, t.deadline);
      DROVER_RETURN_IF_ERROR(lock.status());
      auto* r = c.NewRequestLocked().mutable_get();
      r->add_ids(id);
      r->set_timeout_ms(TimeoutMs(LeftUntil(t.wait_until)));
      DROVER_ASSIGN_OR_RETURN(const proto::StoreReply* reply,
                              CallChecked(c, t.wait_until, t.deadline));
      if (reply->get().results_size() != 1) {
        return absl::InternalError("the object store answered a Get of 1 id with another count");
      }
      const proto::GetResult& g = reply->get().results(0);
      if (!g.found()) return MissingStatus(g);
      // The reference was taken: from here on the ref owns it (and releases on error).
      ref.conn_ = link.conn;
      ref.id_ = id;
      status = CheckLocation(g.location(), c.capacity());
      if (status.ok()) SetSpans(c.base(), g.location(), &ref.data_, &ref.metadata_);
      ref.mutable_ = g.location().mutable_object();
    }
    if (!status.ok()) return status;  // ~ObjectRef releases, outside the lock
    return ref;
  });
}

absl::StatusOr<std::vector<ObjectRef>> Client::Get(const std::vector<ObjectId>& ids,
                                                   absl::Duration timeout) {
  const GetTimes t = GetTimesFor(timeout, options_.reply_grace);
  return Run(t.deadline, [&](Link& link) -> absl::StatusOr<std::vector<ObjectRef>> {
    std::vector<ObjectRef> refs;
    refs.reserve(ids.size());
    std::vector<std::string> missing;
    absl::Status status;
    {
      internal::Connection& c = *link.conn;
      internal::ConnectionLock lock(c, t.deadline);
      DROVER_RETURN_IF_ERROR(lock.status());
      auto* r = c.NewRequestLocked().mutable_get();
      for (const ObjectId& id : ids) r->add_ids(id);
      r->set_timeout_ms(TimeoutMs(LeftUntil(t.wait_until)));
      DROVER_ASSIGN_OR_RETURN(const proto::StoreReply* reply,
                              CallChecked(c, t.wait_until, t.deadline));
      const proto::GetReply& g = reply->get();
      if (g.results_size() != static_cast<int>(ids.size())) {
        return absl::InternalError("the object store answered a Get with the wrong count");
      }
      absl::StatusCode first_code = absl::StatusCode::kOk;
      for (int i = 0; i < g.results_size(); ++i) {
        const proto::GetResult& res = g.results(i);
        if (!res.found()) {
          if (first_code == absl::StatusCode::kOk) first_code = MissingStatus(res).code();
          if (missing.size() < 8) missing.push_back(res.message());
          continue;
        }
        ObjectRef ref;
        ref.conn_ = link.conn;
        ref.id_ = ids[i];
        absl::Status s = CheckLocation(res.location(), c.capacity());
        ref.mutable_ = res.location().mutable_object();
        if (s.ok()) {
          SetSpans(c.base(), res.location(), &ref.data_, &ref.metadata_);
        } else if (status.ok()) {
          status = s;
        }
        refs.push_back(std::move(ref));
      }
      if (status.ok() && first_code != absl::StatusCode::kOk) {
        size_t n_missing = ids.size() - refs.size();
        status = absl::Status(first_code,
                              absl::StrCat(n_missing, " of ", ids.size(), " objects missing: ",
                                           absl::StrJoin(missing, "; "),
                                           n_missing > missing.size() ? "; ..." : ""));
      }
    }
    if (!status.ok()) return status;  // refs are released outside the lock
    return refs;
  });
}

absl::Status Client::Wait(const std::vector<ObjectId>& ids, absl::Duration timeout) {
  return Get(ids, timeout).status();
}

absl::Status Client::Delete(const ObjectId& id) {
  const absl::Time deadline = CallDeadline();
  return Run(deadline, [&](Link& link) -> absl::Status {
    internal::Connection& c = *link.conn;
    internal::ConnectionLock lock(c, deadline);
    DROVER_RETURN_IF_ERROR(lock.status());
    c.NewRequestLocked().mutable_delete_()->set_id(id);
    return CallChecked(c, absl::InfinitePast(), deadline).status();
  });
}

absl::StatusOr<bool> Client::Contains(const ObjectId& id) {
  const absl::Time deadline = CallDeadline();
  return Run(deadline, [&](Link& link) -> absl::StatusOr<bool> {
    internal::Connection& c = *link.conn;
    internal::ConnectionLock lock(c, deadline);
    DROVER_RETURN_IF_ERROR(lock.status());
    c.NewRequestLocked().mutable_contains()->set_id(id);
    DROVER_ASSIGN_OR_RETURN(const proto::StoreReply* reply, CallChecked(c, absl::InfinitePast(), deadline));
    return reply->contains().contains();
  });
}

absl::StatusOr<StoreStats> Client::Stats() { return Stats(options_.call_timeout); }

absl::StatusOr<StoreStats> Client::Stats(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + std::min(timeout, options_.call_timeout);
  return Run(deadline, [&](Link& link) -> absl::StatusOr<StoreStats> {
    internal::Connection& c = *link.conn;
    internal::ConnectionLock lock(c, deadline);
    DROVER_RETURN_IF_ERROR(lock.status());
    c.NewRequestLocked().mutable_stats();
    DROVER_ASSIGN_OR_RETURN(const proto::StoreReply* reply, CallChecked(c, absl::InfinitePast(), deadline));
    const proto::StoreStats& p = reply->stats();
    StoreStats out;
    out.capacity = p.capacity();
    out.used = p.used();
    out.largest_free = p.largest_free();
    out.objects = p.objects();
    out.sealed = p.sealed();
    out.referenced = p.referenced();
    out.spilled_objects = p.spilled_objects();
    out.spilled_bytes = p.spilled_bytes();
    out.evictions = p.evictions();
    out.spills = p.spills();
    out.restores = p.restores();
    out.clients = p.clients();
    out.pending_gets = p.pending_gets();
    out.leased_bytes = p.leased_bytes();
    out.leases = p.leases();
    return out;
  });
}

ObjectId Client::RandomId() {
  unsigned char bytes[20];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  static const char kHex[] = "0123456789abcdef";
  ObjectId id(40, '0');
  for (int i = 0; i < 20; ++i) {
    id[2 * i] = kHex[bytes[i] >> 4];
    id[2 * i + 1] = kHex[bytes[i] & 0xf];
  }
  return id;
}

}  // namespace drover::object_store
