#include "common/status_macros.h"
#include "object_store/internal/leased_put.h"

#include <sched.h>

#include <algorithm>
#include <cstring>

#include "absl/time/clock.h"
#include "common/log.h"
#include "object_store/protocol.h"
#include "object_store/wire_status.h"

namespace drover::object_store::internal {
namespace {

// After the store refused a lease (no free space, or its limits), puts go by Create +
// Seal for this long before asking again.
constexpr absl::Duration kLeaseRetry = absl::Milliseconds(100);

// Overlapped seals (SealLeasedRequest.ready_value) for leased puts of at least this
// much data, sending the seal when this much of the copy (at most a quarter) is left:
// about the store's wake-up and parse time (~15 µs of copying).
constexpr uint64_t kMinOverlappedPut = 256u << 10;
constexpr uint64_t kOverlappedTail = 256u << 10;

inline void SpinPause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

LeasedPuts::LeasedPuts(Connection* conn)
    : conn_(conn),
      max_leased_block_(std::min<uint64_t>(
          kMaxLeasedBlock, conn->capacity() / 64 / kAlignment * kAlignment)) {}

std::optional<absl::Status> LeasedPuts::TryPut(const ObjectId& id,
                                               absl::Span<const uint8_t> data,
                                               absl::string_view metadata,
                                               absl::Time deadline) {
  const uint64_t data_offset = metadata.empty() ? 0 : AlignUp(metadata.size());
  const uint64_t block = AlignUp(data_offset + data.size());
  if (block > max_leased_block_ || id.empty()) return std::nullopt;
  Connection& c = *conn_;
  uint64_t offset;
  uint64_t next;  // what the next put probably needs
  size_t tail;    // bytes copied after the seal went out (overlapped seal), or 0
  {
    ConnectionLock lock(c, deadline);
    DROVER_RETURN_IF_ERROR(lock.status());
    recent_blocks_[recent_next_++ % kLeaseHistory] = block;
    next = *std::max_element(recent_blocks_, recent_blocks_ + kLeaseHistory);
    DROVER_RETURN_IF_ERROR(TakeRefillLocked(c.ReplyDeadline(absl::InfinitePast(), deadline)));
    if (lease_end_ - lease_cursor_ < block) {
      if (!LeaseWantedLocked()) return std::nullopt;
      const Lease kept = KeptLeaseLocked();
      c.BeginBatchLocked();
      if (!AppendRefillLocked(next).ok()) {
        KeepLeaseUnlessSentLocked(kept);
        return std::nullopt;
      }
      if (absl::Status s = c.FinishBatchLocked(
              c.ReplyDeadline(absl::InfinitePast(), deadline),
              [&](int i, const proto::StoreReply& r) { OnRefillReplyLocked(i, r); });
          !s.ok()) {
        KeepLeaseUnlessSentLocked(kept);
        return s;
      }
      if (lease_end_ - lease_cursor_ < block) return std::nullopt;
    }
    offset = lease_cursor_;
    lease_cursor_ += block;
    if (data.size() >= kMinOverlappedPut && !ready_slot_tried_) GetReadySlotLocked(deadline);
    tail = ready_slot_ != 0 && data.size() >= kMinOverlappedPut
               ? std::min<size_t>(kOverlappedTail, data.size() / 4)
               : 0;
  }
  // The block is this put's alone now: written without the lock, but for the last
  // `tail` bytes, copied while the seal travels.
  uint8_t* p = c.mutable_base() + offset;
  if (!metadata.empty()) memcpy(p, metadata.data(), metadata.size());
  if (!data.empty()) memcpy(p + data_offset, data.data(), data.size() - tail);

  ConnectionLock lock(c, deadline);
  // The block stays unused in the lease if the connection does not come in time.
  DROVER_RETURN_IF_ERROR(lock.status());
  const uint64_t ready_value = tail > 0 ? ++ready_seq_ : 0;
  if (absl::Status s = AppendSealLocked(id, offset, data.size(), metadata.size(), ready_value);
      !s.ok()) {
    // Cannot encode (not for these sizes); the block stays unused in the lease.
    return s;
  }
  const uint64_t seal_rid = c.batch_first();
  // A refill goes in the same write, after the seal: the store answers the seal first
  // and at once; the lease's answers are set aside for the next put (not while an
  // earlier refill's are, so that every grant is taken up and every rest returned).
  const Lease kept = KeptLeaseLocked();
  const bool refill = !refill_in_flight_ && lease_end_ - lease_cursor_ < next &&
                      LeaseWantedLocked() && AppendRefillLocked(next).ok();
  const absl::Time reply_deadline = c.ReplyDeadline(absl::InfinitePast(), deadline);
  if (absl::Status s = c.SendBatchLocked(reply_deadline); !s.ok()) {
    KeepLeaseUnlessSentLocked(kept);
    return s;
  }
  if (refill) {
    c.SetAsideLocked(seal_rid + 1, c.batch_size() - 1);
    refill_in_flight_ = true;
  }
  if (tail > 0) {
    memcpy(p + data_offset + data.size() - tail, data.data() + data.size() - tail, tail);
    reinterpret_cast<std::atomic<uint64_t>*>(c.mutable_base() + ready_slot_)
        ->store(ready_value, std::memory_order_release);
    if (AwaitSealAckLocked(ready_value)) {
      // Sealed: the store said so in shared memory. Its reply is read with a later
      // call's, like an asynchronous request's.
      c.ExpectAsyncReplyLocked();
      return absl::OkStatus();
    }
  }
  uint64_t want = seal_rid;
  while (true) {
    DROVER_ASSIGN_OR_RETURN(const proto::StoreReply* reply,
                            c.AwaitReplyLocked(want, reply_deadline, "leased put's seal"));
    const absl::StatusCode code = ReplyCode(*reply);
    if (want == seal_rid && tail > 0 && code == absl::StatusCode::kUnavailable) {
      // The store gave up waiting for the ready word (this thread was descheduled
      // for over a millisecond): the object is complete now; seal it plainly.
      if (absl::Status s = AppendSealLocked(id, offset, data.size(), metadata.size(), 0);
          !s.ok()) {
        return s;
      }
      want = c.batch_first();
      DROVER_RETURN_IF_ERROR(c.SendBatchLocked(reply_deadline));
      continue;
    }
    if (want == seal_rid && tail > 0 && code == absl::StatusCode::kOk &&
        SealAck()->load(std::memory_order_acquire) != ready_value) {
      // Sealed, yet nothing in the ack word: a store from before acknowledgements.
      seal_acks_ = false;
    }
    return ReplyStatus(*reply);
  }
}

absl::Status LeasedPuts::AppendSealLocked(const ObjectId& id, uint64_t offset,
                                          uint64_t data_size, uint64_t metadata_size,
                                          uint64_t ready_value) {
  Connection& c = *conn_;
  c.BeginBatchLocked();
  proto::SealLeasedRequest* r = c.NewRequestLocked().mutable_seal_leased();
  r->set_id(id);
  r->set_offset(offset);
  r->set_data_size(data_size);
  r->set_metadata_size(metadata_size);
  if (ready_value != 0) {
    r->set_ready_offset(ready_slot_);
    r->set_ready_value(ready_value);
  }
  return c.AppendLocked();
}

absl::Status LeasedPuts::TakeRefillLocked(absl::Time deadline) {
  if (!refill_in_flight_) return absl::OkStatus();
  DROVER_ASSIGN_OR_RETURN(const absl::Span<const proto::StoreReply> replies,
                          conn_->TakeSetAsideLocked(deadline));
  refill_in_flight_ = false;
  for (size_t i = 0; i < replies.size(); ++i) {
    OnRefillReplyLocked(static_cast<int>(i), replies[i]);
  }
  return absl::OkStatus();
}

const std::atomic<uint64_t>* LeasedPuts::SealAck() const {
  return reinterpret_cast<const std::atomic<uint64_t>*>(conn_->base() + ready_slot_ + 8);
}

bool LeasedPuts::AwaitSealAckLocked(uint64_t ready_value) {
  if (!seal_acks_) return false;
  const std::atomic<uint64_t>* ack = SealAck();
  absl::Time until = absl::InfinitePast();
  for (uint32_t i = 1;; ++i) {
    const uint64_t a = ack->load(std::memory_order_acquire);
    if (a == ready_value) return true;
    if (a == (ready_value | kSealAckFailed)) return false;
    if (i % 64 == 0) {
      const absl::Time now = absl::Now();
      if (until == absl::InfinitePast()) until = now + kSpin;
      if (now >= until) return false;
      // The store may be waiting for this CPU (it polls on another one if it can).
      sched_yield();
    }
    SpinPause();
  }
}

LeasedPuts::Lease LeasedPuts::KeptLeaseLocked() const { return {lease_cursor_, lease_end_}; }

void LeasedPuts::KeepLeaseUnlessSentLocked(const Lease& kept) {
  // A send that failed without breaking the connection sent nothing (no time left to
  // send): the lease's rest was neither returned nor replaced, and stays this
  // client's to use. One that broke it ends the lease with the connection.
  if (conn_->broken()) return;
  lease_cursor_ = kept.cursor;
  lease_end_ = kept.end;
}

void LeasedPuts::GetReadySlotLocked(absl::Time deadline) {
  Connection& c = *conn_;
  c.BeginBatchLocked();
  c.NewRequestLocked().mutable_lease()->set_bytes(kAlignment);
  if (!c.AppendLocked().ok()) {
    ready_slot_tried_ = true;  // cannot encode: never will
    return;
  }
  const absl::Status asked = c.FinishBatchLocked(c.ReplyDeadline(absl::InfinitePast(), deadline), [&](int, const proto::StoreReply& r) {
    if (ReplyCode(r) == absl::StatusCode::kOk && r.has_lease() &&
        r.lease().size() >= kAlignment && r.lease().offset() % kAlignment == 0 &&
        r.lease().offset() <= c.capacity() - kAlignment) {
      ready_slot_ = r.lease().offset();
    }
  });
  // Asked once per connection, once the request went out: a call with no time left to
  // send it (it failed without breaking the connection) leaves it to the next put.
  ready_slot_tried_ = asked.ok() || c.broken();
  if (ready_slot_ != 0) {
    // The range may hold an earlier client's ready and ack words: a stale value equal
    // to one of ours would seal an unfinished object, or acknowledge a seal not made.
    auto* words = reinterpret_cast<std::atomic<uint64_t>*>(c.mutable_base() + ready_slot_);
    words[0].store(0, std::memory_order_relaxed);
    words[1].store(0, std::memory_order_release);
  }
}

bool LeasedPuts::LeaseWantedLocked() {
  return max_leased_block_ > 0 && !lease_unsupported_ &&
         (lease_retry_after_ == absl::InfinitePast() || absl::Now() >= lease_retry_after_);
}

absl::Status LeasedPuts::AppendRefillLocked(uint64_t bytes) {
  Connection& c = *conn_;
  refill_returns_ = lease_end_ > lease_cursor_;
  if (refill_returns_) {
    proto::ReturnLeaseRequest* r = c.NewRequestLocked().mutable_return_lease();
    r->set_offset(lease_cursor_);
    r->set_size(lease_end_ - lease_cursor_);
    DROVER_RETURN_IF_ERROR(c.AppendLocked());
  }
  lease_cursor_ = lease_end_ = 0;
  c.NewRequestLocked().mutable_lease()->set_bytes(bytes);
  return c.AppendLocked();
}

void LeasedPuts::OnRefillReplyLocked(int i, const proto::StoreReply& r) {
  const absl::StatusCode code = ReplyCode(r);
  if (refill_returns_ && i == 0) {
    if (code != absl::StatusCode::kOk) {
      DROVER_LOG(WARNING) << "object store: returning the rest of a lease failed: "
                          << r.message();
    }
    return;
  }
  if (code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kUnimplemented) {
    // A store that does not know leases (an older one answers INVALID_ARGUMENT: a
    // StoreRequest with no operation it knows), or thinks this client misuses them.
    DROVER_LOG(INFO) << "object store: no leases (" << r.message()
                     << "); putting with Create + Seal";
    lease_unsupported_ = true;
    return;
  }
  if (code != absl::StatusCode::kOk) {
    lease_retry_after_ = absl::Now() + kLeaseRetry;
    return;
  }
  const uint64_t off = r.lease().offset(), size = r.lease().size();
  const uint64_t capacity = conn_->capacity();
  if (off % kAlignment != 0 || size % kAlignment != 0 || off > capacity ||
      size > capacity - off) {
    DROVER_LOG(ERROR) << "object store: a lease outside the arena (" << off << ", " << size
                      << "); putting with Create + Seal";
    lease_unsupported_ = true;
    return;
  }
  lease_cursor_ = off;
  lease_end_ = off + size;
}

}  // namespace drover::object_store::internal
