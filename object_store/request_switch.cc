#include "object_store/request_switch.h"

#include <sched.h>

#include <atomic>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "object_store/allocator.h"
#include "object_store/protocol.h"
#include "object_store/wire_status.h"

namespace drover::object_store {
namespace {

constexpr size_t kMaxPendingGetsPerClient = 1024;

absl::Status CheckId(const std::string& id) {
  if (id.empty() || id.size() > kMaxIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "object id must be 1..", kMaxIdBytes, " bytes, got ", id.size(), " bytes"));
  }
  return absl::OkStatus();
}

// A printable form of an id for messages (ids may be arbitrary bytes).
std::string Printable(const std::string& id) {
  std::string out;
  for (unsigned char c : id) {
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

// The id of a request about one object (checked before it is handled), else nullptr.
const std::string* SingleId(const proto::StoreRequest& r) {
  switch (r.op_case()) {
    case proto::StoreRequest::kSeal:
      return &r.seal().id();
    case proto::StoreRequest::kRelease:
      return &r.release().id();
    case proto::StoreRequest::kDelete:
      return &r.delete_().id();
    case proto::StoreRequest::kContains:
      return &r.contains().id();
    case proto::StoreRequest::kAbort:
      return &r.abort().id();
    default:
      return nullptr;
  }
}

void ToProto(const ObjectLocation& loc, proto::ObjectLocation* out) {
  out->set_offset(loc.offset);
  out->set_data_offset(loc.data_offset);
  out->set_data_size(loc.data_size);
  out->set_metadata_size(loc.metadata_size);
  out->set_mutable_object(loc.mutable_object);
}

// Says why a Get's result is missing: absent or unsealed (its code says which, from
// TryGet), and whether the Get's timeout passed.
void NotAvailable(proto::GetResult* result, bool timed_out) {
  const bool unsealed = ReplyCode(*result) == absl::StatusCode::kUnavailable;
  std::string what = absl::StrCat("object ", Printable(result->id()),
                                   unsealed ? " exists but is not sealed" : " is not in the store");
  if (timed_out) {
    SetReplyStatus(absl::DeadlineExceededError(absl::StrCat(what, " and the Get's timeout passed")),
                   result);
  } else {
    SetReplyStatus(unsealed ? absl::UnavailableError(what) : absl::NotFoundError(what), result);
  }
}

}  // namespace

RequestSwitch::RequestSwitch(Arena* arena, StoreReactor* reactor, const ServerOptions& options)
    : arena_(arena),
      reactor_(reactor),
      ready_wait_(options.ready_wait),
      table_(TableOptions{arena->capacity(), options.spill_dir, options.spill_capacity}, arena) {
  table_.set_on_sealed([this](const ObjectId& id) {
    sealed_.push_back(id);
    if (subscribers_.empty()) return;
    // A seal of an object deleted while unsealed frees it: nothing to announce.
    absl::StatusOr<ObjectInfo> info = table_.Info(id);
    if (info.ok()) Publish(proto::StoreEvent::SEALED, *info);
  });
  table_.set_on_evicted([this](const ObjectId& id) {
    if (!subscribers_.empty()) Publish(proto::StoreEvent::REMOVED, ObjectInfo{id, 0, 0, false});
  });
}

void RequestSwitch::HandleFrame(StoreConn& c, absl::string_view body) {
  reply_.Clear();
  if (!request_.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
    // The framing is intact, so the stream can go on; the request id is unknown.
    reply_.set_request_id(0);
    SetReplyStatus(absl::InvalidArgumentError(absl::StrCat(
                       "object store: a frame of ", body.size(),
                       " bytes does not parse as a StoreRequest")),
                   &reply_);
    reactor_->Send(c, reply_);
    return;
  }
  reply_.set_request_id(request_.request_id());
  reactor_->StayAwake();
  absl::Status s;
  if (const std::string* id = SingleId(request_)) {
    s = CheckId(*id);
    if (!s.ok()) {
      SetReplyStatus(s, &reply_);
      reactor_->Send(c, reply_);
      return;
    }
  }
  switch (request_.op_case()) {
    case proto::StoreRequest::kCreate:
      s = HandleCreate(c, request_.create());
      break;
    case proto::StoreRequest::kSeal:
      s = table_.Seal(c.id, request_.seal().id());
      break;
    case proto::StoreRequest::kGet:
      HandleGet(c);
      return;
    case proto::StoreRequest::kRelease:
      s = table_.Release(c.id, request_.release().id());
      break;
    case proto::StoreRequest::kDelete:
      s = HandleDelete(request_.delete_().id());
      break;
    case proto::StoreRequest::kContains:
      reply_.mutable_contains()->set_contains(table_.Contains(request_.contains().id()));
      break;
    case proto::StoreRequest::kStats:
      FillStats(reply_.mutable_stats());
      break;
    case proto::StoreRequest::kAbort:
      s = table_.Abort(c.id, request_.abort().id());
      break;
    case proto::StoreRequest::kSubscribe:
      HandleSubscribe(c);
      break;
    // Leased puts: the table checks every offset and size against this client's own
    // leases.
    case proto::StoreRequest::kLease: {
      absl::StatusOr<LeaseRange> lease = table_.Lease(c.id, request_.lease().bytes());
      if (lease.ok()) {
        reply_.mutable_lease()->set_offset(lease->offset);
        reply_.mutable_lease()->set_size(lease->size);
      }
      s = lease.status();
      break;
    }
    case proto::StoreRequest::kSealLeased:
      s = HandleSealLeased(c, request_.seal_leased());
      break;
    case proto::StoreRequest::kReturnLease:
      s = table_.ReturnLease(c.id, request_.return_lease().offset(),
                             request_.return_lease().size());
      break;
    default:
      s = absl::InvalidArgumentError(
          "object store: the request has no operation this store knows (missing, or from "
          "a newer protocol version)");
      break;
  }
  SetReplyStatus(s, &reply_);
  reactor_->Send(c, reply_);
}

absl::Status RequestSwitch::HandleCreate(StoreConn& c, const proto::CreateRequest& r) {
  DROVER_RETURN_IF_ERROR(CheckId(r.id()));
  const uint64_t capacity = arena_->capacity();
  if (r.data_size() > capacity || r.metadata().size() > capacity - r.data_size()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "object ", Printable(r.id()), ": asked for ", r.data_size(), " data bytes + ",
        r.metadata().size(), " metadata bytes, more than the whole store holds (", capacity,
        " bytes): start the node's agent with a larger --object-store-memory (--capacity "
        "of a drover-object-store started by hand), or put a smaller object"));
  }
  if (r.inline_put() ? (r.data().size() != r.data_size() || r.data_size() > kMaxInlinePut)
                     : !r.data().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "object ", Printable(r.id()), ": an inline put carries exactly data_size (",
        r.data_size(), ") bytes, at most ", kMaxInlinePut, "; got ", r.data().size(),
        " bytes", r.inline_put() ? "" : " without inline_put"));
  }
  DROVER_ASSIGN_OR_RETURN(const ObjectLocation loc,
                          table_.Create(c.id, r.id(), r.data_size(), r.metadata(),
                                        !r.secondary(), r.mutable_object()));
  if (r.inline_put()) DROVER_RETURN_IF_ERROR(FinishInlinePut(c.id, r.id(), loc, r.data()));
  ToProto(loc, reply_.mutable_create()->mutable_location());
  return absl::OkStatus();
}

