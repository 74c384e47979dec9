#include "object_store/internal/connection.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "object_store/wire_status.h"

namespace drover::object_store::internal {
namespace {

// Asynchronous requests (releases, acknowledged seals) outstanding before the client
// stops to read their answers; until then they are read with later calls' replies.
// Several batches (Client::kMaxBatch): at 256, a Release of 256 refs waited for its
// own answers, and batched 1 KiB put+get pairs ran ~1.5x slower.
constexpr int kMaxUnacked = 4096;
constexpr size_t kReadChunk = 64u << 10;

}  // namespace

absl::StatusOr<std::shared_ptr<Connection>> Connection::Open(const std::string& socket_path,
                                                             absl::Time deadline,
                                                             ConnectionTimeouts timeouts) {
  const absl::Duration left = std::min(kHelloTimeout, deadline - absl::Now());
  if (left <= absl::ZeroDuration()) {
    return absl::DeadlineExceededError(absl::StrCat(
        "no time left to connect to the object store at ", socket_path));
  }
  proto::StoreHello hello;
  DROVER_ASSIGN_OR_RETURN(const StoreGreeting greeting,
                          ConnectAndReceiveHello(socket_path, left, &hello));
  const int fd = greeting.fd;
  absl::StatusOr<std::unique_ptr<Arena>> arena =
      Arena::Map(greeting.arena_fd, hello.arena_capacity());
  close(greeting.arena_fd);  // the Arena keeps its own dup
  if (!arena.ok()) {
    close(fd);
    return arena.status();
  }
  // From now on non-blocking with poll() for deadlines.
  int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  return std::make_shared<Connection>(fd, std::move(*arena), hello.client_id(), socket_path,
                                      timeouts);
}

Connection::Connection(int fd, std::unique_ptr<Arena> arena, uint64_t client_id,
                       std::string socket_path, ConnectionTimeouts timeouts)
    : fd_(fd),
      arena_(std::move(arena)),
      client_id_(client_id),
      socket_path_(std::move(socket_path)),
      timeouts_(timeouts) {}

absl::Status Connection::LockUntil(absl::Time deadline) {
  {
    absl::MutexLock g(&gate_);
    if (!free_ || !waiting_.empty()) {
      // Wait in turn: first come, first served.
      struct Turn {
        Connection* c;
        uint64_t ticket;
        bool Mine() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return c->free_ && c->waiting_.front() == ticket;
        }
      };
      const Turn turn{this, next_ticket_++};
      waiting_.push_back(turn.ticket);
      if (!gate_.AwaitWithDeadline(absl::Condition(&turn, &Turn::Mine), deadline)) {
        waiting_.erase(std::find(waiting_.begin(), waiting_.end(), turn.ticket));
        return absl::DeadlineExceededError(absl::StrCat(
            "the connection to the object store at ", socket_path_,
            " did not come free by the call's deadline: the call holding it has held it for ",
            absl::FormatDuration(
                absl::Trunc(absl::Now() - held_since_, absl::Milliseconds(1))),
            ", and ", waiting_.size(),
            " other call(s) wait for it (a long Get, or a store that stopped answering)"));
      }
      waiting_.pop_front();
    }
    free_ = false;
    held_since_ = absl::Now();
  }
  mu_.Lock();
  return absl::OkStatus();
}

void Connection::Unlock() {
  // Releases queued while this thread held mu_ go out before it lets go; the last
  // check and free_ = true happen under one hold of gate_, so a release that finds the
  // connection held is always sent by someone (this thread, or the next holder).
  std::vector<ObjectId> ids;
  while (true) {
    {
      absl::MutexLock g(&gate_);
      if (queued_releases_.empty()) {
        free_ = true;
        break;
      }
      ids.swap(queued_releases_);
    }
    SendReleasesLocked(ids);
    ids.clear();
  }
  mu_.Unlock();
}

