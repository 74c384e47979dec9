#include "object_store/store_reactor.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/event_loop.h"
#include "common/files.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "object_store/wire_status.h"

namespace drover::object_store {
namespace {

// Client ids count up from 1: these never collide with them (nor with the loop's
// EventLoop::kWakeKey).
constexpr uint64_t kListenKey = ~0ull - 1;
constexpr size_t kMaxQueuedReplyBytes = 64u << 20;
constexpr size_t kReadChunk = 64u << 10;

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", strerror(errno)));
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
      DROVER_RETURN_IF_ERROR(MakeDirs(dir, 0700));
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

StoreReactor::StoreReactor(int arena_fd, uint64_t arena_capacity, absl::Duration stay_awake)
    : arena_fd_(arena_fd), arena_capacity_(arena_capacity), policy_(stay_awake) {}

StoreReactor::~StoreReactor() {
  for (auto& [id, conn] : conns_) close(conn.fd);
  if (listen_fd_ >= 0) close(listen_fd_);
  if (spare_fd_ >= 0) close(spare_fd_);
}

absl::Status StoreReactor::Listen(const std::string& path) {
  sockaddr_un addr;
  DROVER_RETURN_IF_ERROR(PrepareSocketPath(path, &addr));
  listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return Errno("socket");
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return Errno(absl::StrCat("bind ", path));
  }
  bound_ = true;
  // Connecting needs write permission on the file: owner only.
  if (chmod(path.c_str(), 0600) != 0) return Errno(absl::StrCat("chmod ", path));
  if (listen(listen_fd_, 128) != 0) return Errno("listen");
  DROVER_RETURN_IF_ERROR(loop_.Init());
  spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  return Watch(listen_fd_, kListenKey, EPOLLIN, /*add=*/true);
}

void StoreReactor::Wake() { loop_.Wake(); }

absl::Status StoreReactor::Watch(int fd, uint64_t key, uint32_t events, bool add) {
  return add ? loop_.Add(fd, key, events) : loop_.Modify(fd, key, events);
}

int StoreReactor::Wait(epoll_event* events, int max_events, absl::Time next_deadline) {
  const int timeout_ms = EventLoop::TimeoutMs(next_deadline);
  // Within a stay-awake window: poll, yielding the CPU between polls, until an event
  // comes, the policy ends the window or the deadline is due.
  absl::Time last = absl::Now();
  // Once per wait, not per request: a batch of requests opens one window.
  if (policy_.awake()) policy_.BeginWait(InvoluntarySwitches());
  while (policy_.awake() && timeout_ms != 0) {
    const absl::Time now = absl::Now();
    const absl::Duration stall = now - last;
    const uint64_t switches = PollingPolicy::WantsSwitches(stall) ? InvoluntarySwitches() : 0;
    const PollingPolicy::Step step = policy_.Next(now, stall, switches);
    if (step == PollingPolicy::Step::kSleep) break;
    if (step == PollingPolicy::Step::kMove) MoveOffThisCpu();
    if (step != PollingPolicy::Step::kPoll) policy_.Rebaseline(InvoluntarySwitches());
    last = absl::Now();
    int n = loop_.Wait(events, max_events, 0);
    if (n != 0) return n;
    if (next_deadline <= now) return 0;
    sched_yield();
  }
  return loop_.Wait(events, max_events, timeout_ms);
}

// Why move rather than sleep: a client's request over the Unix socket wakes a sleeping
// store with a "sync" wake-up, which places it on the client's CPU (the kernel expects
// the sender to sleep next). A client that spins for its seal's acknowledgement does
// not, and the two then take turns on one CPU while the other idles: seen as a whole
// benchmark run of 1 MiB puts at 0.55-0.6 of memcpy instead of 0.87 (both on one CPU,
// every stay-awake window cut short by the contention). Once moved, the store keeps
// polling on its own CPU, so no wake-up pulls it back while requests keep coming. The
// move narrows the thread's affinity for a moment, then restores it.
void StoreReactor::MoveOffThisCpu() {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return;
  const int here = sched_getcpu();
  if (here < 0 || !CPU_ISSET(here, &allowed) || CPU_COUNT(&allowed) < 2) return;
  cpu_set_t others = allowed;
  CPU_CLR(here, &others);
  if (sched_setaffinity(0, sizeof(others), &others) != 0) return;
  sched_setaffinity(0, sizeof(allowed), &allowed);
}

// It was runnable and another task of this machine ran instead (a yield that let one
// run counts too). getrusage(RUSAGE_THREAD) tells these from the hypervisor's steal,
// which stalls the thread without a switch.
uint64_t StoreReactor::InvoluntarySwitches() {
  struct rusage ru;
  if (getrusage(RUSAGE_THREAD, &ru) != 0) return 0;
  return static_cast<uint64_t>(ru.ru_nivcsw);
}

StoreConn* StoreReactor::Dispatch(const epoll_event& event, bool* stop) {
  const uint64_t key = event.data.u64;
  if (key == EventLoop::kWakeKey) {
    *stop = true;
    return nullptr;
  }
  if (key == kListenKey) {
    AcceptAll();
    return nullptr;
  }
  StoreConn* c = Find(key);
  if (c == nullptr) return nullptr;
  if (event.events & EPOLLOUT) Flush(*c);
  if (c->closing || !(event.events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP))) {
    return nullptr;
  }
  return c;
}