absl::Status RequestSwitch::HandleDelete(const ObjectId& id) {
  absl::StatusOr<ObjectInfo> info = table_.Info(id);
  DROVER_RETURN_IF_ERROR(table_.Delete(id));
  if (info.ok() && !subscribers_.empty()) Publish(proto::StoreEvent::REMOVED, *info);
  return absl::OkStatus();
}

void RequestSwitch::HandleSubscribe(StoreConn& c) {
  // The snapshot goes out before the reply, so the reply marks its end.
  const uint64_t request_id = request_.request_id();
  if (request_.subscribe().snapshot()) {
    for (const ObjectInfo& info : table_.List()) {
      SendEvent(c, request_id, proto::StoreEvent::SEALED, info);
    }
  }
  subscribers_[c.id] = request_id;
}

absl::Status RequestSwitch::HandleSealLeased(StoreConn& c, const proto::SealLeasedRequest& r) {
  flush_now_ = true;
  // The ready slot is checked first: the outcome is acknowledged there too.
  const bool overlapped = r.ready_value() != 0;
  absl::Status s;
  if (overlapped) s = CheckReadySlot(c, r);
  const bool slot_ok = overlapped && s.ok();
  if (s.ok()) s = CheckId(r.id());
  if (slot_ok && s.ok()) s = AwaitReady(r);
  if (s.ok()) {
    s = table_.SealLeased(c.id, r.id(), r.offset(), r.data_size(), r.metadata_size()).status();
  }
  if (slot_ok) {
    // SealLeasedRequest.ready_offset: the outcome in the word after the ready word.
    reinterpret_cast<std::atomic<uint64_t>*>(arena_->base() + r.ready_offset() + 8)
        ->store(s.ok() ? r.ready_value() : r.ready_value() | kSealAckFailed,
                std::memory_order_release);
  }
  return s;
}

