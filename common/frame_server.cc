#include "common/frame_server.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"

namespace drover {

FrameConn::~FrameConn() = default;

void FrameConn::Queue(const google::protobuf::MessageLite& msg) {
  if (!closed_) AppendFrame(msg, &out_);
}

void FrameConn::MarkClosed() {
  if (server_ != nullptr) {
    server_->Mark(*this, "closed by its server");
  } else {
    closed_ = true;
  }
}

FrameServer::FrameServer(Handler* handler, Options options)
    : handler_(handler), options_(std::move(options)) {}

FrameServer::~FrameServer() {
  for (auto& [id, c] : conns_) {
    c->stream_.reset();
    c->closed_ = true;
    c->server_ = nullptr;
  }
  if (unix_fd_ >= 0) ::close(unix_fd_);
  if (tcp_fd_ >= 0) ::close(tcp_fd_);
  if (!unix_path_.empty()) ::unlink(unix_path_.c_str());
}

absl::Status FrameServer::Init() { return loop_.Init(); }

absl::Status FrameServer::ListenUnix(const std::string& path) {
  absl::StatusOr<int> fd = drover::ListenUnix(path);
  if (!fd.ok()) return fd.status();
  unix_fd_ = *fd;
  unix_path_ = path;
  if (absl::Status s = SetNonBlocking(unix_fd_); !s.ok()) return s;  // Accept takes all waiting
  return loop_.Add(unix_fd_, kUnixKey, EPOLLIN);
}

absl::StatusOr<int> FrameServer::ListenTcp(const std::string& ip) {
  int port = 0;
  absl::StatusOr<int> fd = drover::ListenTcp(ip, &port);
  if (!fd.ok()) return fd.status();
  tcp_fd_ = *fd;
  if (absl::Status s = SetNonBlocking(tcp_fd_); !s.ok()) return s;
  if (absl::Status s = loop_.Add(tcp_fd_, kTcpKey, EPOLLIN); !s.ok()) return s;
  return port;
}

absl::StatusOr<std::shared_ptr<FrameConn>> FrameServer::Adopt(std::unique_ptr<SocketStream> stream,
                                                              std::shared_ptr<FrameConn> c) {
  if (c == nullptr) c = handler_->NewConnection();
  if (absl::Status s = SetNonBlocking(stream->fd()); !s.ok()) return s;
  c->stream_ = std::move(stream);
  if (absl::Status s = Register(c); !s.ok()) return s;
  return c;
}

absl::Status FrameServer::WatchFd(int fd, std::function<void()> on_ready) {
  const uint64_t key = kFdKeyBase + static_cast<uint64_t>(fd);
  fds_[key] = std::move(on_ready);
  return loop_.Add(fd, key, EPOLLIN);
}

absl::Status FrameServer::Register(const std::shared_ptr<FrameConn>& c) {
  c->server_ = this;
  c->id_ = next_id_++;
  if (absl::Status s = loop_.Add(c->fd(), c->id_, EPOLLIN); !s.ok()) {
    c->stream_.reset();
    c->closed_ = true;
    return s;
  }
  conns_[c->id_] = c;
  return absl::OkStatus();
}

void FrameServer::Accept(int listen_fd, bool tcp) {
  for (;;) {
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        DROVER_LOG(WARNING) << options_.name << ": accept: " << std::strerror(errno);
      }
      return;
    }
    SetNoDelay(fd);
    std::unique_ptr<SocketStream> stream;
    if (tcp && options_.tcp_security != nullptr) {
      // TLS in a TLS cluster: the handshake runs in the reads.
      absl::StatusOr<std::unique_ptr<SocketStream>> s =
          options_.tcp_security->ServerEnd(fd, absl::StrCat("a client of ", options_.name));
      if (!s.ok()) {
        DROVER_LOG(WARNING) << options_.name << ": " << s.status();
        continue;  // ServerEnd closed it
      }
      stream = *std::move(s);
    } else {
      stream = std::make_unique<SocketStream>(fd);
    }
    std::shared_ptr<FrameConn> c = handler_->NewConnection();
    c->stream_ = std::move(stream);
    if (absl::Status s = Register(c); !s.ok()) {
      DROVER_LOG(WARNING) << options_.name << ": dropping a new connection: " << s;
    }
  }
}

