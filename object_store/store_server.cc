#include "object_store/store_server.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/files.h"
#include "common/log.h"
#include "object_store/allocator.h"
#include "object_store/arena.h"
#include "object_store/object_table.h"
#include "object_store/protocol.h"
#include "proto/object_store.pb.h"

namespace drover::object_store {
namespace {

constexpr uint64_t kListenKey = ~0ull;
constexpr uint64_t kWakeKey = ~0ull - 1;
constexpr size_t kMaxIdBytes = 64;
constexpr uint64_t kMaxInlinePut = 64u << 10;
constexpr int kMaxIdsPerGet = 4096;
constexpr size_t kMaxPendingGetsPerClient = 1024;
constexpr size_t kMaxQueuedReplyBytes = 64u << 20;
constexpr size_t kReadChunk = 64u << 10;
// Per wake-up, so that one busy client cannot starve the others.
constexpr size_t kMaxReadPerWakeup = 1u << 20;

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", strerror(errno)));
}

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

void ToProto(const ObjectLocation& loc, proto::ObjectLocation* out) {
  out->set_offset(loc.offset);
  out->set_data_offset(loc.data_offset);
  out->set_data_size(loc.data_size);
  out->set_metadata_size(loc.metadata_size);
}

void SetStatus(const absl::Status& s, proto::StoreReply* reply) {
  reply->set_code(static_cast<int32_t>(s.code()));
  if (!s.ok()) reply->set_message(std::string(s.message()));
}

// Prepares the directory of the socket and removes a stale socket file.
absl::Status PrepareSocketPath(const std::string& path, sockaddr_un* addr) {
  if (path.empty() || path.size() >= sizeof(addr->sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("object store socket path '", path, "' must be 1..",
                     sizeof(addr->sun_path) - 1, " bytes (Unix socket limit); got ",
                     path.size()));
  }
  memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  memcpy(addr->sun_path, path.data(), path.size());

  auto slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    std::string dir = path.substr(0, slash);
    struct stat st;
    if (stat(dir.c_str(), &st) != 0) {
      if (absl::Status s = MakeDirs(dir, 0700); !s.ok()) return s;
    } else if (!S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat("object store socket directory '", dir, "' is not a directory"));
    } else if ((st.st_mode & 022) != 0 && !(st.st_mode & S_ISVTX)) {
      DROVER_LOG(WARNING) << "object store socket directory " << dir
                          << " is writable by others; prefer a 0700 directory";
    }
  }

  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "'", path, "' exists and is not a socket; choose another --socket path"));
    }
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe < 0) return Errno("socket");
    int rc = connect(probe, reinterpret_cast<sockaddr*>(addr), sizeof(*addr));
    int err = errno;
    close(probe);
    if (rc == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "an object store already listens on ", path, "; stop it or choose another path"));
    }
    if (err != ECONNREFUSED && err != ENOENT) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot probe existing socket ", path, ": ", strerror(err)));
    }
    DROVER_LOG(INFO) << "removing stale object store socket " << path;
    if (unlink(path.c_str()) != 0 && errno != ENOENT) {
      return Errno(absl::StrCat("unlink stale socket ", path));
    }
  }
  return absl::OkStatus();
}

}  // namespace

