#include "object_store/client.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/log.h"
#include "object_store/arena.h"
#include "object_store/parallel_copy.h"
#include "object_store/protocol.h"
#include "proto/object_store.pb.h"

namespace drover::object_store {
namespace internal {
namespace {

// How long a request may take the store to answer (on top of a Get's own timeout)
// before the connection is given up as hung. Generous: a Get may restore a spilled
// object of gigabytes from disk.
constexpr absl::Duration kReplyGrace = absl::Seconds(120);
// Asynchronous requests (releases, acknowledged seals) outstanding before the client
// stops to read their answers; until then they are read with later calls' replies.
// Several batches (Client::kMaxBatch): at 256, a Release of 256 refs waited for its
// own answers, and batched 1 KiB put+get pairs ran ~1.5x slower.
constexpr int kMaxUnacked = 4096;
constexpr size_t kReadChunk = 64u << 10;
// How long a reader spins on a non-blocking recv before sleeping in poll.
constexpr absl::Duration kSpin = absl::Microseconds(50);

inline void SpinPause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

// Objects up to this size are put in one round trip with their bytes in the request
// (copying 64 KiB through the socket costs less than a second round trip).
constexpr uint64_t kMaxInlinePut = 64u << 10;
// Leased puts: the largest object (metadata + data, rounded to 64) put from a lease, and
// so the most a client reserves (also at most 1/64 of the arena). Larger objects take
// Create + Seal, whose second round trip is small beside their copy (~250 µs at 4 MiB).
constexpr uint64_t kMaxLeasedBlock = 4u << 20;
// A lease is sized for the largest of this many recent leased puts.
constexpr int kLeaseHistory = 8;
// After the store refused a lease (no free space, or its limits), puts go by Create +
// Seal for this long before asking again.
constexpr absl::Duration kLeaseRetry = absl::Milliseconds(100);

// Overlapped seals (SealLeasedRequest.ready_value) for leased puts of at least this
// much data, sending the seal when this much of the copy (at most a quarter) is left:
// about the store's wake-up and parse time (~15 µs of copying).
constexpr uint64_t kMinOverlappedPut = 256u << 10;
constexpr uint64_t kOverlappedTail = 256u << 10;

inline uint64_t RoundUp64(uint64_t n) { return (n + 63) / 64 * 64; }

// The socket and the mapped arena, shared by the Client and its ObjectRefs.
class Connection {
 public:
  Connection(int fd, std::unique_ptr<Arena> arena, uint64_t client_id)
      : fd_(fd),
        arena_(std::move(arena)),
        client_id_(client_id),
        max_leased_block_(
            std::min<uint64_t>(kMaxLeasedBlock, arena_->capacity() / 64 / 64 * 64)) {}

  ~Connection() {
    {
      absl::MutexLock lock(&mu_);
      // Read the answers to async requests, so none is left unread at close.
      if (!broken_.ok() || unacked_ == 0) {
      } else {
        (void)DrainLocked(absl::Now() + absl::Seconds(1));
      }
    }
    close(fd_);
  }

  const uint8_t* base() const { return reinterpret_cast<const uint8_t*>(arena_->base()); }
  uint8_t* mutable_base() const { return reinterpret_cast<uint8_t*>(arena_->base()); }
  uint64_t capacity() const { return arena_->capacity(); }
  uint64_t client_id() const { return client_id_; }

  absl::Mutex mu_;
  // Reused for every request: no allocation per operation beyond the messages' own.
  proto::StoreRequest req_ ABSL_GUARDED_BY(mu_);
  proto::StoreReply reply_ ABSL_GUARDED_BY(mu_);

  // Sends req_ and waits for its reply in reply_. `wait` bounds the store's own wait
  // (a Get's timeout); kReplyGrace is added. Returns the transport status; the reply's
  // own code is left to the caller.
  absl::Status CallLocked(absl::Duration wait) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!broken_.ok()) return broken_;
    uint64_t rid = next_request_id_++;
    req_.set_request_id(rid);
    wbuf_.clear();
    if (absl::Status s = AppendFrame(req_, &wbuf_); !s.ok()) return s;
    absl::Time deadline = wait == absl::InfiniteDuration() ? absl::InfiniteFuture()
                                                           : absl::Now() + wait + kReplyGrace;
    if (absl::Status s = WriteLocked(deadline); !s.ok()) return Break(s);
    while (true) {
      if (absl::Status s = ReadReplyLocked(&reply_, deadline); !s.ok()) return Break(s);
      if (reply_.request_id() == rid) return absl::OkStatus();
      NoteAsyncReply(reply_);
    }
  }