absl::Status RequestSwitch::CheckReadySlot(const StoreConn& c,
                                           const proto::SealLeasedRequest& r) {
  const uint64_t off = r.ready_offset();
  const uint64_t cap = arena_->capacity();
  if (off % kAlignment != 0 || off > cap - kAlignment ||
      !table_.HoldsLease(c.id, off, kAlignment)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "overlapped seal: the ready word at ", off,
        " is not in a 64-aligned 64-byte range this client leased"));
  }
  if (r.data_size() <= cap && r.metadata_size() <= cap) {
    const uint64_t data_offset =
        r.metadata_size() == 0 ? 0 : Allocator::RoundUp(r.metadata_size());
    const uint64_t end = r.offset() + Allocator::RoundUp(data_offset + r.data_size());
    if (off + kAlignment > r.offset() && off < end) {
      return absl::InvalidArgumentError(absl::StrCat(
          "overlapped seal: the ready word at ", off, " lies inside the object"));
    }
  }
  return absl::OkStatus();
}

// The client sends the seal while it copies the last part (~15 µs), so the wait is
// short; it spins, then yields the CPU (the writer may need it), and gives up after
// ready_wait (1 ms) with UNAVAILABLE (the client then seals again) so that no client
// can stall the store.
absl::Status RequestSwitch::AwaitReady(const proto::SealLeasedRequest& r) {
  if (ready_wait_ <= absl::ZeroDuration()) {
    return absl::UnavailableError(
        "overlapped seal: this store takes none (--ready-wait-us 0); seal it again");
  }
  const auto* word =
      reinterpret_cast<const std::atomic<uint64_t>*>(arena_->base() + r.ready_offset());
  const absl::Time start = absl::Now();
  for (uint64_t i = 0;; ++i) {
    if (word->load(std::memory_order_acquire) == r.ready_value()) return absl::OkStatus();
    if ((i & 63) != 0) continue;
    const absl::Duration waited = absl::Now() - start;
    if (waited > ready_wait_) {
      return absl::UnavailableError(
          absl::StrCat("overlapped seal: the object was not finished within ",
                       absl::FormatDuration(ready_wait_), "; seal it again"));
    }
    if (waited > absl::Microseconds(20)) sched_yield();
  }
}

void RequestSwitch::HandleGet(StoreConn& c) {
  const proto::GetRequest& r = request_.get();
  absl::Status bad;
  if (r.ids_size() > kMaxIdsPerGet) {
    bad = absl::InvalidArgumentError(absl::StrCat("object store: a Get of ", r.ids_size(),
                                                  " ids; at most ", kMaxIdsPerGet,
                                                  " per request (split it)"));
  }
  for (const std::string& id : r.ids()) {
    if (!bad.ok()) break;
    bad = CheckId(id);
  }
  if (bad.ok() && r.timeout_ms() != 0) {
    const size_t waiting = pending_.CountFor(c.id);
    if (waiting >= kMaxPendingGetsPerClient) {
      bad = absl::ResourceExhaustedError(
          absl::StrCat("object store: client ", c.id, " already has ", waiting,
                       " waiting Gets; wait for them before sending more"));
    }
  }
  if (!bad.ok()) {
    SetReplyStatus(bad, &reply_);
    reactor_->Send(c, reply_);
    return;
  }
  proto::GetReply* get = reply_.mutable_get();
  std::vector<char> waiting(r.ids_size(), 0);
  size_t remaining = 0;
  for (int i = 0; i < r.ids_size(); ++i) {
    proto::GetResult* result = get->add_results();
    result->set_id(r.ids(i));
    if (!TryGet(c.id, r.ids(i), result)) {
      waiting[i] = 1;
      ++remaining;
    }
  }
  if (remaining == 0 || r.timeout_ms() == 0) {
    for (int i = 0; i < r.ids_size(); ++i) {
      if (waiting[i]) NotAvailable(get->mutable_results(i), /*timed_out=*/false);
    }
    SetReplyStatus(absl::OkStatus(), &reply_);
    reactor_->Send(c, reply_);
    return;
  }
  // Park it until the missing objects are sealed or the deadline passes.
  const absl::Time deadline = r.timeout_ms() > 0
                                  ? absl::Now() + absl::Milliseconds(r.timeout_ms())
                                  : absl::InfiniteFuture();
  pending_.Park(c.id, &reply_, std::move(waiting), deadline);
}