int FrameServer::Poll(int timeout_ms) {
  epoll_event events[64];
  int n = loop_.Wait(events, 64, timeout_ms);
  if (n < 0) {
    if (errno != EINTR) return -1;
    n = 0;
  }
  for (int i = 0; i < n; ++i) Dispatch(events[i]);
  CloseMarked();
  return n;
}

void FrameServer::Dispatch(const epoll_event& ev) {
  const uint64_t key = ev.data.u64;
  if (key == EventLoop::kWakeKey) {
    loop_.Drain();
    woken_ = true;
    return;
  }
  if (key == kUnixKey || key == kTcpKey) {
    Accept(key == kUnixKey ? unix_fd_ : tcp_fd_, key == kTcpKey);
    return;
  }
  if (key >= kFdKeyBase) {
    auto it = fds_.find(key);
    if (it != fds_.end()) it->second();
    return;
  }
  auto it = conns_.find(key);
  if (it == conns_.end()) return;
  std::shared_ptr<FrameConn> c = it->second;
  if (c->closed_) return;
  if (ev.events & EPOLLOUT) Flush(*c);
  const bool resume_read = c->read_wants_write_ && (ev.events & EPOLLOUT);
  if (resume_read || (ev.events & (EPOLLIN | EPOLLHUP | EPOLLERR))) ReadFrom(c);
}

void FrameServer::ReadFrom(const std::shared_ptr<FrameConn>& c) {
  if (c->closed_) return;
  const bool was_waiting = c->read_wants_write_;
  const bool open = ReadAvailable(*c->stream_, c->reader_, &c->read_wants_write_);
  if (was_waiting != c->read_wants_write_) UpdateEvents(*c);
  // Frames that arrived before an end of stream are still handled.
  for (;;) {
    std::string_view payload;
    absl::StatusOr<bool> got = c->reader_.Next(&payload);
    if (!got.ok()) {
      Mark(*c, std::string(got.status().message()));
      return;
    }
    if (!*got) break;
    handler_->OnFrame(c, payload);
    if (c->closed_) return;
  }
  if (!open) Mark(*c, "the peer closed the connection (or it broke)");
}

void FrameServer::Send(const std::shared_ptr<FrameConn>& c, const google::protobuf::MessageLite& msg) {
  if (c->closed_) return;
  c->Queue(msg);
  Flush(*c);
}

void FrameServer::Flush(FrameConn& c) {
  if (c.closed_ || c.stream_ == nullptr) return;
  if (!c.out_.empty() && !WriteAvailable(*c.stream_, &c.out_)) {
    Mark(c, "a write failed (the peer is gone)");
    return;
  }
  if (options_.max_queued_bytes > 0 && c.out_.size() > options_.max_queued_bytes) {
    Mark(c, absl::StrCat("its peer does not read (", c.out_.size(), " bytes unwritten)"));
    return;
  }
  if (c.watching_out_ != (!c.out_.empty() || c.read_wants_write_)) UpdateEvents(c);
}

void FrameServer::FlushAll() {
  for (auto& [id, c] : conns_) {
    if (!c->out_.empty()) Flush(*c);
  }
}

void FrameServer::UpdateEvents(FrameConn& c) {
  const bool want_out = !c.out_.empty() || c.read_wants_write_;
  c.watching_out_ = want_out;
  (void)loop_.Modify(c.fd(), c.id_, EPOLLIN | (want_out ? EPOLLOUT : 0));
}

void FrameServer::Mark(FrameConn& c, std::string why) {
  if (c.closed_) return;
  c.closed_ = true;
  c.out_.clear();
  closing_.emplace_back(c.id_, std::move(why));
}

void FrameServer::CloseMarked() {
  while (!closing_.empty()) {
    std::vector<std::pair<uint64_t, std::string>> now;
    now.swap(closing_);
    for (auto& [id, why] : now) {
      auto it = conns_.find(id);
      if (it == conns_.end()) continue;
      std::shared_ptr<FrameConn> c = std::move(it->second);
      conns_.erase(it);
      loop_.Remove(c->fd());
      c->stream_.reset();  // closes the socket
      handler_->OnClosed(c, why);
    }
  }
}

std::shared_ptr<FrameConn> FrameServer::Find(uint64_t id) const {
  auto it = conns_.find(id);
  return it == conns_.end() ? nullptr : it->second;
}

}  // namespace drover