  // Pipelining: BeginBatchLocked, then AppendLocked once per request (after filling
  // req_), then FinishBatchLocked sends every frame in one write and reads the replies,
  // handing each to `on_reply` with its index in the batch.
  void BeginBatchLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    wbuf_.clear();
    batch_first_ = next_request_id_;
    batch_size_ = 0;
  }
  absl::Status AppendLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    req_.set_request_id(next_request_id_++);
    ++batch_size_;
    return AppendFrame(req_, &wbuf_);
  }
  absl::Status FinishBatchLocked(absl::Duration wait,
                                 const std::function<void(int, const proto::StoreReply&)>& on_reply)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!broken_.ok()) return broken_;
    absl::Time deadline = wait == absl::InfiniteDuration() ? absl::InfiniteFuture()
                                                           : absl::Now() + wait + kReplyGrace;
    if (absl::Status s = WriteLocked(deadline); !s.ok()) return Break(s);
    int left = batch_size_;
    while (left > 0) {
      if (absl::Status s = ReadReplyLocked(&reply_, deadline); !s.ok()) return Break(s);
      uint64_t rid = reply_.request_id();
      if (rid >= batch_first_ && rid < batch_first_ + static_cast<uint64_t>(batch_size_)) {
        on_reply(static_cast<int>(rid - batch_first_), reply_);
        --left;
      } else {
        NoteAsyncReply(reply_);
      }
    }
    return absl::OkStatus();
  }

  // --- Leased puts (Lease, SealLeased, ReturnLease in proto/object_store.proto) ---
  //
  // The client holds at most one lease range it carves puts from, front to back:
  // [lease_cursor_, lease_end_). A put takes its block under the lock, writes metadata
  // and data outside it, and seals with one request; when what is left would not hold
  // the next put (sized as the largest of the recent ones), the seal's write also
  // returns the rest and asks for a new lease of that size. The store answers the seal
  // first and at once, and the lease after it; the grant is read by the client's next
  // call (ReadReplyLocked takes it whoever reads), so a refill costs no round trip of
  // its own. At most one refill is in flight. A lease is sized for one put, not many:
  // the store places each new lease best-fit, so a put-and-delete loop keeps reusing
  // the same few blocks (cache-warm, already mapped in this process), where a large
  // lease carved front to back would walk through fresh, cold memory.

  // Puts the object from the lease. Returns false if it did not (no lease to be had,
  // the object too large for one, or a store that does not know leases): the caller
  // then puts it with Create + Seal. Otherwise `*result` is the put's outcome.
  bool TryPutLeased(const ObjectId& id, absl::Span<const uint8_t> data,
                    absl::string_view metadata, absl::Status* result) ABSL_LOCKS_EXCLUDED(mu_) {
    const uint64_t data_offset = metadata.empty() ? 0 : RoundUp64(metadata.size());
    const uint64_t block = RoundUp64(data_offset + data.size());
    if (block > max_leased_block_ || id.empty()) return false;
    uint64_t offset;
    uint64_t next;  // what the next put probably needs
    {
      absl::MutexLock lock(&mu_);
      recent_blocks_[recent_next_++ % kLeaseHistory] = block;
      next = *std::max_element(recent_blocks_, recent_blocks_ + kLeaseHistory);
      if (absl::Status s = AwaitRefillLocked(); !s.ok()) {
        *result = s;
        return true;
      }
      if (lease_end_ - lease_cursor_ < block) {
        if (!LeaseWantedLocked()) return false;
        BeginBatchLocked();
        if (absl::Status s = AppendRefillLocked(next); !s.ok()) return false;
        absl::Status s = FinishBatchLocked(
            absl::ZeroDuration(),
            [&](int i, const proto::StoreReply& r) { OnRefillReplyLocked(i, r); });
        if (!s.ok()) {
          *result = s;
          return true;
        }
        if (lease_end_ - lease_cursor_ < block) return false;
      }
      offset = lease_cursor_;
      lease_cursor_ += block;
      if (data.size() >= kMinOverlappedPut && !ready_slot_tried_) GetReadySlotLocked();
    }
    // Overlapped seal: the seal goes out while the last `tail` bytes are still being
    // copied; the store waits for the ready word (SealLeasedRequest.ready_value), so
    // its wake-up and parsing hide behind the copy instead of following it.
    const size_t tail = ready_slot_ != 0 && data.size() >= kMinOverlappedPut
                            ? std::min<size_t>(kOverlappedTail, data.size() / 4)
                            : 0;
    // The block is this put's alone now: written without the lock.
    uint8_t* p = mutable_base() + offset;
    if (!metadata.empty()) memcpy(p, metadata.data(), metadata.size());
    if (!data.empty()) memcpy(p + data_offset, data.data(), data.size() - tail);

    absl::MutexLock lock(&mu_);
    // Starts a batch with the seal; ready_value 0: the object is complete already.
    auto append_seal = [&](uint64_t ready_value) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      BeginBatchLocked();
      req_.Clear();
      proto::SealLeasedRequest* r = req_.mutable_seal_leased();
      r->set_id(id);
      r->set_offset(offset);
      r->set_data_size(data.size());
      r->set_metadata_size(metadata.size());
      if (ready_value != 0) {
        r->set_ready_offset(ready_slot_);
        r->set_ready_value(ready_value);
      }
      return AppendLocked();
    };
    const uint64_t ready_value = tail > 0 ? ++ready_seq_ : 0;
    if (absl::Status s = append_seal(ready_value); !s.ok()) {
      // Cannot encode (not for these sizes); the block stays unused in the lease.
      *result = s;
      return true;
    }
    const uint64_t seal_rid = batch_first_;
    // A refill goes in the same write, after the seal. The store answers the seal
    // first and at once; the lease's answer is read by whichever call comes next
    // (ReadReplyLocked), usually long after it arrived.
    // (Not while another thread's refill is still unanswered: one at a time, so that
    // every grant is taken up and every rest returned.)
    const bool refill = refill_count_ == 0 && lease_end_ - lease_cursor_ < next &&
                        LeaseWantedLocked() && AppendRefillLocked(next).ok();
    if (!broken_.ok()) {
      *result = broken_;
      return true;
    }
    const absl::Time deadline = absl::Now() + kReplyGrace;
    if (absl::Status s = WriteLocked(deadline); !s.ok()) {
      *result = Break(s);
      return true;
    }
    if (refill) {
      refill_first_ = seal_rid + 1;
      refill_count_ = batch_size_ - 1;
    }
    if (tail > 0) {
      memcpy(p + data_offset + data.size() - tail, data.data() + data.size() - tail, tail);
      reinterpret_cast<std::atomic<uint64_t>*>(mutable_base() + ready_slot_)
          ->store(ready_value, std::memory_order_release);
      if (AwaitSealAckLocked(ready_value)) {
        // Sealed: the store said so in shared memory. Its reply is read with a later
        // call's, like an asynchronous request's.
        ++unacked_;
        if (unacked_ >= kMaxUnacked) (void)DrainLocked(absl::Now() + kReplyGrace);
        *result = absl::OkStatus();
        return true;
      }
    }
    uint64_t want = seal_rid;
    while (true) {
      if (absl::Status s = ReadReplyLocked(&reply_, deadline); !s.ok()) {
        *result = Break(s);
        return true;
      }
      if (reply_.request_id() != want) {
        NoteAsyncReply(reply_);
        continue;
      }
      if (want == seal_rid && tail > 0 &&
          reply_.code() == static_cast<int>(absl::StatusCode::kUnavailable)) {
        // The store gave up waiting for the ready word (this thread was descheduled
        // for over a millisecond): the object is complete now; seal it plainly.
        if (absl::Status s = append_seal(0); !s.ok()) {
          *result = s;
          return true;
        }
        want = batch_first_;
        if (absl::Status s = WriteLocked(deadline); !s.ok()) {
          *result = Break(s);
          return true;
        }
        continue;
      }
      if (want == seal_rid && tail > 0 && reply_.code() == 0 &&
          SealAck()->load(std::memory_order_acquire) != ready_value) {
        // Sealed, yet nothing in the ack word: a store from before acknowledgements.
        seal_acks_ = false;
      }
      *result = reply_.code() == 0
                    ? absl::OkStatus()
                    : absl::Status(static_cast<absl::StatusCode>(reply_.code()),
                                   reply_.message());
      return true;
    }
  }

  // Sends the frames appended since BeginBatchLocked without waiting for their replies
  // (read later, as for SendAsyncLocked).
  void SendBatchAsyncLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!broken_.ok() || batch_size_ == 0) return;
    if (absl::Status s = WriteLocked(absl::Now() + kReplyGrace); !s.ok()) {
      (void)Break(s);
      return;
    }
    unacked_ += batch_size_;
    if (unacked_ >= kMaxUnacked) (void)DrainLocked(absl::Now() + kReplyGrace);
  }

  // Sends req_ without waiting for its reply (read later, before the next reply).
  void SendAsyncLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!broken_.ok()) return;
    req_.set_request_id(next_request_id_++);
    wbuf_.clear();
    if (!AppendFrame(req_, &wbuf_).ok()) return;
    if (absl::Status s = WriteLocked(absl::Now() + kReplyGrace); !s.ok()) {
      (void)Break(s);
      return;
    }
    ++unacked_;
    if (unacked_ >= kMaxUnacked) (void)DrainLocked(absl::Now() + kReplyGrace);
  }

  void ReleaseAsync(const ObjectId& id) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    req_.Clear();
    req_.mutable_release()->set_id(id);
    SendAsyncLocked();
  }

 private:
  absl::Status Break(absl::Status s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    broken_ = absl::UnavailableError(
        absl::StrCat("connection to the object store is broken (", s.message(),
                     "); connect again"));
    shutdown(fd_, SHUT_RDWR);
    return broken_;
  }

  void NoteAsyncReply(const proto::StoreReply& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (unacked_ > 0) --unacked_;
    if (r.code() != 0) {
      DROVER_LOG(WARNING) << "object store: an asynchronous request (release/seal) failed: "
                          << r.message();
    }
  }

  // The word after the ready word, where the store acknowledges an overlapped seal
  // (SealLeasedRequest.ready_offset).
  const std::atomic<uint64_t>* SealAck() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return reinterpret_cast<const std::atomic<uint64_t>*>(base() + ready_slot_ + 8);
  }

  // Spins (up to kSpin) for the store's acknowledgement of the overlapped seal with
  // `ready_value`. True if the object is sealed; false if the store says it is not, or
  // is slow to say (then the reply on the socket tells).
  bool AwaitSealAckLocked(uint64_t ready_value) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
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

  // Leases the 64-byte range that holds this client's ready word (overlapped seals),
  // once; kept until the client disconnects. Without it, seals are not overlapped.
  void GetReadySlotLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ready_slot_tried_ = true;
    BeginBatchLocked();
    req_.Clear();
    req_.mutable_lease()->set_bytes(64);
    if (!AppendLocked().ok()) return;
    (void)FinishBatchLocked(absl::ZeroDuration(), [&](int, const proto::StoreReply& r) {
      if (r.code() == 0 && r.has_lease() && r.lease().size() >= 64 &&
          r.lease().offset() % 64 == 0 && r.lease().offset() <= capacity() - 64) {
        ready_slot_ = r.lease().offset();
      }
    });
    if (ready_slot_ != 0) {
      // The range may hold an earlier client's ready and ack words: a stale value equal
      // to one of ours would seal an unfinished object, or acknowledge a seal not made.
      auto* words = reinterpret_cast<std::atomic<uint64_t>*>(mutable_base() + ready_slot_);
      words[0].store(0, std::memory_order_relaxed);
      words[1].store(0, std::memory_order_release);
    }
  }

  bool LeaseWantedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return max_leased_block_ > 0 && !lease_unsupported_ &&
           (lease_retry_after_ == absl::InfinitePast() || absl::Now() >= lease_retry_after_);
  }

  // Appends, to the batch being built, the return of what is left of the lease (if
  // anything) and a Lease request for `bytes`: two frames, or one.
  absl::Status AppendRefillLocked(uint64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    refill_returns_ = lease_end_ > lease_cursor_;
    if (refill_returns_) {
      req_.Clear();
      proto::ReturnLeaseRequest* r = req_.mutable_return_lease();
      r->set_offset(lease_cursor_);
      r->set_size(lease_end_ - lease_cursor_);
      if (absl::Status s = AppendLocked(); !s.ok()) return s;
    }
    lease_cursor_ = lease_end_ = 0;
    req_.Clear();
    req_.mutable_lease()->set_bytes(bytes);
    return AppendLocked();
  }

  // Reads the answers to a refill sent with an earlier put's seal (ReadReplyLocked
  // hands them to OnRefillReplyLocked), so that the lease is known.
  absl::Status AwaitRefillLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    while (refill_count_ > 0) {
      if (!broken_.ok()) return broken_;
      absl::string_view body;
      if (absl::Status s = ReadFrameLocked(&body, absl::Now() + kReplyGrace); !s.ok()) {
        return Break(s);
      }
      absl::StatusOr<bool> refill = TakeRefillReplyLocked(body);
      if (!refill.ok()) return Break(refill.status());
      if (*refill) continue;
      // An answer to an earlier asynchronous request (a release).
      if (!drain_reply_.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
        return Break(absl::InternalError("a reply from the object store does not parse"));
      }
      NoteAsyncReply(drain_reply_);
    }
    return absl::OkStatus();
  }

  // Reply `i` of the frames AppendRefillLocked appended.
  void OnRefillReplyLocked(int i, const proto::StoreReply& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (refill_returns_ && i == 0) {
      if (r.code() != 0) {
        DROVER_LOG(WARNING) << "object store: returning the rest of a lease failed: "
                            << r.message();
      }
      return;
    }
    if (r.code() == static_cast<int>(absl::StatusCode::kInvalidArgument) ||
        r.code() == static_cast<int>(absl::StatusCode::kUnimplemented)) {
      // A store that does not know leases (an older one answers INVALID_ARGUMENT: a
      // StoreRequest with no operation it knows), or thinks this client misuses them.
      DROVER_LOG(INFO) << "object store: no leases (" << r.message()
                       << "); putting with Create + Seal";
      lease_unsupported_ = true;
      return;
    }
    if (r.code() != 0) {
      lease_retry_after_ = absl::Now() + kLeaseRetry;
      return;
    }
    const uint64_t off = r.lease().offset(), size = r.lease().size();
    if (off % 64 != 0 || size % 64 != 0 || off > capacity() || size > capacity() - off) {
      DROVER_LOG(ERROR) << "object store: a lease outside the arena (" << off << ", " << size
                        << "); putting with Create + Seal";
      lease_unsupported_ = true;
      return;
    }
    lease_cursor_ = off;
    lease_end_ = off + size;
  }

  absl::Status DrainLocked(absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    while (unacked_ > 0) {
      if (absl::Status s = ReadReplyLocked(&drain_reply_, deadline); !s.ok()) return Break(s);
      NoteAsyncReply(drain_reply_);
    }
    return absl::OkStatus();
  }

  absl::Status WaitFd(short events, absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    while (true) {
      std::optional<int> timeout_ms = PollTimeoutMs(deadline);
      if (!timeout_ms) {
        return absl::DeadlineExceededError("the object store did not answer in time");
      }
      pollfd p{fd_, events, 0};
      int n = poll(&p, 1, *timeout_ms);
      if (n > 0) return absl::OkStatus();
      if (n < 0 && errno != EINTR) {
        return absl::UnavailableError(absl::StrCat("poll: ", strerror(errno)));
      }
    }
  }

  absl::Status WriteLocked(absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    size_t done = 0;
    while (done < wbuf_.size()) {
      ssize_t n = send(fd_, wbuf_.data() + done, wbuf_.size() - done, MSG_NOSIGNAL);
      if (n >= 0) {
        done += static_cast<size_t>(n);
        continue;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (absl::Status s = WaitFd(POLLOUT, deadline); !s.ok()) return s;
        continue;
      }
      return absl::UnavailableError(absl::StrCat("write: ", strerror(errno)));
    }
    return absl::OkStatus();
  }

  // Reads the next reply into `*reply`. The answers to a lease refill sent ahead are
  // handled here, whoever reads them, and not returned.
  absl::Status ReadReplyLocked(proto::StoreReply* reply, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    while (true) {
      absl::string_view body;
      if (absl::Status s = ReadFrameLocked(&body, deadline); !s.ok()) return s;
      absl::StatusOr<bool> refill = TakeRefillReplyLocked(body);
      if (!refill.ok()) return refill.status();
      if (*refill) continue;
      if (!reply->ParseFromArray(body.data(), static_cast<int>(body.size()))) {
        return absl::InternalError("a reply from the object store does not parse");
      }
      return absl::OkStatus();
    }
  }

  // True (and handled) if `body` answers a pending refill.
  absl::StatusOr<bool> TakeRefillReplyLocked(absl::string_view body)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (refill_count_ == 0) return false;
    if (!refill_reply_.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
      return absl::InternalError("a reply from the object store does not parse");
    }
    const uint64_t rid = refill_reply_.request_id();
    if (rid < refill_first_ || rid >= refill_first_ + refill_count_) return false;
    OnRefillReplyLocked(static_cast<int>(rid - refill_first_), refill_reply_);
    if (rid + 1 == refill_first_ + refill_count_) refill_count_ = 0;
    return true;
  }

  // Reads one frame; `*body` is valid until the next read.
  absl::Status ReadFrameLocked(absl::string_view* body, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::Time spin_until = absl::InfinitePast();
    while (true) {
      absl::StatusOr<bool> got = in_.Next(body);
      if (!got.ok()) return got.status();
      if (*got) return absl::OkStatus();
      char* p = in_.PrepareWrite(kReadChunk);
      ssize_t n = recv(fd_, p, kReadChunk, 0);
      if (n > 0) {
        in_.Commit(static_cast<size_t>(n));
        continue;
      }
      if (n == 0) return absl::UnavailableError("the object store closed the connection");
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        // Spin briefly before sleeping in poll: the store answers most requests within
        // microseconds, and a reader asleep costs the store a wake-up per reply and
        // this thread a wake-up (~10 µs each way here).
        absl::Time now = absl::Now();
        if (spin_until == absl::InfinitePast()) spin_until = now + kSpin;
        if (now < spin_until) {
          // Yield, not pause: the store may be runnable on this very CPU (a sync
          // wake-up put it here), and then only a yield lets it answer before the spin
          // ends. With the CPU to itself, a yield returns at once.
          sched_yield();
          continue;
        }
        if (absl::Status s = WaitFd(POLLIN, deadline); !s.ok()) return s;
        spin_until = absl::Now() + kSpin;
        continue;
      }
      return absl::UnavailableError(absl::StrCat("read: ", strerror(errno)));
    }
  }

  const int fd_;
  const std::unique_ptr<Arena> arena_;
  const uint64_t client_id_;
  uint64_t next_request_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t batch_first_ ABSL_GUARDED_BY(mu_) = 0;
  int batch_size_ ABSL_GUARDED_BY(mu_) = 0;
  int unacked_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  std::string wbuf_ ABSL_GUARDED_BY(mu_);
  FrameDecoder in_ ABSL_GUARDED_BY(mu_);
  proto::StoreReply drain_reply_ ABSL_GUARDED_BY(mu_);
  // Leased puts.
  const uint64_t max_leased_block_;  // 0: the arena is too small to lease
  uint64_t recent_blocks_[kLeaseHistory] ABSL_GUARDED_BY(mu_) = {};
  uint64_t recent_next_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t lease_cursor_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t lease_end_ ABSL_GUARDED_BY(mu_) = 0;
  // Overlapped seals: the leased 64-byte range of the ready word (0: none), whether it
  // was asked for, and the last ready value used.
  uint64_t ready_slot_ ABSL_GUARDED_BY(mu_) = 0;
  bool ready_slot_tried_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t ready_seq_ ABSL_GUARDED_BY(mu_) = 0;
  // Whether the store acknowledges overlapped seals in shared memory (false once a
  // store sealed without writing the acknowledgement).
  bool seal_acks_ ABSL_GUARDED_BY(mu_) = true;
  bool refill_returns_ ABSL_GUARDED_BY(mu_) = false;
  bool lease_unsupported_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time lease_retry_after_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // A refill sent with a seal whose answers are not read yet: its request ids.
  uint64_t refill_first_ ABSL_GUARDED_BY(mu_) = 0;
  int refill_count_ ABSL_GUARDED_BY(mu_) = 0;
  proto::StoreReply refill_reply_ ABSL_GUARDED_BY(mu_);
};

}  // namespace internal