void Connection::ReleaseAsync(absl::Span<const ObjectId> ids) {
  if (ids.empty()) return;
  {
    absl::MutexLock g(&gate_);
    if (!free_) {
      // Held (maybe by a Get that waits for minutes): the holder sends them.
      queued_releases_.insert(queued_releases_.end(), ids.begin(), ids.end());
      return;
    }
    free_ = false;
    held_since_ = absl::Now();
  }
  mu_.Lock();
  SendReleasesLocked(ids);
  Unlock();
}

void Connection::SendReleasesLocked(absl::Span<const ObjectId> ids) {
  // As many per write as a client's batch (client.h kMaxBatch).
  constexpr size_t kReleasesPerWrite = 1024;
  for (size_t i = 0; i < ids.size() && broken_.ok();) {
    BeginBatchLocked();
    for (size_t n = 0; i < ids.size() && n < kReleasesPerWrite; ++i, ++n) {
      NewRequestLocked().mutable_release()->set_id(ids[i]);
      (void)AppendLocked();
    }
    SendBatchAsyncLocked();
  }
}

namespace {

const char* RequestName(const proto::StoreRequest& r) {
  switch (r.op_case()) {
    case proto::StoreRequest::kCreate: return r.create().inline_put() ? "put" : "create";
    case proto::StoreRequest::kSeal: return "seal";
    case proto::StoreRequest::kGet: return "get";
    case proto::StoreRequest::kRelease: return "release";
    case proto::StoreRequest::kDelete: return "delete";
    case proto::StoreRequest::kContains: return "contains";
    case proto::StoreRequest::kStats: return "stats";
    case proto::StoreRequest::kAbort: return "abort";
    case proto::StoreRequest::kLease: return "lease";
    case proto::StoreRequest::kSealLeased: return "leased put's seal";
    case proto::StoreRequest::kReturnLease: return "lease return";
    default: return "request";
  }
}

}  // namespace

Connection::~Connection() {
  {
    absl::MutexLock lock(&mu_);
    // Read the answers to async requests, so none is left unread at close.
    if (broken_.ok() && unacked_ > 0) (void)DrainLocked(absl::Now() + absl::Seconds(1));
  }
  close(fd_);
}

absl::Status Connection::TimeLeftToSend(absl::Time deadline) const {
  if (deadline == absl::InfiniteFuture() || deadline - absl::Now() >= kMinReplyWait) {
    return absl::OkStatus();
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "the call's deadline came before it could ask the object store at ", socket_path_,
      " (it waited for the connection, which other calls held)"));
}

absl::StatusOr<const proto::StoreReply*> Connection::CallLocked(absl::Time deadline) {
  // The deadline first: a call that got the connection at its deadline (from a holder
  // that broke it as it timed out) answers DEADLINE_EXCEEDED, as its wait did.
  DROVER_RETURN_IF_ERROR(TimeLeftToSend(deadline));
  if (!broken_.ok()) return broken_;
  const uint64_t rid = next_request_id_++;
  req_.set_request_id(rid);
  wbuf_.clear();
  DROVER_RETURN_IF_ERROR(AppendFrame(req_, &wbuf_));
  const char* what = RequestName(req_);
  if (absl::Status s = WriteLocked(deadline); !s.ok()) return Break(s, what);
  return AwaitReplyLocked(rid, deadline, what);
}

void Connection::SendAsyncLocked() {
  if (!broken_.ok()) return;
  req_.set_request_id(next_request_id_++);
  wbuf_.clear();
  if (!AppendFrame(req_, &wbuf_).ok()) return;
  if (absl::Status s = WriteLocked(AsyncDeadline()); !s.ok()) {
    (void)Break(s, RequestName(req_));
    return;
  }
  AddUnackedLocked(1);
}

void Connection::BeginBatchLocked() {
  wbuf_.clear();
  batch_first_ = next_request_id_;
  batch_size_ = 0;
}

absl::Status Connection::AppendLocked() {
  if (batch_size_ == 0) batch_what_ = RequestName(req_);
  req_.set_request_id(next_request_id_++);
  ++batch_size_;
  return AppendFrame(req_, &wbuf_);
}

