// Connection: the client's transport to the node's object store. One Unix socket, the
// arena mapped from the descriptor the store sent, and the request/reply machinery
// over them: one request at a time (CallLocked), requests whose replies are read later
// (SendAsyncLocked), pipelined batches, and replies set aside for their owner.
//
// Not part of the public API: object_store::Client (client.h) and the leased put
// (leased_put.h) build on it.
//
// Ownership: shared by the Client and every ObjectRef it handed out
// (std::shared_ptr), so that a ref may outlive its Client. The destructor reads the
// answers to outstanding asynchronous requests (up to a second) and closes the
// socket; the arena mapping goes with it.
//
// Thread safety: every *Locked method REQUIRES mu() held; the arena accessors need no
// lock. One thread at a time drives the socket; a request and its reply, or a whole
// batch, happen under one hold of mu(). mu() is taken only through ConnectionLock,
// which waits for it no longer than the caller's deadline (a thread that holds it may
// be waiting for the reply of a store that stopped answering).
//
// Deadlines: every wait (for mu(), for a reply, for room to write) ends at a deadline
// the caller gives. A reply that does not come by its deadline breaks the connection
// (the store may still answer it later, out of step with the next request): the call
// gets DEADLINE_EXCEEDED naming the socket and the request, every later one UNAVAILABLE.
//
// Invariants: request ids grow by one per request sent; every reply read is either
// the one a caller waits for, an answer to an asynchronous request (counted in
// unacked, logged if it failed), or set aside (SetAsideLocked). Once a socket error or
// a garbled reply breaks the connection it stays broken: every later call returns the
// same UNAVAILABLE, naming the cause.
#ifndef DROVER_OBJECT_STORE_INTERNAL_CONNECTION_H_
#define DROVER_OBJECT_STORE_INTERNAL_CONNECTION_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "object_store/arena.h"
#include "object_store/object_id.h"
#include "object_store/protocol.h"
#include "proto/object_store.pb.h"

namespace drover::object_store::internal {

// The waits of a connection's requests that have no caller's deadline (asynchronous
// releases, the answers to them read later). Set by the Client (ClientOptions).
struct ConnectionTimeouts {
  // How long the store may take to answer beyond the request's own wait.
  absl::Duration reply_grace = absl::Seconds(5);
  // The bound on a request with no deadline of its own, waiting for mu() included.
  absl::Duration call_timeout = absl::Seconds(60);
};
// The least time left before a call's deadline for it to send a request: a request
// sent whose reply the call then gives up on breaks the connection (for every thread),
// so a call that spent its time queueing for the connection answers DEADLINE_EXCEEDED
// without sending rather than give a healthy store too little time.
inline constexpr absl::Duration kMinReplyWait = absl::Seconds(1);
// How long a connect waits for the store's hello at most (less if the caller's
// deadline comes first).
inline constexpr absl::Duration kHelloTimeout = absl::Seconds(30);
// How long a waiting client spins (yielding the CPU) before it sleeps: the store
// answers most requests within microseconds, and a sleeping reader costs a wake-up on
// each side (~10 µs here).
inline constexpr absl::Duration kSpin = absl::Microseconds(50);

class Connection {
 public:
  // Connects to the store at `socket_path`, receives its hello with the arena
  // descriptor and maps the arena. UNAVAILABLE if no store listens there or it sent no
  // arena by `deadline` (or within kHelloTimeout).
  static absl::StatusOr<std::shared_ptr<Connection>> Open(
      const std::string& socket_path, absl::Time deadline = absl::InfiniteFuture(),
      ConnectionTimeouts timeouts = {});

  Connection(int fd, std::unique_ptr<Arena> arena, uint64_t client_id,
             std::string socket_path = "", ConnectionTimeouts timeouts = {});
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // The shared arena as mapped in this process; fixed for the connection's life.
  const uint8_t* base() const { return reinterpret_cast<const uint8_t*>(arena_->base()); }
  uint8_t* mutable_base() const { return reinterpret_cast<uint8_t*>(arena_->base()); }
  uint64_t capacity() const { return arena_->capacity(); }
  int arena_fd() const { return arena_->fd(); }
  // The id the store assigned to this connection.
  uint64_t client_id() const { return client_id_; }