namespace {

absl::Status ReplyStatus(const proto::StoreReply& r) {
  if (r.code() == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(r.code()), r.message());
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

}  // namespace

ObjectRef& ObjectRef::operator=(ObjectRef&& other) noexcept {
  if (this != &other) {
    Reset();
    conn_ = std::move(other.conn_);
    id_ = std::move(other.id_);
    data_ = other.data_;
    metadata_ = other.metadata_;
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
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const std::string& socket_path) {
  absl::StatusOr<int> connected = ConnectToStore(socket_path);
  if (!connected.ok()) return connected.status();
  int fd = *connected;
  // The hello: blocking, bounded by a receive timeout.
  timeval tv{30, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  proto::StoreHello hello;
  absl::StatusOr<int> arena_fd = RecvFrameWithFd(fd, &hello);
  if (!arena_fd.ok()) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("object store at ", socket_path,
                                               " sent no arena: ", arena_fd.status().message()));
  }
  absl::StatusOr<std::unique_ptr<Arena>> arena = Arena::Map(*arena_fd, hello.arena_capacity());
  close(*arena_fd);  // the Arena keeps its own dup
  if (!arena.ok()) {
    close(fd);
    return arena.status();
  }
  // From now on non-blocking with poll() for deadlines.
  int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  auto conn = std::make_shared<internal::Connection>(fd, std::move(*arena), hello.client_id());
  return std::unique_ptr<Client>(new Client(std::move(conn)));
}

Client::~Client() = default;

const uint8_t* Client::arena_base() const { return conn_->base(); }
uint64_t Client::arena_capacity() const { return conn_->capacity(); }
uint64_t Client::client_id() const { return conn_->client_id(); }

absl::StatusOr<MutableObject> Client::Create(const ObjectId& id, uint64_t data_size,
                                             absl::string_view metadata, bool secondary) {
  internal::Connection& c = *conn_;
  absl::MutexLock lock(&c.mu_);
  c.req_.Clear();
  auto* r = c.req_.mutable_create();
  r->set_id(id);
  r->set_data_size(data_size);
  r->set_metadata(metadata.data(), metadata.size());
  r->set_secondary(secondary);
  if (absl::Status s = c.CallLocked(absl::ZeroDuration()); !s.ok()) return s;
  if (absl::Status s = ReplyStatus(c.reply_); !s.ok()) return s;
  const proto::ObjectLocation& loc = c.reply_.create().location();
  if (absl::Status s = CheckLocation(loc, c.capacity()); !s.ok()) return s;
  MutableObject out;
  out.id = id;
  out.data = absl::Span<uint8_t>(c.mutable_base() + loc.offset() + loc.data_offset(),
                                 loc.data_size());
  out.metadata =
      absl::Span<const uint8_t>(c.base() + loc.offset(), loc.metadata_size());
  return out;
}

absl::Status Client::Seal(const ObjectId& id) {
  internal::Connection& c = *conn_;
  absl::MutexLock lock(&c.mu_);
  c.req_.Clear();
  c.req_.mutable_seal()->set_id(id);
  if (absl::Status s = c.CallLocked(absl::ZeroDuration()); !s.ok()) return s;
  if (absl::Status s = ReplyStatus(c.reply_); !s.ok()) return s;
  // Drop the creator's reference.
  c.req_.Clear();
  c.req_.mutable_release()->set_id(id);
  c.SendAsyncLocked();
  return absl::OkStatus();
}

absl::Status Client::Abort(const ObjectId& id) {
  internal::Connection& c = *conn_;
  absl::MutexLock lock(&c.mu_);
  c.req_.Clear();
  c.req_.mutable_abort()->set_id(id);
  if (absl::Status s = c.CallLocked(absl::ZeroDuration()); !s.ok()) return s;
  return ReplyStatus(c.reply_);
}

absl::Status Client::Put(const ObjectId& id, absl::Span<const uint8_t> data,
                         absl::string_view metadata) {
  if (data.size() <= internal::kMaxInlinePut) {
    // Small: the bytes ride along in the request; one round trip in all.
    internal::Connection& c = *conn_;
    absl::MutexLock lock(&c.mu_);
    c.req_.Clear();
    auto* r = c.req_.mutable_create();
    r->set_id(id);
    r->set_data_size(data.size());
    r->set_metadata(metadata.data(), metadata.size());
    r->set_inline_put(true);
    r->set_data(data.data(), data.size());
    if (absl::Status s = c.CallLocked(absl::ZeroDuration()); !s.ok()) return s;
    return ReplyStatus(c.reply_);
  }
  // Medium: written into this client's lease and sealed in one round trip.
  absl::Status leased;
  if (conn_->TryPutLeased(id, data, metadata, &leased)) return leased;
  // Large (or no lease to be had): Create, copy, Seal.
  absl::StatusOr<MutableObject> obj = Create(id, data.size(), metadata);
  if (!obj.ok()) return obj.status();
  // Beyond the caches one thread's copy is bounded by the cache lines it keeps in
  // flight: several copy faster (parallel_copy.h).
  if (!data.empty()) ParallelCopy(obj->data.data(), data.data(), data.size());
  absl::Status s = Seal(id);
  if (!s.ok() && s.code() != absl::StatusCode::kUnavailable) (void)Abort(id);
  return s;
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
    if (data[i].size() <= internal::kMaxInlinePut) {
      small.push_back(i);
    } else {
      note(ids[i], Put(ids[i], data[i], metadata));
    }
  }
  internal::Connection& c = *conn_;
  for (size_t start = 0; start < small.size(); start += kMaxBatch) {
    size_t end = std::min(small.size(), start + kMaxBatch);
    absl::MutexLock lock(&c.mu_);
    c.BeginBatchLocked();
    for (size_t k = start; k < end; ++k) {
      size_t i = small[k];
      c.req_.Clear();
      auto* r = c.req_.mutable_create();
      r->set_id(ids[i]);
      r->set_data_size(data[i].size());
      r->set_metadata(metadata.data(), metadata.size());
      r->set_inline_put(true);
      r->set_data(data[i].data(), data[i].size());
      if (absl::Status s = c.AppendLocked(); !s.ok()) return s;
    }
    absl::Status s = c.FinishBatchLocked(absl::ZeroDuration(),
                                         [&](int j, const proto::StoreReply& reply) {
                                           note(ids[small[start + j]], ReplyStatus(reply));
                                         });
    if (!s.ok()) return s;
  }
  if (failed == 0) return absl::OkStatus();
  if (failed == 1) return first_error;
  return absl::Status(first_error.code(), absl::StrCat(failed, " of ", ids.size(),
                                                       " puts failed; the first: ",
                                                       first_error.message()));
}