absl::Status Connection::SendBatchLocked(absl::Time deadline) {
  if (!broken_.ok()) return broken_;
  DROVER_RETURN_IF_ERROR(TimeLeftToSend(deadline));
  if (absl::Status s = WriteLocked(deadline); !s.ok()) return Break(s, batch_what_);
  return absl::OkStatus();
}

void Connection::SendBatchAsyncLocked() {
  if (!broken_.ok() || batch_size_ == 0) return;
  if (absl::Status s = WriteLocked(AsyncDeadline()); !s.ok()) {
    (void)Break(s, batch_what_);
    return;
  }
  AddUnackedLocked(batch_size_);
}

absl::StatusOr<const proto::StoreReply*> Connection::AwaitReplyLocked(uint64_t request_id,
                                                                      absl::Time deadline,
                                                                      absl::string_view what) {
  while (true) {
    if (absl::Status s = ReadReplyLocked(&reply_, deadline); !s.ok()) return Break(s, what);
    if (reply_.request_id() == request_id) return &reply_;
    NoteAsyncReply(reply_);
  }
}

void Connection::ExpectAsyncReplyLocked() { AddUnackedLocked(1); }

void Connection::SetAsideLocked(uint64_t first, int count) {
  assert(count > 0 && count <= kMaxSetAside && set_aside_count_ == 0);
  set_aside_first_ = first;
  set_aside_count_ = count;
  set_aside_arrived_ = 0;
}

absl::StatusOr<absl::Span<const proto::StoreReply>> Connection::TakeSetAsideLocked(
    absl::Time deadline) {
  while (set_aside_arrived_ < set_aside_count_) {
    if (!broken_.ok()) return broken_;
    // Asked for already: a healthy store has answered, or is about to. With too little
    // time left to wait for one that may be slow, read only what has come (a reply not
    // read in time would break the connection): else answer by the deadline, and the
    // replies stay set aside for a later call.
    absl::Time read_until = deadline;
    if (deadline != absl::InfiniteFuture() && deadline - absl::Now() < kMinReplyWait) {
      pollfd p{fd_, POLLIN, 0};
      if (in_.buffered() == 0 && poll(&p, 1, 0) <= 0) {
        return absl::DeadlineExceededError(absl::StrCat(
            "the call's deadline came before the object store at ", socket_path_,
            " answered an earlier lease request (the call waited for the connection, which "
            "other calls held)"));
      }
      read_until = absl::Now() + kMinReplyWait;  // it has answered: the rest is a read
    }
    // Anything else that comes meanwhile answers an asynchronous request.
    bool set_aside;
    if (absl::Status s = ReadOneLocked(&drain_reply_, read_until, &set_aside); !s.ok()) {
      return Break(s, "lease");
    }
    if (!set_aside) NoteAsyncReply(drain_reply_);
  }
  const int n = set_aside_count_;
  set_aside_count_ = 0;
  return absl::Span<const proto::StoreReply>(set_aside_, static_cast<size_t>(n));
}

absl::Status Connection::Break(absl::Status s, absl::string_view what) {
  const bool timed_out = s.code() == absl::StatusCode::kDeadlineExceeded;
  if (broken_.ok()) {
    broken_ = absl::UnavailableError(absl::StrCat(
        "connection to the object store at ", socket_path_, " is broken (",
        timed_out ? absl::StrCat("no answer to a ", what, " by its deadline")
                  : std::string(s.message()),
        "); connect again"));
    broken_flag_.store(true, std::memory_order_release);
    absl::MutexLock g(&gate_);
    broken_copy_ = broken_;
  }
  if (!timed_out) {
    shutdown(fd_, SHUT_RDWR);
    return broken_;
  }
  // No answer by the deadline: nothing is sent on this connection again (a late reply
  // would answer the next request), but the socket stays open until the connection is
  // destroyed. Closing it would make a store that is only slow or stopped drop this
  // client's references and unsealed objects while ObjectRefs and MutableObjects still
  // point into that memory, which the store could then hand to other objects.
  return absl::DeadlineExceededError(absl::StrCat(
      "the object store at ", socket_path_, " did not answer a ", what,
      " request by the call's deadline (a stopped or hung store); the connection is "
      "dropped and the next call connects again"));
}