  absl::Mutex& mu() ABSL_LOCK_RETURNED(mu_) { return mu_; }
  const std::string& socket_path() const { return socket_path_; }
  const ConnectionTimeouts& timeouts() const { return timeouts_; }
  // The deadline of a reply to a request sent now that asks the store to wait until
  // `wait_until` (InfinitePast: no wait), within the call's `deadline`.
  absl::Time ReplyDeadline(absl::Time wait_until, absl::Time deadline) const {
    if (wait_until == absl::InfiniteFuture()) return deadline;
    return std::min(deadline, std::max(absl::Now(), wait_until) + timeouts_.reply_grace);
  }

  // True once a socket error or a garbled reply broke the connection (for good).
  // Lock-free: callers ask it while another thread may wait in a long Get.
  bool broken() const { return broken_flag_.load(std::memory_order_acquire); }
  // Why it broke (OK while it is not).
  absl::Status broken_status() ABSL_LOCKS_EXCLUDED(gate_) {
    absl::MutexLock lock(&gate_);
    return broken_copy_;
  }

  // The request to fill for the next send, cleared. Reused for every request (no
  // allocation per operation beyond the message's own).
  proto::StoreRequest& NewRequestLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    req_.Clear();
    return req_;
  }

  // Sends the request and waits for its reply until `deadline` (ReplyDeadline).
  // Returns the reply, valid until the next read on this connection, or the
  // transport's error (UNAVAILABLE: broken for good; DEADLINE_EXCEEDED: no reply by
  // the deadline, broken now). The reply's own code is the caller's to look at.
  absl::StatusOr<const proto::StoreReply*> CallLocked(absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Sends the request without waiting for its reply (read before a later call's; a
  // failure is logged).
  void SendAsyncLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Releases references to `ids` without waiting, ever (ObjectRef, Client::Release):
  // if no call holds mu() they are sent now (their answers read later, as for
  // SendAsyncLocked); if one does (a Get may wait for minutes), they are queued and
  // the holder sends them as it lets go of mu() (Unlock). On a broken connection
  // they are dropped: the store frees a client's references when its socket closes.
  void ReleaseAsync(const ObjectId& id) ABSL_LOCKS_EXCLUDED(mu_, gate_) {
    ReleaseAsync(absl::MakeConstSpan(&id, 1));
  }
  void ReleaseAsync(absl::Span<const ObjectId> ids) ABSL_LOCKS_EXCLUDED(mu_, gate_);
  // Releases queued behind a holder of mu() and not sent yet (for tests).
  size_t queued_releases() ABSL_LOCKS_EXCLUDED(gate_) {
    absl::MutexLock g(&gate_);
    return queued_releases_.size();
  }

  // --- Pipelining: BeginBatchLocked, then per request NewRequestLocked + AppendLocked;
  // then FinishBatchLocked (send all in one write, read every reply),
  // SendBatchAsyncLocked (replies read later) or SendBatchLocked (the caller awaits the
  // replies it wants with AwaitReplyLocked).
  void BeginBatchLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends the request (NewRequestLocked) to the batch. INVALID_ARGUMENT if it is
  // larger than a frame.
  absl::Status AppendLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The request id of the batch's first request, and how many it has.
  uint64_t batch_first() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return batch_first_; }
  int batch_size() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return batch_size_; }