void Client::Release(std::vector<ObjectRef>* refs) {
  internal::Connection& c = *conn_;
  size_t i = 0;
  while (i < refs->size()) {
    absl::MutexLock lock(&c.mu_);
    c.BeginBatchLocked();
    for (size_t n = 0; i < refs->size() && n < kMaxBatch; ++i) {
      ObjectRef& ref = (*refs)[i];
      if (ref.conn_ == nullptr) continue;
      if (ref.conn_ != conn_) {  // another client's ref: released through its own
        ref.Reset();
        continue;
      }
      c.req_.Clear();
      c.req_.mutable_release()->set_id(ref.id_);
      (void)c.AppendLocked();
      ++n;
      ref.conn_.reset();
      ref.data_ = {};
      ref.metadata_ = {};
    }
    c.SendBatchAsyncLocked();
  }
  refs->clear();
}

absl::StatusOr<ObjectRef> Client::Get(const ObjectId& id, absl::Duration timeout) {
  ObjectRef ref;
  absl::Status status;
  {
    internal::Connection& c = *conn_;
    absl::MutexLock lock(&c.mu_);
    c.req_.Clear();
    auto* r = c.req_.mutable_get();
    r->add_ids(id);
    r->set_timeout_ms(TimeoutMs(timeout));
    if (absl::Status s = c.CallLocked(timeout); !s.ok()) return s;
    if (absl::Status s = ReplyStatus(c.reply_); !s.ok()) return s;
    if (c.reply_.get().results_size() != 1) {
      return absl::InternalError("the object store answered a Get of 1 id with another count");
    }
    const proto::GetResult& g = c.reply_.get().results(0);
    if (!g.found()) {
      return absl::Status(static_cast<absl::StatusCode>(g.code() == 0 ? 2 : g.code()),
                          g.message());
    }
    const proto::ObjectLocation& loc = g.location();
    // The reference was taken: from here on the ref owns it (and releases on error).
    ref.conn_ = conn_;
    ref.id_ = id;
    status = CheckLocation(loc, c.capacity());
    if (status.ok()) {
      ref.data_ = absl::Span<const uint8_t>(c.base() + loc.offset() + loc.data_offset(),
                                            loc.data_size());
      ref.metadata_ = absl::Span<const uint8_t>(c.base() + loc.offset(), loc.metadata_size());
    }
  }
  if (!status.ok()) return status;  // ~ObjectRef releases, outside the lock
  return ref;
}