class StoreServer::Loop {
 public:
  Loop(std::unique_ptr<Arena> arena, const ServerOptions& options)
      : arena_(std::move(arena)),
        stay_awake_(options.stay_awake),
        ready_wait_(options.ready_wait),
        table_(TableOptions{arena_->capacity(), options.spill_dir, options.spill_capacity},
               arena_.get()) {
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

  ~Loop() {
    for (auto& [id, conn] : conns_) close(conn.fd);
    if (listen_fd_ >= 0) close(listen_fd_);
    if (wake_fd_ >= 0) close(wake_fd_);
    if (epoll_fd_ >= 0) close(epoll_fd_);
    if (spare_fd_ >= 0) close(spare_fd_);
  }

  uint64_t capacity() const { return arena_->capacity(); }
  // True once Listen created the socket file (so it is ours to remove).
  bool bound() const { return bound_; }

  absl::Status Listen(const std::string& path) {
    sockaddr_un addr;
    if (absl::Status s = PrepareSocketPath(path, &addr); !s.ok()) return s;
    listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0) return Errno("socket");
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      return Errno(absl::StrCat("bind ", path));
    }
    bound_ = true;
    // Connecting needs write permission on the file: owner only.
    if (chmod(path.c_str(), 0600) != 0) return Errno(absl::StrCat("chmod ", path));
    if (listen(listen_fd_, 128) != 0) return Errno("listen");
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd_ < 0) return Errno("epoll_create1");
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0) return Errno("eventfd");
    spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (absl::Status s = Watch(listen_fd_, kListenKey, EPOLLIN, EPOLL_CTL_ADD); !s.ok()) return s;
    return Watch(wake_fd_, kWakeKey, EPOLLIN, EPOLL_CTL_ADD);
  }

  void StartThread() { thread_ = std::thread([this] { Run(); }); }

  void StopAndJoin() {
    uint64_t one = 1;
    ssize_t n = write(wake_fd_, &one, sizeof(one));
    (void)n;
    if (thread_.joinable()) thread_.join();
  }

 private:
  struct Conn {
    ClientId id = 0;
    int fd = -1;
    FrameDecoder in;
    std::string out;
    size_t out_start = 0;
    bool want_write = false;
    bool batching = false;  // inside OnReadable: replies are flushed once at its end
    bool closing = false;
    std::vector<uint64_t> pending_gets;  // sequence numbers
    uint64_t subscribe_request_id = 0;   // events carry it (when subscribed)
  };

  struct PendingGet {
    ClientId client = 0;
    proto::StoreReply reply;     // results filled as objects arrive
    std::vector<char> waiting;   // per result: still waiting for a seal
    size_t remaining = 0;
    absl::Time deadline = absl::InfiniteFuture();
    std::multimap<absl::Time, uint64_t>::iterator deadline_it;
  };

  absl::Status Watch(int fd, uint64_t key, uint32_t events, int op) {
    epoll_event ev;
    memset(&ev, 0, sizeof(ev));
    ev.events = events;
    ev.data.u64 = key;
    if (epoll_ctl(epoll_fd_, op, fd, &ev) != 0) return Errno("epoll_ctl");
    return absl::OkStatus();
  }

  void Run() {
    constexpr int kMaxEvents = 64;
    epoll_event events[kMaxEvents];
    while (!stopping_) {
      int timeout_ms = -1;
      if (!deadlines_.empty()) {
        absl::Duration left = deadlines_.begin()->first - absl::Now();
        timeout_ms = left <= absl::ZeroDuration()
                         ? 0
                         : static_cast<int>(std::min<int64_t>(
                               absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))),
                               1 << 30));
      }
      int n = WaitEvents(events, kMaxEvents, timeout_ms);
      if (n < 0) {
        if (errno == EINTR) continue;
        DROVER_LOG(ERROR) << "object store: epoll_wait failed: " << strerror(errno);
        break;
      }
      for (int i = 0; i < n; ++i) {
        uint64_t key = events[i].data.u64;
        if (key == kWakeKey) {
          stopping_ = true;
        } else if (key == kListenKey) {
          AcceptAll();
        } else {
          auto it = conns_.find(key);
          if (it == conns_.end()) continue;
          Conn& c = it->second;
          if (events[i].events & EPOLLOUT) Flush(c);
          if (!c.closing && (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP))) {
            OnReadable(c);
          }
        }
      }
      ExpireGets();
      CloseMarked();
    }
  }

  // epoll_wait, except within the stay-awake window after a request: then it polls,
  // yielding the CPU between polls, until an event comes, the window closes or a
  // deadline is due. A short stall (a yield kept this thread off its CPU for over
  // 20 µs: a timer tick, a task passing through, or the client spinning on this CPU)
  // moves the poller to another CPU (MoveOffThisCpu) and polling goes on. A stall of a
  // millisecond or more during which another task of this machine ran instead (an
  // involuntary switch) means a task that wants this CPU for whole time slices: a
  // runnable poller gets the CPU back only when the scheduler next picks it, while a
  // sleeper woken by a request preempts at once, so the store stops polling (Starved).
  // A long stall without such a switch is the hypervisor's (steal) and changes nothing.
  int WaitEvents(epoll_event* events, int max_events, int timeout_ms) {
    constexpr absl::Duration kContended = absl::Microseconds(20);
    constexpr absl::Duration kStarved = absl::Milliseconds(1);
    absl::Time last = absl::Now();
    // Once per wait, not per request: a batch of requests opens one window.
    if (stay_awake_until_ != absl::InfinitePast()) switches_ = InvoluntarySwitches();
    while (stay_awake_until_ != absl::InfinitePast() && timeout_ms != 0) {
      const absl::Time now = absl::Now();
      const absl::Duration stall = now - last;
      // A long stall with no switch to another task of this machine is the hypervisor
      // running another guest on our virtual CPU (steal): polling is not at fault.
      const bool starved = stall >= kStarved && InvoluntarySwitches() > switches_;
      if (now >= stay_awake_until_ || starved) {
        if (starved) {
          Starved(now);
        } else {
          backoff_ = kMinBackoff;  // a whole window without starving
        }
        stay_awake_until_ = absl::InfinitePast();
        break;
      }
      if (stall > kContended) {
        MoveOffThisCpu(now);
        switches_ = InvoluntarySwitches();  // a later long stall is judged on its own
      }
      last = absl::Now();
      int n = epoll_wait(epoll_fd_, events, max_events, 0);
      if (n != 0) return n;
      if (!deadlines_.empty() && deadlines_.begin()->first <= now) return 0;
      sched_yield();
    }
    return epoll_wait(epoll_fd_, events, max_events, timeout_ms);
  }

  // Polling starved: a busy task shares this CPU (and moving did not help, or every CPU
  // is busy). Under such load a polling store answered in ~4 ms (a time slice) where a
  // sleeping one answers in ~20 µs, so it stops polling for a while: 10 ms, doubling up
  // to 50 ms while polling keeps starving, back to 10 ms after a window that does not.
  // (Up to 1 s was tried: a client's own burst of work, such as a large put copying on
  // every CPU, then left the store asleep through the next second of small requests.)
  void Starved(absl::Time now) {
    polling_pays_ = false;
    resume_polling_ = now + backoff_;
    backoff_ = std::min(backoff_ * 2, kMaxBackoff);
  }
  static constexpr absl::Duration kMinBackoff = absl::Milliseconds(10);
  static constexpr absl::Duration kMaxBackoff = absl::Milliseconds(50);

  // The polling thread found its CPU contended: moves to another allowed CPU (by
  // narrowing its affinity for a moment, then restoring it) instead of going to sleep,
  // at most once per millisecond. Returns whether it moved.
  //
  // Why: a client's request over the Unix socket wakes a sleeping store with a "sync"
  // wake-up, which places it on the client's CPU (the kernel expects the sender to sleep
  // next). A client that spins for its seal's acknowledgement does not, and the two
  // then take turns on one CPU while the other idles: seen as a whole benchmark run of
  // 1 MiB puts at 0.55-0.6 of memcpy instead of 0.87 (both on one CPU, every stay-awake
  // window cut short by the contention). Once moved, the store keeps polling on its own
  // CPU, so no wake-up pulls it back while requests keep coming.
  bool MoveOffThisCpu(absl::Time now) {
    if (now - last_move_ < absl::Milliseconds(1)) return false;
    last_move_ = now;
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return false;
    const int here = sched_getcpu();
    if (here < 0 || !CPU_ISSET(here, &allowed) || CPU_COUNT(&allowed) < 2) return false;
    cpu_set_t others = allowed;
    CPU_CLR(here, &others);
    if (sched_setaffinity(0, sizeof(others), &others) != 0) return false;
    sched_setaffinity(0, sizeof(allowed), &allowed);
    return true;
  }

  void AcceptAll() {
    while (true) {
      int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if ((errno == EMFILE || errno == ENFILE) && spare_fd_ >= 0) {
          // Out of descriptors: accept and drop the connection so that the listening
          // socket does not stay readable (and the loop does not spin).
          DROVER_LOG(WARNING) << "object store: out of file descriptors; refusing a client";
          close(spare_fd_);
          int drop = accept(listen_fd_, nullptr, nullptr);
          if (drop >= 0) close(drop);
          spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
          continue;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          DROVER_LOG(WARNING) << "object store: accept failed: " << strerror(errno);
        }
        return;
      }
      ClientId id = next_client_id_++;
      proto::StoreHello hello;
      hello.set_arena_capacity(arena_->capacity());
      hello.set_client_id(id);
      std::string frame;
      absl::Status s = AppendFrame(hello, &frame);
      if (s.ok()) s = SendFd(fd, arena_->fd(), frame);
      if (s.ok()) s = Watch(fd, id, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_ADD);
      if (!s.ok()) {
        DROVER_LOG(WARNING) << "object store: dropping new client " << id << ": " << s;
        close(fd);
        continue;
      }
      Conn& c = conns_[id];
      c.id = id;
      c.fd = fd;
      DROVER_LOG(DEBUG) << "object store: client " << id << " connected";
    }
  }

  void OnReadable(Conn& c) {
    // Replies to the frames of one read are sent with one send() at the end, not one
    // each: a pipelining client (PutMany, batched releases) pays one syscall per batch.
    c.batching = true;
    struct FlushAtEnd {
      Loop* self;
      Conn& c;
      ~FlushAtEnd() {
        c.batching = false;
        if (!c.closing && !c.want_write && c.out_start < c.out.size()) self->Flush(c);
      }
    } flush_at_end{this, c};
    size_t total = 0;
    while (!c.closing && total < kMaxReadPerWakeup) {
      char* p = c.in.PrepareWrite(kReadChunk);
      ssize_t n = read(c.fd, p, kReadChunk);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        MarkClosing(c, absl::StrCat("read failed: ", strerror(errno)));
        return;
      }
      if (n == 0) {
        MarkClosing(c, "disconnected");
        return;
      }
      c.in.Commit(static_cast<size_t>(n));
      total += static_cast<size_t>(n);
      absl::string_view body;
      while (!c.closing) {
        absl::StatusOr<bool> got = c.in.Next(&body);
        if (!got.ok()) {
          MarkClosing(c, std::string(got.status().message()));
          return;
        }
        if (!*got) break;
        HandleFrame(c, body);
        ProcessSealed();
        if (flush_now_) {
          // A leased put's reply goes out before the store turns to the frames behind
          // it (the client's next lease): the put waits only for its own seal.
          flush_now_ = false;
          if (c.in.buffered() > 0 && !c.closing && !c.want_write) Flush(c);
        }
      }
      // A short read emptied the socket: no second read just to see EAGAIN (a syscall
      // on every request's path). Bytes arriving meanwhile keep the socket readable,
      // and the level-triggered epoll reports it again.
      if (static_cast<size_t>(n) < kReadChunk) return;
    }
  }

  void HandleFrame(Conn& c, absl::string_view body) {
    reply_.Clear();
    if (!request_.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
      // The framing is intact, so the stream can go on; the request id is unknown.
      reply_.set_request_id(0);
      SetStatus(absl::InvalidArgumentError(absl::StrCat(
                    "object store: a frame of ", body.size(),
                    " bytes does not parse as a StoreRequest")),
                &reply_);
      SendReply(c, reply_);
      return;
    }
    reply_.set_request_id(request_.request_id());
    StayAwake();
    absl::Status s;
    switch (request_.op_case()) {
      case proto::StoreRequest::kCreate: {
        const auto& r = request_.create();
        s = CheckId(r.id());
        if (s.ok() && (r.data_size() > arena_->capacity() ||
                       r.metadata().size() > arena_->capacity() - r.data_size())) {
          s = absl::ResourceExhaustedError(absl::StrCat(
              "object ", Printable(r.id()), ": asked for ", r.data_size(), " data bytes + ",
              r.metadata().size(), " metadata bytes, more than the whole arena (",
              arena_->capacity(), " bytes); use a larger --capacity or a smaller object"));
        }
        if (s.ok() && (r.inline_put() ? (r.data().size() != r.data_size() ||
                                          r.data_size() > kMaxInlinePut)
                                       : !r.data().empty())) {
          s = absl::InvalidArgumentError(absl::StrCat(
              "object ", Printable(r.id()), ": an inline put carries exactly data_size (",
              r.data_size(), ") bytes, at most ", kMaxInlinePut, "; got ", r.data().size(),
              " bytes", r.inline_put() ? "" : " without inline_put"));
        }
        if (s.ok()) {
          absl::StatusOr<ObjectLocation> loc =
              table_.Create(c.id, r.id(), r.data_size(), r.metadata(), !r.secondary());
          if (loc.ok() && r.inline_put()) s = FinishInlinePut(c.id, r.id(), *loc, r.data());
          if (!loc.ok()) {
            s = loc.status();
          } else if (s.ok()) {
            ToProto(*loc, reply_.mutable_create()->mutable_location());
          }
        }
        break;
      }
      case proto::StoreRequest::kSeal:
        s = CheckId(request_.seal().id());
        if (s.ok()) s = table_.Seal(c.id, request_.seal().id());
        break;
      case proto::StoreRequest::kGet:
        HandleGet(c);
        return;
      case proto::StoreRequest::kRelease:
        s = CheckId(request_.release().id());
        if (s.ok()) s = table_.Release(c.id, request_.release().id());
        break;
      case proto::StoreRequest::kDelete:
        s = CheckId(request_.delete_().id());
        if (s.ok()) {
          absl::StatusOr<ObjectInfo> info = table_.Info(request_.delete_().id());
          s = table_.Delete(request_.delete_().id());
          if (s.ok() && info.ok() && !subscribers_.empty()) {
            Publish(proto::StoreEvent::REMOVED, *info);
          }
        }
        break;
      case proto::StoreRequest::kContains:
        s = CheckId(request_.contains().id());
        if (s.ok()) reply_.mutable_contains()->set_contains(table_.Contains(request_.contains().id()));
        break;
      case proto::StoreRequest::kStats:
        FillStats(reply_.mutable_stats());
        break;
      case proto::StoreRequest::kAbort:
        s = CheckId(request_.abort().id());
        if (s.ok()) s = table_.Abort(c.id, request_.abort().id());
        break;
      case proto::StoreRequest::kSubscribe:
        // The snapshot goes out before the reply, so the reply marks its end.
        c.subscribe_request_id = request_.request_id();
        if (request_.subscribe().snapshot()) {
          for (const ObjectInfo& info : table_.List()) {
            SendEvent(c, proto::StoreEvent::SEALED, info);
          }
        }
        subscribers_.insert(c.id);
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
      case proto::StoreRequest::kSealLeased: {
        const auto& r = request_.seal_leased();
        // The ready slot is checked first: the outcome is acknowledged there too.
        const bool overlapped = r.ready_value() != 0;
        if (overlapped) s = CheckReadySlot(c, r);
        const bool slot_ok = overlapped && s.ok();
        if (s.ok()) s = CheckId(r.id());
        if (slot_ok && s.ok()) s = AwaitReady(r);
        if (s.ok()) {
          s = table_.SealLeased(c.id, r.id(), r.offset(), r.data_size(), r.metadata_size())
                  .status();
        }
        if (slot_ok) {
          // SealLeasedRequest.ready_offset: the outcome in the word after the ready word.
          reinterpret_cast<std::atomic<uint64_t>*>(arena_->base() + r.ready_offset() + 8)
              ->store(s.ok() ? r.ready_value() : r.ready_value() | kSealAckFailed,
                      std::memory_order_release);
        }
        flush_now_ = true;
        break;
      }
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
    SetStatus(s, &reply_);
    SendReply(c, reply_);
  }

  // A client that just made a request is likely to make another soon
  // (ServerOptions::stay_awake): poll for a while, unless polling starved lately.
  void StayAwake() {
    if (stay_awake_ <= absl::ZeroDuration()) return;
    const absl::Time now = absl::Now();
    if (!polling_pays_ && now >= resume_polling_) polling_pays_ = true;
    if (polling_pays_) stay_awake_until_ = now + stay_awake_;
  }

  // This thread's involuntary context switches so far: it was runnable and another
  // task of this machine ran instead (a yield that let one run counts too).
  static uint64_t InvoluntarySwitches() {
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) != 0) return 0;
    return static_cast<uint64_t>(ru.ru_nivcsw);
  }

  // An overlapped seal's ready slot (SealLeasedRequest.ready_offset): a 64-aligned
  // 64-byte range the client leased, outside the object.
  absl::Status CheckReadySlot(const Conn& c, const proto::SealLeasedRequest& r) {
    const uint64_t off = r.ready_offset();
    const uint64_t cap = arena_->capacity();
    if (off % 64 != 0 || off > cap - 64 || !table_.HoldsLease(c.id, off, 64)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "overlapped seal: the ready word at ", off, " is not in a 64-aligned 64-byte range this client leased"));
    }
    if (r.data_size() <= cap && r.metadata_size() <= cap) {
      const uint64_t data_offset =
          r.metadata_size() == 0 ? 0 : Allocator::RoundUp(r.metadata_size());
      const uint64_t end = r.offset() + Allocator::RoundUp(data_offset + r.data_size());
      if (off + 64 > r.offset() && off < end) {
        return absl::InvalidArgumentError(absl::StrCat(
            "overlapped seal: the ready word at ", off, " lies inside the object"));
      }
    }
    return absl::OkStatus();
  }

  // An overlapped seal (SealLeasedRequest.ready_value): waits until the client has
  // stored ready_value at ready_offset (checked by CheckReadySlot), i.e. finished
  // writing the object. The client sends the seal while it copies the last part
  // (~15 µs), so the wait is short; it spins, then yields the CPU (the writer may need
  // it), and gives up after ServerOptions::ready_wait (1 ms) with UNAVAILABLE (the
  // client then seals again) so no client can stall the store.
  absl::Status AwaitReady(const proto::SealLeasedRequest& r) {
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

  void SendEvent(Conn& c, proto::StoreEvent::Kind kind, const ObjectInfo& info) {
    event_.Clear();
    event_.set_request_id(c.subscribe_request_id);
    proto::StoreEvent* e = event_.mutable_event();
    e->set_kind(kind);
    e->set_id(info.id);
    e->set_data_size(info.data_size);
    e->set_primary(info.primary);
    SendReply(c, event_);
  }

  // Tells every subscriber. Runs inside table callbacks too: it touches only the
  // connections, never the table.
  void Publish(proto::StoreEvent::Kind kind, const ObjectInfo& info) {
    for (ClientId id : subscribers_) {
      auto it = conns_.find(id);
      if (it != conns_.end()) SendEvent(it->second, kind, info);
    }
  }

  // Copies an inline put's bytes into its new object, seals it and drops the creator's
  // reference; aborts the object if that fails.
  absl::Status FinishInlinePut(ClientId client, const ObjectId& id, const ObjectLocation& loc,
                               const std::string& data) {
    if (!data.empty()) memcpy(arena_->At(loc.offset + loc.data_offset), data.data(), data.size());
    absl::Status s = table_.Seal(client, id);
    if (s.ok()) s = table_.Release(client, id);
    if (!s.ok()) (void)table_.Abort(client, id);
    return s;
  }

  void FillStats(proto::StoreStats* out) {
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
    out->set_clients(conns_.size());
    out->set_pending_gets(pending_.size());
    out->set_leased_bytes(t.leased_bytes);
    out->set_leases(t.lease_pieces);
  }

  // Fills result `i` of `get` from the table. Returns true if it is settled (found or
  // failed for good), false if the object is absent or unsealed and may still come.
  bool TryGet(ClientId client, const std::string& id, proto::GetResult* result) {
    absl::StatusOr<ObjectLocation> loc = table_.Get(client, id);
    if (loc.ok()) {
      absl::StatusOr<std::string> meta = table_.Metadata(id);
      result->set_found(true);
      result->set_code(0);
      ToProto(*loc, result->mutable_location());
      if (meta.ok()) result->set_metadata(std::move(*meta));
      return true;
    }
    if (loc.status().code() == absl::StatusCode::kNotFound ||
        loc.status().code() == absl::StatusCode::kUnavailable) {
      result->set_code(static_cast<int32_t>(loc.status().code()));
      result->set_message(std::string(loc.status().message()));
      return false;
    }
    result->set_code(static_cast<int32_t>(loc.status().code()));
    result->set_message(std::string(loc.status().message()));
    return true;
  }

  void HandleGet(Conn& c) {
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
    if (bad.ok() && r.timeout_ms() != 0 && c.pending_gets.size() >= kMaxPendingGetsPerClient) {
      bad = absl::ResourceExhaustedError(absl::StrCat(
          "object store: client ", c.id, " already has ", c.pending_gets.size(),
          " waiting Gets; wait for them before sending more"));
    }
    if (!bad.ok()) {
      SetStatus(bad, &reply_);
      SendReply(c, reply_);
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
      SetStatus(absl::OkStatus(), &reply_);
      SendReply(c, reply_);
      return;
    }
    // Park it until the missing objects are sealed or the deadline passes.
    uint64_t seq = next_get_seq_++;
    PendingGet& p = pending_[seq];
    p.client = c.id;
    p.reply.Swap(&reply_);
    p.waiting = std::move(waiting);
    p.remaining = remaining;
    if (r.timeout_ms() > 0) p.deadline = absl::Now() + absl::Milliseconds(r.timeout_ms());
    p.deadline_it = p.deadline == absl::InfiniteFuture() ? deadlines_.end()
                                                          : deadlines_.emplace(p.deadline, seq);
    for (size_t i = 0; i < p.waiting.size(); ++i) {
      if (p.waiting[i]) waiters_[p.reply.get().results(i).id()].push_back(seq);
    }
    c.pending_gets.push_back(seq);
  }

  static void NotAvailable(proto::GetResult* result, bool timed_out) {
    bool unsealed = result->code() == static_cast<int32_t>(absl::StatusCode::kUnavailable);
    std::string what = absl::StrCat("object ", Printable(result->id()),
                                     unsealed ? " exists but is not sealed" : " is not in the store");
    if (timed_out) {
      result->set_code(static_cast<int32_t>(absl::StatusCode::kDeadlineExceeded));
      result->set_message(absl::StrCat(what, " and the Get's timeout passed"));
    } else {
      result->set_code(static_cast<int32_t>(unsealed ? absl::StatusCode::kUnavailable
                                                     : absl::StatusCode::kNotFound));
      result->set_message(what);
    }
  }

  // Wakes the Gets waiting for objects sealed since the last call.
  void ProcessSealed() {
    while (!sealed_.empty()) {
      std::vector<ObjectId> ids;
      ids.swap(sealed_);
      for (const ObjectId& id : ids) {
        auto w = waiters_.find(id);
        if (w == waiters_.end()) continue;
        std::vector<uint64_t> seqs = std::move(w->second);
        waiters_.erase(w);
        for (uint64_t seq : seqs) {
          auto it = pending_.find(seq);
          if (it == pending_.end()) continue;
          PendingGet& p = it->second;
          auto* results = p.reply.mutable_get()->mutable_results();
          for (int i = 0; i < results->size(); ++i) {
            if (!p.waiting[i] || results->Get(i).id() != id) continue;
            if (TryGet(p.client, id, results->Mutable(i))) {
              p.waiting[i] = 0;
              --p.remaining;
            }
          }
          if (p.remaining == 0) {
            FinishGet(seq, /*timed_out=*/false);
          } else {
            // Still waiting for this id in some slot (e.g. deleted again before we got it).
            for (int i = 0; i < results->size(); ++i) {
              if (p.waiting[i] && results->Get(i).id() == id) {
                waiters_[id].push_back(seq);
                break;
              }
            }
          }
        }
      }
    }
  }

  void ExpireGets() {
    absl::Time now = absl::Now();
    while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
      FinishGet(deadlines_.begin()->second, /*timed_out=*/true);
    }
  }

  // Unregisters the pending Get `seq`; sends its reply if `send`.
  void RemoveGet(uint64_t seq, PendingGet& p) {
    const auto& results = p.reply.get().results();
    for (int i = 0; i < results.size(); ++i) {
      if (!p.waiting[i]) continue;
      auto w = waiters_.find(results.Get(i).id());
      if (w == waiters_.end()) continue;
      auto& v = w->second;
      v.erase(std::remove(v.begin(), v.end(), seq), v.end());
      if (v.empty()) waiters_.erase(w);
    }
    if (p.deadline_it != deadlines_.end()) deadlines_.erase(p.deadline_it);
    p.deadline_it = deadlines_.end();
  }

  void FinishGet(uint64_t seq, bool timed_out) {
    auto it = pending_.find(seq);
    if (it == pending_.end()) return;
    PendingGet& p = it->second;
    RemoveGet(seq, p);
    auto* results = p.reply.mutable_get()->mutable_results();
    for (int i = 0; i < results->size(); ++i) {
      if (p.waiting[i]) NotAvailable(results->Mutable(i), timed_out);
    }
    auto c = conns_.find(p.client);
    if (c != conns_.end()) {
      auto& v = c->second.pending_gets;
      v.erase(std::remove(v.begin(), v.end(), seq), v.end());
      if (!c->second.closing) SendReply(c->second, p.reply);
    }
    pending_.erase(it);
  }

  void SendReply(Conn& c, const proto::StoreReply& reply) {
    if (c.closing) return;
    absl::Status s = AppendFrame(reply, &c.out);
    if (!s.ok()) {
      // Only a Get reply with huge metadata can get here: answer with an error instead.
      proto::StoreReply err;
      err.set_request_id(reply.request_id());
      SetStatus(absl::ResourceExhaustedError(absl::StrCat(
                    "object store: the reply is larger than the frame limit of ",
                    kMaxFrameSize, " bytes; get fewer objects per request")),
                &err);
      if (!AppendFrame(err, &c.out).ok()) {
        MarkClosing(c, "cannot encode a reply");
        return;
      }
    }
    if (!c.want_write && !c.batching) Flush(c);
    if (c.out.size() - c.out_start > kMaxQueuedReplyBytes) {
      MarkClosing(c, "client does not read its replies (64 MiB queued)");
    }
  }

  void Flush(Conn& c) {
    while (c.out_start < c.out.size()) {
      ssize_t n = send(c.fd, c.out.data() + c.out_start, c.out.size() - c.out_start,
                       MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          if (!c.want_write) {
            c.want_write = true;
            (void)Watch(c.fd, c.id, EPOLLIN | EPOLLRDHUP | EPOLLOUT, EPOLL_CTL_MOD);
          }
          return;
        }
        MarkClosing(c, absl::StrCat("write failed: ", strerror(errno)));
        return;
      }
      c.out_start += static_cast<size_t>(n);
    }
    c.out.clear();
    c.out_start = 0;
    if (c.want_write) {
      c.want_write = false;
      (void)Watch(c.fd, c.id, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_MOD);
    }
  }

  void MarkClosing(Conn& c, const std::string& why) {
    if (c.closing) return;
    c.closing = true;
    close_reasons_.emplace_back(c.id, why);
  }

  void CloseMarked() {
    for (auto& [id, why] : close_reasons_) {
      auto it = conns_.find(id);
      if (it == conns_.end()) continue;
      Conn& c = it->second;
      for (uint64_t seq : std::vector<uint64_t>(c.pending_gets)) {
        auto p = pending_.find(seq);
        if (p == pending_.end()) continue;
        RemoveGet(seq, p->second);
        pending_.erase(p);
      }
      subscribers_.erase(id);
      epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
      close(c.fd);
      std::vector<ObjectId> aborted = table_.DisconnectClient(id);
      if (!aborted.empty() || why != "disconnected") {
        DROVER_LOG(INFO) << "object store: client " << id << " closed (" << why << "); aborted "
                         << aborted.size() << " unsealed object(s)";
      }
      conns_.erase(it);
    }
    close_reasons_.clear();
    // Disconnects release references; nothing else to wake (Gets wait only for seals).
    ProcessSealed();
  }

  std::unique_ptr<Arena> arena_;
  const absl::Duration stay_awake_;  // ServerOptions::stay_awake
  const absl::Duration ready_wait_;  // ServerOptions::ready_wait
  ObjectTable table_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  int spare_fd_ = -1;
  bool stopping_ = false;
  bool bound_ = false;
  std::thread thread_;

  ClientId next_client_id_ = 1;
  std::unordered_map<ClientId, Conn> conns_;
  std::vector<std::pair<ClientId, std::string>> close_reasons_;

  uint64_t next_get_seq_ = 1;
  std::unordered_map<uint64_t, PendingGet> pending_;
  std::multimap<absl::Time, uint64_t> deadlines_;
  absl::flat_hash_map<ObjectId, std::vector<uint64_t>> waiters_;
  std::vector<ObjectId> sealed_;  // filled by the table's on_sealed callback
  absl::flat_hash_set<ClientId> subscribers_;  // connections that sent Subscribe

  // Reused for every request, so the hot path allocates little.
  proto::StoreRequest request_;
  proto::StoreReply reply_;
  proto::StoreReply event_;  // not reply_: events go out while a reply is being built
  absl::Time stay_awake_until_ = absl::InfinitePast();  // InfinitePast: sleeps when idle
  absl::Time last_move_ = absl::InfinitePast();  // MoveOffThisCpu
  bool polling_pays_ = true;  // false for a while after polling starved (Starved)
  absl::Time resume_polling_ = absl::InfinitePast();
  absl::Duration backoff_ = kMinBackoff;
  uint64_t switches_ = 0;  // InvoluntarySwitches() when polling began, or at its last stall
  bool flush_now_ = false;  // set by a leased put: send its reply before the next frame
};