  // Sends the batch and reads its replies, calling on_reply(index in the batch, reply)
  // for each (in the store's order). Transport errors only; replies' codes are the
  // callback's.
  template <typename OnReply>
  absl::Status FinishBatchLocked(absl::Time deadline, OnReply&& on_reply)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends the batch without reading anything.
  absl::Status SendBatchLocked(absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends the batch; its replies are read later, as for SendAsyncLocked.
  void SendBatchAsyncLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads replies until the one to request `request_id` (those before it answer
  // asynchronous requests) and returns it, valid until the next read.
  // `what` names the request for the message if its reply does not come in time.
  absl::StatusOr<const proto::StoreReply*> AwaitReplyLocked(uint64_t request_id,
                                                            absl::Time deadline,
                                                            absl::string_view what = "request")
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A request sent whose reply nobody waits for after all (its outcome came another
  // way): the reply is read later, as for SendAsyncLocked.
  void ExpectAsyncReplyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- Replies set aside: the replies to requests [first, first + count) (sent, e.g.
  // with a batch's tail) are kept for their owner by whichever read meets them, so that
  // nobody waits for them on purpose. At most one such range at a time.
  static constexpr int kMaxSetAside = 2;
  // REQUIRES: 0 < count <= kMaxSetAside, !set_aside_pending().
  void SetAsideLocked(uint64_t first, int count) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True from SetAsideLocked until TakeSetAsideLocked.
  bool set_aside_pending() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return set_aside_count_ > 0;
  }
  // Reads until every reply set aside has come and hands them over, in request order
  // (valid until the next SetAsideLocked); ends the range. Transport errors only, and
  // DEADLINE_EXCEEDED without reading (the range stays pending) if less than
  // kMinReplyWait is left before `deadline` and nothing has come to read.
  absl::StatusOr<absl::Span<const proto::StoreReply>> TakeSetAsideLocked(absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

 private:
  friend class ConnectionLock;
  // Takes mu() if it comes by `deadline`; DEADLINE_EXCEEDED (naming the socket and
  // how long the holder has had it) if not.
  absl::Status LockUntil(absl::Time deadline) ABSL_NO_THREAD_SAFETY_ANALYSIS;
  // Sends the releases queued meanwhile (ReleaseAsync), then lets go of mu().
  void Unlock() ABSL_NO_THREAD_SAFETY_ANALYSIS;
  // Sends releases of `ids` (batched, answers read later).
  void SendReleasesLocked(absl::Span<const ObjectId> ids) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks the connection broken by `s` (shutting the socket down) and returns the
  // UNAVAILABLE every later call gets, or, if `s` is a deadline that passed,
  // DEADLINE_EXCEEDED naming the socket and what the call waited for.
  // `what`: the request whose reply (or write) the call waited for, for the message.
  absl::Status Break(absl::Status s, absl::string_view what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An answer to an asynchronous request.
  void NoteAsyncReply(const proto::StoreReply& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts `n` more asynchronous requests; reads their answers once too many are
  // outstanding.
  void AddUnackedLocked(int n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status DrainLocked(absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A deadline for what no caller waits for (asynchronous requests and their answers).
  absl::Time AsyncDeadline() const { return absl::Now() + timeouts_.reply_grace; }
  absl::Status WaitFd(short events, absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // DEADLINE_EXCEEDED, without touching the connection, if less than kMinReplyWait is
  // left before `deadline`.
  absl::Status TimeLeftToSend(absl::Time deadline) const;
  absl::Status WriteLocked(absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads the next reply that is not set aside into `*reply`.
  absl::Status ReadReplyLocked(proto::StoreReply* reply, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads one reply; if it is one to set aside, it is (`*set_aside` true) and `*reply`
  // holds nothing of use.
  absl::Status ReadOneLocked(proto::StoreReply* reply, absl::Time deadline, bool* set_aside)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads one frame; `*body` is valid until the next read.
  absl::Status ReadFrameLocked(absl::string_view* body, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int fd_;
  const std::unique_ptr<Arena> arena_;
  const uint64_t client_id_;
  const std::string socket_path_;
  const ConnectionTimeouts timeouts_;

  // Guards who holds mu_: a thread waits here (bounded) for mu_ to be free, and takes
  // mu_ itself only when it is (absl::Mutex has no bounded Lock). Never held while
  // taking mu_; taken under mu_ (Unlock, Break).
  absl::Mutex gate_ ABSL_ACQUIRED_AFTER(mu_);
  bool free_ ABSL_GUARDED_BY(gate_) = true;
  // Calls waiting for mu_, oldest first: the connection goes to them in turn. absl's
  // Mutex lets a thread that just let go take it again before a woken waiter runs, so
  // eight threads looping on 2 s Gets kept a Put out for two minutes.
  std::deque<uint64_t> waiting_ ABSL_GUARDED_BY(gate_);
  uint64_t next_ticket_ ABSL_GUARDED_BY(gate_) = 0;
  absl::Time held_since_ ABSL_GUARDED_BY(gate_);
  absl::Status broken_copy_ ABSL_GUARDED_BY(gate_);  // broken_, readable without mu_
  // Releases that came while mu_ was held (ReleaseAsync): its holder sends them before
  // it lets go, so a release never waits behind a long call.
  std::vector<ObjectId> queued_releases_ ABSL_GUARDED_BY(gate_);

  absl::Mutex mu_;
  proto::StoreRequest req_ ABSL_GUARDED_BY(mu_);
  proto::StoreReply reply_ ABSL_GUARDED_BY(mu_);
  proto::StoreReply drain_reply_ ABSL_GUARDED_BY(mu_);
  uint64_t next_request_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t batch_first_ ABSL_GUARDED_BY(mu_) = 0;
  int batch_size_ ABSL_GUARDED_BY(mu_) = 0;
  const char* batch_what_ ABSL_GUARDED_BY(mu_) = "request";  // the batch's first request
  // Asynchronous requests whose answers are not read yet.
  int unacked_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> broken_flag_{false};  // !broken_.ok(), readable without mu_
  std::string wbuf_ ABSL_GUARDED_BY(mu_);
  FrameDecoder in_ ABSL_GUARDED_BY(mu_);
  // Replies set aside: request ids [set_aside_first_, + set_aside_count_), of which
  // set_aside_arrived_ have come (into set_aside_[rid - first]).
  uint64_t set_aside_first_ ABSL_GUARDED_BY(mu_) = 0;
  int set_aside_count_ ABSL_GUARDED_BY(mu_) = 0;
  int set_aside_arrived_ ABSL_GUARDED_BY(mu_) = 0;
  proto::StoreReply set_aside_[kMaxSetAside] ABSL_GUARDED_BY(mu_);
};

// Holds a Connection's mu() for a scope, if it came by the deadline (check status()).
class ABSL_SCOPED_LOCKABLE ConnectionLock {
 public:
  ConnectionLock(Connection& c, absl::Time deadline) ABSL_EXCLUSIVE_LOCK_FUNCTION(c.mu())
      : c_(c), status_(c.LockUntil(deadline)) {}
  ~ConnectionLock() ABSL_UNLOCK_FUNCTION() {
    if (status_.ok()) c_.Unlock();
  }
  ConnectionLock(const ConnectionLock&) = delete;
  ConnectionLock& operator=(const ConnectionLock&) = delete;
  // OK if the lock is held; DEADLINE_EXCEEDED if it did not come in time.
  const absl::Status& status() const { return status_; }

 private:
  Connection& c_;
  const absl::Status status_;
};

template <typename OnReply>
absl::Status Connection::FinishBatchLocked(absl::Time deadline, OnReply&& on_reply) {
  if (!broken_.ok()) return broken_;
  if (absl::Status s = TimeLeftToSend(deadline); !s.ok()) return s;
  if (absl::Status s = WriteLocked(deadline); !s.ok()) return Break(s, batch_what_);
  for (int left = batch_size_; left > 0;) {
    if (absl::Status s = ReadReplyLocked(&reply_, deadline); !s.ok()) return Break(s, batch_what_);
    const uint64_t rid = reply_.request_id();
    if (rid >= batch_first_ && rid < batch_first_ + static_cast<uint64_t>(batch_size_)) {
      on_reply(static_cast<int>(rid - batch_first_), static_cast<const proto::StoreReply&>(reply_));
      --left;
    } else {
      NoteAsyncReply(reply_);
    }
  }
  return absl::OkStatus();
}

}  // namespace drover::object_store::internal

#endif  // DROVER_OBJECT_STORE_INTERNAL_CONNECTION_H_