absl::StatusOr<std::vector<ObjectRef>> Client::Get(const std::vector<ObjectId>& ids,
                                                   absl::Duration timeout) {
  std::vector<ObjectRef> refs;
  refs.reserve(ids.size());
  std::vector<std::string> missing;
  absl::Status status;
  {
    internal::Connection& c = *conn_;
    absl::MutexLock lock(&c.mu_);
    c.req_.Clear();
    auto* r = c.req_.mutable_get();
    for (const ObjectId& id : ids) r->add_ids(id);
    r->set_timeout_ms(TimeoutMs(timeout));
    if (absl::Status s = c.CallLocked(timeout); !s.ok()) return s;
    if (absl::Status s = ReplyStatus(c.reply_); !s.ok()) return s;
    const proto::GetReply& g = c.reply_.get();
    if (g.results_size() != static_cast<int>(ids.size())) {
      return absl::InternalError("the object store answered a Get with the wrong count");
    }
    absl::StatusCode first_code = absl::StatusCode::kOk;
    for (int i = 0; i < g.results_size(); ++i) {
      const proto::GetResult& res = g.results(i);
      if (!res.found()) {
        if (first_code == absl::StatusCode::kOk) {
          first_code = static_cast<absl::StatusCode>(res.code() == 0 ? 2 : res.code());
        }
        if (missing.size() < 8) missing.push_back(res.message());
        continue;
      }
      ObjectRef ref;
      ref.conn_ = conn_;
      ref.id_ = ids[i];
      absl::Status s = CheckLocation(res.location(), c.capacity());
      if (s.ok()) {
        const auto& loc = res.location();
        ref.data_ = absl::Span<const uint8_t>(c.base() + loc.offset() + loc.data_offset(),
                                              loc.data_size());
        ref.metadata_ = absl::Span<const uint8_t>(c.base() + loc.offset(), loc.metadata_size());
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
}

absl::Status Client::Wait(const std::vector<ObjectId>& ids, absl::Duration timeout) {
  absl::StatusOr<std::vector<ObjectRef>> refs = Get(ids, timeout);
  return refs.status();
}

absl::Status Client::Delete(const ObjectId& id) {
  internal::Connection& c = *conn_;
  absl::MutexLock lock(&c.mu_);
  c.req_.Clear();
  c.req_.mutable_delete_()->set_id(id);
  if (absl::Status s = c.CallLocked(absl::ZeroDuration()); !s.ok()) return s;
  return ReplyStatus(c.reply_);
}

absl::StatusOr<bool> Client::Contains(const ObjectId& id) {
  internal::Connection& c = *conn_;
  absl::MutexLock lock(&c.mu_);
  c.req_.Clear();
  c.req_.mutable_contains()->set_id(id);
  if (absl::Status s = c.CallLocked(absl::ZeroDuration()); !s.ok()) return s;
  if (absl::Status s = ReplyStatus(c.reply_); !s.ok()) return s;
  return c.reply_.contains().contains();
}

absl::StatusOr<StoreStats> Client::Stats() {
  internal::Connection& c = *conn_;
  absl::MutexLock lock(&c.mu_);
  c.req_.Clear();
  c.req_.mutable_stats();
  if (absl::Status s = c.CallLocked(absl::ZeroDuration()); !s.ok()) return s;
  if (absl::Status s = ReplyStatus(c.reply_); !s.ok()) return s;
  const proto::StoreStats& p = c.reply_.stats();
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
