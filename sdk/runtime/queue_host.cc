#include "sdk/runtime/queue_host.h"

#include <errno.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/env.h"
#include "common/framed_socket.h"
#include "common/log.h"
#include "common/socket_stream.h"
#include "common/status_macros.h"
#include "drover/task.h"
#include "sdk/runtime/context.h"
#include "sdk/runtime/queue_book.h"

namespace drover::internal {
class QueueServer {
 public:
  QueueServer(QueueSpec spec, RuntimeContext* ctx)
      : spec_(std::move(spec)), ctx_(ctx), book_(absl::StrCat("queue '", spec_.name, "'"), spec_.capacity) {}

  ~QueueServer() {
    if (thread_.joinable()) {
      const uint64_t one = 1;
      (void)!::write(wake_fd_, &one, sizeof(one));
      thread_.join();
    }
    std::vector<StoredRef> left;
    for (const proto::StoredObject& o : book_.Owned()) left.push_back(StoredRef{o.object_id(), o.node_id(), o.size()});
    if (!left.empty()) ctx_->store->Delete(left);
    conns_.clear();  // each closes its socket
    for (int fd : {unix_fd_, tcp_fd_, wake_fd_, epoll_fd_}) {
      if (fd >= 0) ::close(fd);
    }
    if (!endpoint_.unix_path.empty()) ::unlink(endpoint_.unix_path.c_str());
  }

  absl::Status Start() {
    std::string dir = Env("DROVER_WORKER_DIR");
    if (dir.empty()) dir = "/tmp";
    std::string ip = Env("DROVER_NODE_IP");
    if (ip.empty()) ip = ctx_->node_ip.empty() ? "127.0.0.1" : ctx_->node_ip;
    endpoint_.spec = spec_;
    endpoint_.node_id = ctx_->node_id;
    endpoint_.pid = ::getpid();
    endpoint_.unix_path = absl::StrCat(dir, "/q-", ::getpid(), "-", spec_.queue_id.substr(spec_.queue_id.size() > 8 ? spec_.queue_id.size() - 8 : 0), ".sock");
    DROVER_ASSIGN_OR_RETURN(unix_fd_, ListenUnix(endpoint_.unix_path));
    int port = 0;
    DROVER_ASSIGN_OR_RETURN(tcp_fd_, ListenTcp(ip, &port));
    endpoint_.tcp_address = absl::StrCat(ip, ":", port);
    epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (epoll_fd_ < 0 || wake_fd_ < 0) return absl::InternalError(absl::StrCat("epoll/eventfd: ", std::strerror(errno)));
    for (int fd : {unix_fd_, tcp_fd_, wake_fd_}) {
      DROVER_RETURN_IF_ERROR(SetNonBlocking(fd));
      Watch(fd, EPOLLIN, EPOLL_CTL_ADD);
    }
    thread_ = std::thread([this] { Loop(); });
    return absl::OkStatus();
  }

  const QueueEndpoint& endpoint() const { return endpoint_; }

 private:
  struct Conn {
    uint64_t id = 0;
    std::unique_ptr<SocketStream> stream;  // owns the socket (TLS for TCP clients of a TLS cluster)
    bool read_wants_write = false;         // a TLS read (its handshake) waits to write
    FrameReader reader;
    std::string out;
    bool hello = false;
  };

  void Watch(int fd, uint32_t events, int op) {
    epoll_event ev{};
    ev.events = events;
    ev.data.fd = fd;
    ::epoll_ctl(epoll_fd_, op, fd, &ev);
  }

