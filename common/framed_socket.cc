#include "common/framed_socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/net.h"

namespace drover {
namespace {

constexpr size_t kReadChunk = 64 * 1024;

uint32_t LoadLe32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return uint32_t{u[0]} | uint32_t{u[1]} << 8 | uint32_t{u[2]} << 16 | uint32_t{u[3]} << 24;
}

}  // namespace

char* FrameReader::WritePtr(size_t n) {
  if (begin_ == end_) begin_ = end_ = 0;
  if (buf_.size() - end_ < n) {
    if (begin_ > 0) {  // move the unread bytes to the front before growing
      std::memmove(&buf_[0], &buf_[begin_], end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    if (buf_.size() - end_ < n) buf_.resize(end_ + n);
  }
  return &buf_[end_];
}

absl::StatusOr<bool> FrameReader::Next(std::string_view* payload) {
  if (end_ - begin_ < 4) return false;
  const uint32_t len = LoadLe32(&buf_[begin_]);
  if (len > kMaxFrameBytes) {
    return absl::DataLossError(
        absl::StrCat("frame of ", len, " bytes is larger than the limit of ", kMaxFrameBytes,
                     " (not a drover peer?)"));
  }
  if (end_ - begin_ < 4 + size_t{len}) {
    // Room for more of the frame, but never more ahead than has arrived (at least 64
    // KiB): else a peer's 4-byte header claiming 64 MiB makes every connection, before
    // its hello, allocate and zero 64 MiB. Growth stays geometric, so a large frame
    // costs few reallocations.
    const size_t have = end_ - begin_;
    WritePtr(std::min(4 + size_t{len} - have, std::max<size_t>(have, 64 << 10)));
    return false;
  }
  *payload = std::string_view(&buf_[begin_ + 4], len);
  begin_ += 4 + len;
  return true;
}

bool ReadAvailable(SocketStream& stream, FrameReader& reader, bool* read_wants_write) {
  *read_wants_write = false;
  for (;;) {
    char* p = reader.WritePtr(kReadChunk);
    IoWait wait;
    absl::StatusOr<size_t> n = stream.ReadSome(p, kReadChunk, &wait);
    if (!n.ok()) return false;
    if (wait == IoWait::kWrite) *read_wants_write = true;
    if (wait != IoWait::kNone) return true;
    if (*n == 0) return false;
    reader.Commit(*n);
    // A short read drained a plain socket; OpenSSL may hold more of a record: read on.
    if (*n < kReadChunk && !stream.tls()) return true;
  }
}

bool WriteAvailable(SocketStream& stream, std::string* out, bool* waits_read) {
  if (waits_read != nullptr) *waits_read = false;
  size_t off = 0;
  bool ok = true;
  while (off < out->size()) {
    IoWait wait;
    absl::StatusOr<size_t> n = stream.WriteSome(out->data() + off, out->size() - off, &wait);
    if (!n.ok()) {
      ok = false;
      break;
    }
    off += *n;
    // (kRead: a TLS write that must first read; the next read event lets it go on.)
    if (wait == IoWait::kRead && waits_read != nullptr) *waits_read = true;
    if (wait != IoWait::kNone) break;
  }
  out->erase(0, off);
  return ok;
}

void AppendFrame(const google::protobuf::MessageLite& msg, std::string* out) {
  const size_t n = msg.ByteSizeLong();
  const size_t at = out->size();
  out->resize(at + 4 + n);
  char* p = &(*out)[at];
  p[0] = static_cast<char>(n & 0xff);
  p[1] = static_cast<char>((n >> 8) & 0xff);
  p[2] = static_cast<char>((n >> 16) & 0xff);
  p[3] = static_cast<char>((n >> 24) & 0xff);
  msg.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(p + 4));
}

FramedSocket::FramedSocket(int fd) : stream_(std::make_unique<SocketStream>(fd)) {}

FramedSocket::FramedSocket(std::unique_ptr<SocketStream> stream) : stream_(std::move(stream)) {}

FramedSocket::~FramedSocket() = default;

absl::StatusOr<std::unique_ptr<FramedSocket>> FramedSocket::ConnectUnix(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path too long: ", path));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("cannot connect to ", path, ": ", std::strerror(err)));
  }
  return std::make_unique<FramedSocket>(fd);
}