bool RequestSwitch::TryGet(ClientId client, const std::string& id, proto::GetResult* result) {
  absl::StatusOr<ObjectLocation> loc = table_.Get(client, id);
  if (loc.ok()) {
    absl::StatusOr<std::string> meta = table_.Metadata(id);
    result->set_found(true);
    SetReplyStatus(absl::OkStatus(), result);
    ToProto(*loc, result->mutable_location());
    if (meta.ok()) result->set_metadata(std::move(*meta));
    return true;
  }
  SetReplyStatus(loc.status(), result);
  const absl::StatusCode code = loc.status().code();
  return code != absl::StatusCode::kNotFound && code != absl::StatusCode::kUnavailable;
}

void RequestSwitch::AnswerGet(ClientId client, proto::StoreReply* reply,
                              const std::vector<char>& waiting, bool timed_out) {
  auto* results = reply->mutable_get()->mutable_results();
  for (int i = 0; i < results->size(); ++i) {
    if (waiting[i]) NotAvailable(results->Mutable(i), timed_out);
  }
  StoreConn* c = reactor_->Find(client);
  if (c != nullptr) reactor_->Send(*c, *reply);  // Send skips a closing connection
}

void RequestSwitch::ProcessSealed() {
  while (!sealed_.empty()) {
    std::vector<ObjectId> ids;
    ids.swap(sealed_);
    for (const ObjectId& id : ids) {
      pending_.OnSealed(
          id,
          [this, &id](ClientId client, proto::GetResult* result) {
            return TryGet(client, id, result);
          },
          [this](ClientId client, proto::StoreReply* reply, const std::vector<char>& waiting,
                 bool timed_out) { AnswerGet(client, reply, waiting, timed_out); });
    }
  }
}

void RequestSwitch::ExpireGets(absl::Time now) {
  pending_.Expire(now, [this](ClientId client, proto::StoreReply* reply,
                              const std::vector<char>& waiting, bool timed_out) {
    AnswerGet(client, reply, waiting, timed_out);
  });
}

void RequestSwitch::OnDisconnected(ClientId client, const std::string& why) {
  pending_.DropClient(client);
  subscribers_.erase(client);
  std::vector<ObjectId> aborted = table_.DisconnectClient(client);
  if (!aborted.empty() || why != "disconnected") {
    DROVER_LOG(INFO) << "object store: client " << client << " closed (" << why << "); aborted "
                     << aborted.size() << " unsealed object(s)";
  }
}

void RequestSwitch::SendEvent(StoreConn& c, uint64_t request_id, proto::StoreEvent::Kind kind,
                              const ObjectInfo& info) {
  event_.Clear();
  event_.set_request_id(request_id);
  proto::StoreEvent* e = event_.mutable_event();
  e->set_kind(kind);
  e->set_id(info.id);
  e->set_data_size(info.data_size);
  e->set_primary(info.primary);
  reactor_->Send(c, event_);
}

void RequestSwitch::Publish(proto::StoreEvent::Kind kind, const ObjectInfo& info) {
  for (const auto& [client, request_id] : subscribers_) {
    if (StoreConn* c = reactor_->Find(client)) SendEvent(*c, request_id, kind, info);
  }
}

absl::Status RequestSwitch::FinishInlinePut(ClientId client, const ObjectId& id,
                                            const ObjectLocation& loc, const std::string& data) {
  if (!data.empty()) memcpy(arena_->At(loc.offset + loc.data_offset), data.data(), data.size());
  absl::Status s = table_.Seal(client, id);
  if (s.ok()) s = table_.Release(client, id);
  if (!s.ok()) (void)table_.Abort(client, id);
  return s;
}

void RequestSwitch::FillStats(proto::StoreStats* out) {
  TableStats t = table_.Stats();
  out->set_capacity(t.capacity);
  out->set_used(t.used);
  out->set_largest_free(t.largest_free);
  out->set_objects(t.objects);
  out->set_sealed(t.sealed);
  out->set_referenced(t.referenced);
  out->set_spilled_objects(t.spilled_objects);
  out->set_spilled_bytes(t.spilled_bytes);
  out->set_evictions(t.evictions);
  out->set_spills(t.spills);
  out->set_restores(t.restores);
  out->set_clients(reactor_->connections());
  out->set_pending_gets(pending_.size());
  out->set_leased_bytes(t.leased_bytes);
  out->set_leases(t.lease_pieces);
}

}  // namespace drover::object_store