StoreServer::StoreServer() = default;

StoreServer::~StoreServer() { Stop(); }

absl::Status StoreServer::Start(const std::string& socket_path, ServerOptions options) {
  if (loop_ != nullptr) return absl::FailedPreconditionError("object store already started");
  uint64_t capacity = options.capacity;
  if (capacity == 0) {
    absl::StatusOr<uint64_t> def = DefaultArenaCapacity();
    if (!def.ok()) return def.status();
    capacity = *def;
  }
  if (!options.spill_dir.empty()) {
    if (absl::Status s = MakeDirs(options.spill_dir, 0700); !s.ok()) return s;
  }
  absl::StatusOr<std::unique_ptr<Arena>> arena = Arena::Create(capacity, options.huge_pages);
  if (!arena.ok()) return arena.status();
  if (options.prefault) {
    absl::Time t0 = absl::Now();
    if (absl::Status s = (*arena)->Prefault(0, (*arena)->capacity()); !s.ok()) return s;
    DROVER_LOG(INFO) << "object store: prefaulted " << (*arena)->capacity() << " bytes in "
                     << absl::FormatDuration(absl::Now() - t0);
  }
  auto loop = std::make_unique<Loop>(std::move(*arena), options);
  if (absl::Status s = loop->Listen(socket_path); !s.ok()) {
    if (loop->bound()) unlink(socket_path.c_str());
    return s;
  }
  socket_path_ = socket_path;
  loop->StartThread();
  loop_ = std::move(loop);
  DROVER_LOG(INFO) << "object store: serving " << loop_->capacity() << " bytes on " << socket_path;
  return absl::OkStatus();
}

void StoreServer::Stop() {
  if (loop_ == nullptr) return;
  loop_->StopAndJoin();
  loop_.reset();
  unlink(socket_path_.c_str());
}

const std::string& StoreServer::socket_path() const { return socket_path_; }

uint64_t StoreServer::capacity() const { return loop_ == nullptr ? 0 : loop_->capacity(); }

}  // namespace drover::object_store
