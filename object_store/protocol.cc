#include "object_store/protocol.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/event_loop.h"
#include "common/status_macros.h"

namespace drover::object_store {
namespace {

void PutLe32(uint32_t v, char* p) {
  p[0] = static_cast<char>(v & 0xff);
  p[1] = static_cast<char>((v >> 8) & 0xff);
  p[2] = static_cast<char>((v >> 16) & 0xff);
  p[3] = static_cast<char>((v >> 24) & 0xff);
}

uint32_t GetLe32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return static_cast<uint32_t>(u[0]) | (static_cast<uint32_t>(u[1]) << 8) |
         (static_cast<uint32_t>(u[2]) << 16) | (static_cast<uint32_t>(u[3]) << 24);
}

absl::Status SocketError(const char* what, int err) {
  return absl::UnavailableError(
      absl::StrCat("object store socket: ", what, " failed: ", strerror(err)));
}

absl::Status OversizeError(uint32_t len, uint32_t max) {
  return absl::InvalidArgumentError(absl::StrCat(
      "object store protocol: frame length ", len, " exceeds the maximum of ", max,
      " bytes (peer is not speaking this protocol, or is broken)"));
}

}  // namespace

absl::Status AppendFrame(const google::protobuf::MessageLite& msg, std::string* out) {
  size_t size = msg.ByteSizeLong();
  if (size > kMaxFrameSize) {
    return absl::InvalidArgumentError(absl::StrCat("object store protocol: message of ", size,
                                                   " bytes exceeds the frame maximum of ",
                                                   kMaxFrameSize));
  }
  size_t at = out->size();
  out->resize(at + kFrameHeaderSize + size);
  PutLe32(static_cast<uint32_t>(size), &(*out)[at]);
  if (size > 0 &&
      !msg.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(&(*out)[at + 4]))) {
    out->resize(at);
    return absl::InternalError("object store protocol: serialization failed");
  }
  return absl::OkStatus();
}

absl::Status WriteAll(int fd, absl::string_view data) {
  const char* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    ssize_t n = send(fd, p, left, MSG_NOSIGNAL);
    if (n < 0 && errno == ENOTSOCK) n = write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return SocketError("write", errno);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status ReadExact(int fd, char* buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      return SocketError("read", errno);
    }
    if (r == 0) {
      return absl::UnavailableError(absl::StrCat("object store socket: connection closed by peer",
                                                 got > 0 ? " in the middle of a frame" : "",
                                                 " (got ", got, " of ", n, " bytes)"));
    }
    got += static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

absl::Status WriteFrame(int fd, const google::protobuf::MessageLite& msg, std::string* scratch) {
  scratch->clear();
  DROVER_RETURN_IF_ERROR(AppendFrame(msg, scratch));
  return WriteAll(fd, *scratch);
}

absl::Status ReadFrame(int fd, google::protobuf::MessageLite* msg, std::string* scratch,
                       uint32_t max_frame_size) {
  char header[kFrameHeaderSize];
  DROVER_RETURN_IF_ERROR(ReadExact(fd, header, sizeof(header)));
  uint32_t len = GetLe32(header);
  if (len > max_frame_size) return OversizeError(len, max_frame_size);
  scratch->resize(len);
  if (len > 0) {
    DROVER_RETURN_IF_ERROR(ReadExact(fd, scratch->data(), len));
  }
  if (!msg->ParseFromArray(scratch->data(), static_cast<int>(len))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "object store protocol: a frame of ", len, " bytes does not parse as ",
        msg->GetTypeName()));
  }
  return absl::OkStatus();
}

absl::Status SendFd(int sock, int fd_to_send, absl::string_view payload) {
  if (payload.empty()) {
    return absl::InvalidArgumentError("SendFd: the payload must have at least one byte");
  }
  struct iovec iov;
  iov.iov_base = const_cast<char*>(payload.data());
  iov.iov_len = payload.size();
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  memset(control, 0, sizeof(control));
  struct msghdr mh;
  memset(&mh, 0, sizeof(mh));
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = control;
  mh.msg_controllen = sizeof(control);
  struct cmsghdr* cm = CMSG_FIRSTHDR(&mh);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(cm), &fd_to_send, sizeof(int));
  ssize_t n;
  do {
    n = sendmsg(sock, &mh, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return SocketError("sendmsg (passing a descriptor)", errno);
  // The descriptor went with the first byte; the rest is ordinary data.
  return WriteAll(sock, payload.substr(static_cast<size_t>(n)));
}

absl::StatusOr<int> RecvFd(int sock, char* buf, size_t n) {
  if (n == 0) return absl::InvalidArgumentError("RecvFd: must receive at least one byte");
  struct iovec iov;
  iov.iov_base = buf;
  iov.iov_len = n;
  // Room for a few descriptors so that a peer sending several is detected and their
  // descriptors closed rather than silently truncated.
  alignas(struct cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))];
  struct msghdr mh;
  memset(&mh, 0, sizeof(mh));
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = control;
  mh.msg_controllen = sizeof(control);
  ssize_t r;
  do {
    r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
  } while (r < 0 && errno == EINTR);
  if (r < 0) return SocketError("recvmsg (receiving a descriptor)", errno);
  if (r == 0) {
    return absl::UnavailableError(
        "object store socket: connection closed before the descriptor arrived");
  }
  int fd = -1;
  int extra = 0;
  for (struct cmsghdr* cm = CMSG_FIRSTHDR(&mh); cm != nullptr; cm = CMSG_NXTHDR(&mh, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int got;
      memcpy(&got, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
      if (fd < 0) {
        fd = got;
      } else {
        close(got);
        ++extra;
      }
    }
  }
  if (fd < 0 || extra > 0 || (mh.msg_flags & MSG_CTRUNC)) {
    if (fd >= 0) close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        "object store protocol: expected exactly one descriptor with the first message, got ",
        fd < 0 ? 0 : 1 + extra, (mh.msg_flags & MSG_CTRUNC) ? " (truncated)" : ""));
  }
  if (static_cast<size_t>(r) < n) {
    if (absl::Status s = ReadExact(sock, buf + r, n - static_cast<size_t>(r)); !s.ok()) {
      close(fd);
      return s;
    }
  }
  return fd;
}