void StoreReactor::AcceptAll() {
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
    hello.set_arena_capacity(arena_capacity_);
    hello.set_client_id(id);
    std::string frame;
    absl::Status s = AppendFrame(hello, &frame);
    if (s.ok()) s = SendFd(fd, arena_fd_, frame);
    if (s.ok()) s = Watch(fd, id, EPOLLIN | EPOLLRDHUP, /*add=*/true);
    if (!s.ok()) {
      DROVER_LOG(WARNING) << "object store: dropping new client " << id << ": " << s;
      close(fd);
      continue;
    }
    StoreConn& c = conns_[id];
    c.id = id;
    c.fd = fd;
    DROVER_LOG(DEBUG) << "object store: client " << id << " connected";
  }
}

StoreReactor::ReadResult StoreReactor::Read(StoreConn& c, size_t* budget) {
  while (!c.closing && *budget > 0) {
    char* p = c.in.PrepareWrite(kReadChunk);
    ssize_t n = read(c.fd, p, kReadChunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        MarkClosing(c, absl::StrCat("read failed: ", strerror(errno)));
      }
      return ReadResult::kNothing;
    }
    if (n == 0) {
      MarkClosing(c, "disconnected");
      return ReadResult::kNothing;
    }
    c.in.Commit(static_cast<size_t>(n));
    *budget -= std::min(*budget, static_cast<size_t>(n));
    // A short read emptied the socket: no second read just to see EAGAIN (a syscall
    // on every request's path). Bytes arriving meanwhile keep the socket readable,
    // and the level-triggered epoll reports it again.
    return static_cast<size_t>(n) < kReadChunk || *budget == 0 ? ReadResult::kLast
                                                                : ReadResult::kMore;
  }
  return ReadResult::kNothing;
}

bool StoreReactor::NextFrame(StoreConn& c, absl::string_view* body) {
  if (c.closing) return false;
  absl::StatusOr<bool> got = c.in.Next(body);
  if (!got.ok()) {
    MarkClosing(c, got.status().message());
    return false;
  }
  return *got;
}

void StoreReactor::Send(StoreConn& c, const proto::StoreReply& reply) {
  if (c.closing) return;
  if (!AppendFrame(reply, &c.out).ok()) {
    // Only a Get reply with huge metadata can get here: answer with an error instead.
    proto::StoreReply err;
    err.set_request_id(reply.request_id());
    SetReplyStatus(absl::ResourceExhaustedError(absl::StrCat(
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

void StoreReactor::FlushBeforeMore(StoreConn& c) {
  if (c.in.buffered() > 0 && !c.closing && !c.want_write) Flush(c);
}

StoreReactor::ReplyBatch::~ReplyBatch() {
  c_.batching = false;
  if (!c_.closing && !c_.want_write && c_.out_start < c_.out.size()) reactor_->Flush(c_);
}

void StoreReactor::Flush(StoreConn& c) {
  while (c.out_start < c.out.size()) {
    ssize_t n = send(c.fd, c.out.data() + c.out_start, c.out.size() - c.out_start,
                     MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (!c.want_write) {
          c.want_write = true;
          (void)Watch(c.fd, c.id, EPOLLIN | EPOLLRDHUP | EPOLLOUT, /*add=*/false);
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
    (void)Watch(c.fd, c.id, EPOLLIN | EPOLLRDHUP, /*add=*/false);
  }
}

void StoreReactor::MarkClosing(StoreConn& c, absl::string_view why) {
  if (c.closing) return;
  c.closing = true;
  close_reasons_.emplace_back(c.id, std::string(why));
}

void StoreReactor::CloseMarked(std::vector<std::pair<ClientId, std::string>>* closed) {
  for (auto& [id, why] : close_reasons_) {
    auto it = conns_.find(id);
    if (it == conns_.end()) continue;
    loop_.Remove(it->second.fd);
    close(it->second.fd);
    conns_.erase(it);
    closed->emplace_back(id, std::move(why));
  }
  close_reasons_.clear();
}

StoreConn* StoreReactor::Find(ClientId client) {
  auto it = conns_.find(client);
  return it == conns_.end() ? nullptr : &it->second;
}

}  // namespace drover::object_store