absl::StatusOr<std::unique_ptr<FramedSocket>> FramedSocket::ConnectTcp(
    const std::string& host_port, const TransportSecurity& security, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<int> fd = drover::ConnectTcp(host_port, deadline);
  if (!fd.ok()) return fd.status();
  absl::StatusOr<std::unique_ptr<SocketStream>> stream = security.ClientEnd(*fd, host_port, deadline);
  if (!stream.ok()) return stream.status();
  return std::make_unique<FramedSocket>(*std::move(stream));
}

absl::Status FramedSocket::WriteAll(const std::string& bytes) {
  return stream_->WriteAll(bytes.data(), bytes.size());
}

absl::Status FramedSocket::Send(const google::protobuf::MessageLite& msg) {
  return Enqueue([&](std::string* out) { AppendFrame(msg, out); });
}

absl::Status FramedSocket::SendFrames(const std::string& frames) {
  return Enqueue([&](std::string* out) { out->append(frames); });
}

template <typename Append>
absl::Status FramedSocket::Enqueue(Append append) {
  absl::MutexLock l(&mu_);
  if (!broken_.ok()) return broken_;
  const size_t before = pending_.size();
  append(&pending_);
  if (want_write_ && pending_.size() > max_unsent_) {
    // The peer has stopped reading (an actor stuck in a call): fail the connection,
    // so its owner fails what is in flight, rather than buffer without bound.
    broken_ = absl::ResourceExhaustedError(absl::StrCat(
        peer_, " does not read what is sent to it: ", before, " bytes are unsent and ",
        pending_.size() - before, " more would exceed the limit of ", max_unsent_,
        "; its connection is closed"));
    pending_.clear();
    stream_->Shutdown();
    return broken_;
  }
  // The writing thread (or, while armed, the loop) sends it with its batch.
  if (writing_ || armed_) return absl::OkStatus();
  writing_ = true;
  if (want_write_) {
    WriteNonBlockingLocked();
    writing_ = false;
    return broken_;
  }
  std::string batch;
  while (!pending_.empty() && broken_.ok()) {
    batch.swap(pending_);
    mu_.Unlock();
    absl::Status s = WriteAll(batch);
    mu_.Lock();
    batch.clear();
    if (!s.ok()) broken_ = s;
  }
  writing_ = false;
  return broken_;
}

absl::Status FramedSocket::Read(google::protobuf::MessageLite* msg) {
  for (;;) {
    std::string_view payload;
    absl::StatusOr<bool> got = reader_.Next(&payload);
    if (!got.ok()) return got.status();
    if (*got) {
      if (!msg->ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
        return absl::DataLossError("a frame does not parse (protocol mismatch?)");
      }
      return absl::OkStatus();
    }
    char* p = reader_.WritePtr(kReadChunk);
    absl::StatusOr<size_t> n = stream_->Read(p, kReadChunk);
    if (!n.ok()) return n.status();
    if (*n == 0) return absl::UnavailableError("connection closed by the peer");
    reader_.Commit(*n);
  }
}

void FramedSocket::Shutdown() {
  shut_down_.store(true, std::memory_order_relaxed);
  stream_->Shutdown();
}

absl::Status FramedSocket::UseEventLoop(std::function<void(bool)> want_write, std::string peer,
                                        size_t max_unsent) {
  if (absl::Status s = SetNonBlocking(stream_->fd()); !s.ok()) return s;
  absl::MutexLock l(&mu_);
  want_write_ = std::move(want_write);
  peer_ = std::move(peer);
  max_unsent_ = max_unsent;
  return absl::OkStatus();
}

void FramedSocket::WriteNonBlockingLocked() {
  std::string batch;
  while (!pending_.empty() && broken_.ok()) {
    batch.swap(pending_);
    mu_.Unlock();
    bool waits_read = false;
    const bool ok = WriteAvailable(*stream_, &batch, &waits_read);
    mu_.Lock();
    if (!ok && broken_.ok()) {
      broken_ =
          absl::UnavailableError(absl::StrCat("connection to ", peer_, " lost while sending"));
    }
    if (!batch.empty() && broken_.ok()) {
      // The socket is full: what is left goes first, then what came meanwhile.
      batch.append(pending_);
      pending_.swap(batch);
      // A write waiting for a read goes on from ReadReady; EPOLLOUT would fire at once
      // on a writable socket, again and again.
      write_waits_read_ = waits_read;
      const bool want = !waits_read;
      if (armed_ != want) {
        armed_ = want;
        want_write_(want);
      }
      return;
    }
    write_waits_read_ = false;
    batch.clear();
  }
  if (!broken_.ok()) pending_.clear();
  if (armed_) {
    armed_ = false;
    want_write_(false);
  }
}