absl::StatusOr<int> RecvFrameWithFd(int sock, google::protobuf::MessageLite* msg,
                                    uint32_t max_frame_size) {
  char header[kFrameHeaderSize];
  DROVER_ASSIGN_OR_RETURN(const int fd, RecvFd(sock, header, sizeof(header)));
  uint32_t len = GetLe32(header);
  absl::Status s;
  std::string body;
  if (len > max_frame_size) {
    s = OversizeError(len, max_frame_size);
  } else {
    body.resize(len);
    if (len > 0) s = ReadExact(sock, body.data(), len);
    if (s.ok() && !msg->ParseFromArray(body.data(), static_cast<int>(len))) {
      s = absl::InvalidArgumentError(absl::StrCat("object store protocol: a frame of ", len,
                                                  " bytes does not parse as ",
                                                  msg->GetTypeName()));
    }
  }
  if (!s.ok()) {
    close(fd);
    return s;
  }
  return fd;
}

absl::StatusOr<StoreGreeting> ConnectAndReceiveHello(const std::string& socket_path,
                                                     absl::Duration timeout,
                                                     google::protobuf::MessageLite* hello) {
  StoreGreeting g;
  // The connect and the hello share `timeout` (a stopped store's listen queue can make
  // the connect itself take most of it).
  const absl::Time deadline = absl::Now() + timeout;
  DROVER_ASSIGN_OR_RETURN(g.fd, ConnectToStore(socket_path, timeout));
  timeval tv = absl::ToTimeval(std::max(deadline - absl::Now(), absl::Milliseconds(1)));
  setsockopt(g.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  absl::StatusOr<int> arena_fd = RecvFrameWithFd(g.fd, hello);
  if (!arena_fd.ok()) {
    close(g.fd);
    return absl::UnavailableError(absl::StrCat("object store at ", socket_path,
                                               " sent no hello: ", arena_fd.status().message()));
  }
  g.arena_fd = *arena_fd;
  return g;
}

char* FrameDecoder::PrepareWrite(size_t n) {
  Compact();
  if (buf_.size() < end_ + n) buf_.resize(end_ + n);
  return &buf_[end_];
}

void FrameDecoder::Commit(size_t n) { end_ += n; }

void FrameDecoder::Append(const char* data, size_t n) {
  memcpy(PrepareWrite(n), data, n);
  Commit(n);
}

void FrameDecoder::Compact() {
  if (start_ == 0) return;
  if (start_ == end_) {
    start_ = end_ = 0;
    // Give back the memory of an occasional large frame.
    if (buf_.size() > (1u << 20)) std::string().swap(buf_);
    return;
  }
  memmove(&buf_[0], &buf_[start_], end_ - start_);
  end_ -= start_;
  start_ = 0;
}

absl::StatusOr<bool> FrameDecoder::Next(absl::string_view* body) {
  if (end_ - start_ < kFrameHeaderSize) return false;
  uint32_t len = GetLe32(&buf_[start_]);
  if (len > max_frame_size_) return OversizeError(len, max_frame_size_);
  if (end_ - start_ < kFrameHeaderSize + len) return false;
  *body = absl::string_view(buf_.data() + start_ + kFrameHeaderSize, len);
  start_ += kFrameHeaderSize + len;
  return true;
}

absl::StatusOr<int> ConnectToStore(const std::string& socket_path, absl::Duration timeout) {
  sockaddr_un addr;
  if (socket_path.empty() || socket_path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("object store socket path '", socket_path, "' must be 1..",
                     sizeof(addr.sun_path) - 1, " bytes"));
  }
  memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path, socket_path.data(), socket_path.size());
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  if (timeout != absl::InfiniteDuration()) {
    // A Unix connect waits for room in the listener's queue for up to SO_SNDTIMEO.
    timeval tv = absl::ToTimeval(std::max(timeout, absl::Milliseconds(1)));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  }
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot connect to the object store at ",
                                               socket_path, ": ", strerror(err),
                                               " (is drover-object-store running?)"));
  }
  return fd;
}

std::optional<int> PollTimeoutMs(absl::Time deadline) {
  // EventLoop's rounding and cap; its 0 (due) is nullopt here, so that a caller can
  // tell "passed" from "poll without waiting".
  const int ms = EventLoop::TimeoutMs(deadline);
  if (ms == 0) return std::nullopt;
  return ms;
}

}  // namespace drover::object_store