  void Loop() {
    epoll_event events[64];
    for (;;) {
      const absl::Time next = book_.NextDeadline();
      int timeout_ms = -1;
      if (next != absl::InfiniteFuture()) {
        timeout_ms = static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(absl::Ceil(next - absl::Now(), absl::Milliseconds(1)))));
      }
      const int n = ::epoll_wait(epoll_fd_, events, 64, timeout_ms);
      if (n < 0 && errno != EINTR) {
        DROVER_LOG(ERROR) << "queue " << spec_.name << ": epoll_wait: " << std::strerror(errno);
        return;
      }
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        if (fd == wake_fd_) return;
        if (fd == unix_fd_ || fd == tcp_fd_) {
          Accept(fd);
          continue;
        }
        if (events[i].events & EPOLLOUT) Flush(fd);
        auto it = conns_.find(fd);
        const bool resume_read =
            it != conns_.end() && it->second.read_wants_write && (events[i].events & EPOLLOUT);
        if ((resume_read || (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) && !ReadFrom(fd)) {
          Close(fd);
        }
      }
      Send(book_.Expire(absl::Now()));
    }
  }

  void Accept(int listen_fd) {
    for (;;) {
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) return;
      SetNoDelay(fd);
      absl::StatusOr<std::unique_ptr<SocketStream>> stream =
          listen_fd == tcp_fd_
              ? ctx_->transport->ServerEnd(fd, absl::StrCat("a client of queue ", spec_.name))
              : std::make_unique<SocketStream>(fd);
      if (!stream.ok()) continue;  // ServerEnd closed it
      Conn& c = conns_[fd];
      c.id = next_conn_++;
      c.stream = *std::move(stream);
      Watch(fd, EPOLLIN, EPOLL_CTL_ADD);
    }
  }

  // What `c` waits for: reads, and writes while it has output (or a TLS read waits).
  uint32_t Events(const Conn& c) const {
    return EPOLLIN | (!c.out.empty() || c.read_wants_write ? EPOLLOUT : 0);
  }

  // Reads and handles what `fd` has; false once it is closed or misbehaved.
  bool ReadFrom(int fd) {
    Conn& c = conns_[fd];
    const bool was_waiting = c.read_wants_write;
    if (!ReadAvailable(*c.stream, c.reader, &c.read_wants_write)) return false;
    if (was_waiting != c.read_wants_write) Watch(fd, Events(c), EPOLL_CTL_MOD);
    for (;;) {
      std::string_view payload;
      absl::StatusOr<bool> got = c.reader.Next(&payload);
      if (!got.ok()) return false;
      if (!*got) return true;
      proto::QueueRequest req;
      if (!req.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) return false;
      if (!Handle(fd, c, std::move(req))) return false;
    }
  }

  bool Handle(int fd, Conn& c, proto::QueueRequest req) {
    const absl::Time now = absl::Now();
    if (!c.hello) {
      QueueBook::Answer a;
      a.conn = c.id;
      a.reply.set_request_id(req.request_id());
      if (!req.has_hello() || !ConstantTimeEquals(req.hello().token(), ctx_->token)) {
        a.reply.set_code(static_cast<int>(absl::StatusCode::kUnauthenticated));
        a.reply.set_message("wrong or missing cluster token");
      } else if (req.hello().queue_id() != spec_.queue_id) {
        a.reply.set_code(static_cast<int>(absl::StatusCode::kNotFound));
        a.reply.set_message(absl::StrCat("this is the host of queue ", spec_.queue_id, ", not of ",
                                         req.hello().queue_id()));
      } else {
        c.hello = true;
      }
      AppendFrame(a.reply, &c.out);
      Flush(fd);
      return c.hello;
    }
    switch (req.op_case()) {
      case proto::QueueRequest::kPut:
        Send(book_.Put(c.id, req.request_id(), std::move(*req.mutable_put()), now));
        break;
      case proto::QueueRequest::kGet:
        Send(book_.Get(c.id, req.request_id(), req.get(), now));
        break;
      case proto::QueueRequest::kClose:
        Send(book_.Close(c.id, req.request_id()));
        break;
      default: {
        QueueBook::Answer a;
        a.conn = c.id;
        a.reply.set_request_id(req.request_id());
        if (req.has_stats()) {
          *a.reply.mutable_stats() = book_.Stats();
        } else {
          a.reply.set_code(static_cast<int>(absl::StatusCode::kInvalidArgument));
          a.reply.set_message("a queue request with no operation this host knows");
        }
        Send({std::move(a)});
      }
    }
    return true;
  }

  void Send(std::vector<QueueBook::Answer> answers) {
    std::vector<int> touched;
    for (QueueBook::Answer& a : answers) {
      for (auto& [fd, c] : conns_) {
        if (c.id != a.conn) continue;
        AppendFrame(a.reply, &c.out);
        touched.push_back(fd);
        break;
      }
    }
    for (int fd : touched) Flush(fd);
  }

  void Flush(int fd) {
    auto it = conns_.find(fd);
    if (it == conns_.end()) return;
    // The rest when writable; an error: the read side notices.
    (void)WriteAvailable(*it->second.stream, &it->second.out);
    Watch(fd, Events(it->second), EPOLL_CTL_MOD);
  }

  void Close(int fd) {
    auto it = conns_.find(fd);
    if (it == conns_.end()) return;
    std::vector<StoredRef> dropped;
    for (const proto::StoredObject& o : book_.Disconnected(it->second.id)) {
      dropped.push_back(StoredRef{o.object_id(), o.node_id(), o.size()});
    }
    if (!dropped.empty()) ctx_->store->Delete(dropped);
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    conns_.erase(it);  // closes the socket
  }

  const QueueSpec spec_;
  RuntimeContext* const ctx_;
  QueueEndpoint endpoint_;
  QueueBook book_;
  int unix_fd_ = -1;
  int tcp_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::map<int, Conn> conns_;
  uint64_t next_conn_ = 1;
  std::thread thread_;
};

QueueHost::QueueHost(QueueSpec spec) {
  RuntimeContext* ctx = CurrentRuntimeContext();
  if (ctx == nullptr) throw std::runtime_error("a queue host needs the task runtime");
  auto server = std::make_unique<QueueServer>(std::move(spec), ctx);
  if (absl::Status s = server->Start(); !s.ok()) {
    throw std::runtime_error(absl::StrCat("cannot start the queue's server: ", s.message()));
  }
  server_ = std::move(server);
}

QueueHost::~QueueHost() = default;

QueueEndpoint QueueHost::Endpoint() { return server_->endpoint(); }

QueueHost* MakeQueueHost(QueueSpec spec) { return new QueueHost(std::move(spec)); }

}  // namespace drover::internal

DROVER_REMOTE(drover::internal::MakeQueueHost, &drover::internal::QueueHost::Endpoint);