void FramedSocket::WriteReady() {
  absl::MutexLock l(&mu_);
  if (writing_ || !want_write_ || pending_.empty()) return;
  writing_ = true;
  WriteNonBlockingLocked();
  writing_ = false;
}

size_t FramedSocket::unsent() {
  absl::MutexLock l(&mu_);
  return pending_.size();
}

absl::Status FramedSocket::ReadReady(const std::function<void(std::string_view)>& on_frame,
                                     bool* wants_write, bool* more) {
  *wants_write = false;
  if (more != nullptr) *more = false;
  // Why the stream ended, if it did (after the frames that came before).
  absl::Status ended;
  size_t got_bytes = 0;
  for (;;) {
    char* p = reader_.WritePtr(kReadChunk);
    IoWait wait;
    absl::StatusOr<size_t> n = stream_->ReadSome(p, kReadChunk, &wait);
    if (!n.ok()) {
      ended = n.status();
      break;
    }
    if (wait == IoWait::kWrite) *wants_write = true;
    if (wait != IoWait::kNone) break;
    if (*n == 0) {
      ended = absl::UnavailableError("connection closed by the peer");
      break;
    }
    reader_.Commit(*n);
    got_bytes += *n;
    // A short read drained a plain socket; OpenSSL may hold more of a record: read on.
    if (*n < kReadChunk && !stream_->tls()) break;
    if (got_bytes >= kMaxReadPerEvent) {
      // Enough for now: the other connections get their turn first (TLS: OpenSSL may
      // hold the rest, which no epoll event would report, so the caller comes back).
      if (more != nullptr) *more = true;
      break;
    }
  }
  for (;;) {
    std::string_view payload;
    absl::StatusOr<bool> got = reader_.Next(&payload);
    if (!got.ok()) return got.status();
    if (!*got) break;
    on_frame(payload);
  }
  {
    absl::MutexLock l(&mu_);
    if (!broken_.ok() && !ended.ok()) return broken_;  // e.g. RESOURCE_EXHAUSTED
    if (write_waits_read_ && ended.ok() && !writing_) {
      writing_ = true;
      WriteNonBlockingLocked();
      writing_ = false;
    }
  }
  if (!ended.ok() && shut_down_.load(std::memory_order_relaxed)) {
    return absl::UnavailableError("connection shut down by this side");
  }
  return ended;
}

absl::StatusOr<int> ListenUnix(const std::string& path, int backlog) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path too long (", path.size(),
                                                   " bytes, at most ", sizeof(addr.sun_path) - 1,
                                                   "): ", path));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  ::unlink(path.c_str());
  // Owner-only from the start: the umask covers the window before chmod.
  mode_t old = ::umask(0077);
  int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  ::umask(old);
  if (rc != 0 || ::chmod(path.c_str(), 0600) != 0 || ::listen(fd, backlog) != 0) {
    int err = errno;
    ::close(fd);
    return absl::InternalError(absl::StrCat("cannot listen on ", path, ": ", std::strerror(err)));
  }
  return fd;
}

absl::StatusOr<int> ListenTcp(const std::string& ip, int* port, int backlog) {
  const bool v6 = ip.find(':') != std::string::npos;
  int fd = ::socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_storage ss{};
  socklen_t len;
  if (v6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    len = sizeof(*a);
    if (::inet_pton(AF_INET6, ip.c_str(), &a->sin6_addr) != 1) {
      ::close(fd);
      return absl::InvalidArgumentError(absl::StrCat("not a numeric address: ", ip));
    }
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    len = sizeof(*a);
    if (::inet_pton(AF_INET, ip.c_str(), &a->sin_addr) != 1) {
      ::close(fd);
      return absl::InvalidArgumentError(absl::StrCat("not a numeric address: ", ip));
    }
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(fd, backlog) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    int err = errno;
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("cannot listen on ", ip, ": ", std::strerror(err)));
  }
  *port = v6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
             : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return fd;
}

absl::Status SetNonBlocking(int fd, bool on) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0) return absl::InternalError(absl::StrCat("fcntl: ", std::strerror(errno)));
  flags = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (::fcntl(fd, F_SETFL, flags) != 0) {
    return absl::InternalError(absl::StrCat("fcntl: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

void SetNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // fails harmlessly on Unix sockets
}

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace drover