void Connection::NoteAsyncReply(const proto::StoreReply& r) {
  if (unacked_ > 0) --unacked_;
  if (ReplyCode(r) != absl::StatusCode::kOk) {
    DROVER_LOG(WARNING) << "object store: an asynchronous request (release/seal) failed: "
                        << r.message();
  }
}

void Connection::AddUnackedLocked(int n) {
  unacked_ += n;
  if (unacked_ >= kMaxUnacked) (void)DrainLocked(AsyncDeadline());
}

absl::Status Connection::DrainLocked(absl::Time deadline) {
  while (unacked_ > 0) {
    if (absl::Status s = ReadReplyLocked(&drain_reply_, deadline); !s.ok()) {
      return Break(s, "release or seal (answered later)");
    }
    NoteAsyncReply(drain_reply_);
  }
  return absl::OkStatus();
}

absl::Status Connection::WaitFd(short events, absl::Time deadline) {
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

absl::Status Connection::WriteLocked(absl::Time deadline) {
  size_t done = 0;
  while (done < wbuf_.size()) {
    ssize_t n = send(fd_, wbuf_.data() + done, wbuf_.size() - done, MSG_NOSIGNAL);
    if (n >= 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      DROVER_RETURN_IF_ERROR(WaitFd(POLLOUT, deadline));
      continue;
    }
    return absl::UnavailableError(absl::StrCat("write: ", strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status Connection::ReadReplyLocked(proto::StoreReply* reply, absl::Time deadline) {
  bool set_aside = true;
  while (set_aside) DROVER_RETURN_IF_ERROR(ReadOneLocked(reply, deadline, &set_aside));
  return absl::OkStatus();
}

absl::Status Connection::ReadOneLocked(proto::StoreReply* reply, absl::Time deadline,
                                       bool* set_aside) {
  absl::string_view body;
  DROVER_RETURN_IF_ERROR(ReadFrameLocked(&body, deadline));
  if (!reply->ParseFromArray(body.data(), static_cast<int>(body.size()))) {
    return absl::InternalError("a reply from the object store does not parse");
  }
  const uint64_t rid = reply->request_id();
  *set_aside = set_aside_count_ > 0 && rid >= set_aside_first_ &&
               rid < set_aside_first_ + static_cast<uint64_t>(set_aside_count_);
  if (*set_aside) {
    set_aside_[rid - set_aside_first_].Swap(reply);
    ++set_aside_arrived_;
  }
  return absl::OkStatus();
}

absl::Status Connection::ReadFrameLocked(absl::string_view* body, absl::Time deadline) {
  absl::Time spin_until = absl::InfinitePast();
  while (true) {
    DROVER_ASSIGN_OR_RETURN(const bool got, in_.Next(body));
    if (got) return absl::OkStatus();
    char* p = in_.PrepareWrite(kReadChunk);
    ssize_t n = recv(fd_, p, kReadChunk, 0);
    if (n > 0) {
      in_.Commit(static_cast<size_t>(n));
      continue;
    }
    if (n == 0) return absl::UnavailableError("the object store closed the connection");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      // Spin briefly before sleeping in poll (kSpin).
      absl::Time now = absl::Now();
      if (spin_until == absl::InfinitePast()) spin_until = now + kSpin;
      if (now < spin_until) {
        // Yield, not pause: the store may be runnable on this very CPU (a sync
        // wake-up put it here), and then only a yield lets it answer before the spin
        // ends. With the CPU to itself, a yield returns at once.
        sched_yield();
        continue;
      }
      DROVER_RETURN_IF_ERROR(WaitFd(POLLIN, deadline));
      spin_until = absl::Now() + kSpin;
      continue;
    }
    return absl::UnavailableError(absl::StrCat("read: ", strerror(errno)));
  }
}

}  // namespace drover::object_store::internal
