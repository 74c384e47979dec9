#include "common/socket_stream.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "openssl/err.h"
#include "openssl/ssl.h"
#include "openssl/x509.h"

namespace drover {

std::string TakeOpenSslError(const std::string& fallback) {
  std::string out;
  while (unsigned long e = ERR_get_error()) {  // oldest first; keep the last one
    const char* reason = ERR_reason_error_string(e);
    out = reason != nullptr ? reason : absl::StrCat("OpenSSL error ", e);
  }
  return out.empty() ? fallback : out;
}

SocketStream::SocketStream(int fd) : fd_(fd), ssl_(nullptr) {}

SocketStream::SocketStream(int fd, SSL* ssl, std::string peer)
    : fd_(fd), peer_(std::move(peer)), ssl_(ssl) {
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL, 0) | O_NONBLOCK);
  // OpenSSL writes a record (16 KiB) per write(2): with Nagle's algorithm each one
  // below the segment size waits for the ACK of the one before (a TLS pull ran at a
  // third of its speed). Fails harmlessly on a socket that is not TCP.
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

SocketStream::~SocketStream() {
  if (ssl_ != nullptr) SSL_free(ssl_);
  ::close(fd_);
}

absl::StatusOr<size_t> SocketStream::TlsResult(int rc, const char* op, IoWait* wait) {
  if (rc > 0) return static_cast<size_t>(rc);
  const int err = SSL_get_error(ssl_, rc);
  switch (err) {
    case SSL_ERROR_WANT_READ:
      *wait = IoWait::kRead;
      return 0;
    case SSL_ERROR_WANT_WRITE:
      *wait = IoWait::kWrite;
      return 0;
    case SSL_ERROR_ZERO_RETURN:  // the peer's close_notify: a clean end
      return 0;
    case SSL_ERROR_SYSCALL: {
      const int e = errno;
      ERR_clear_error();
      if (rc == 0 || e == 0) {
        // The peer closed the socket without close_notify. After the handshake this is
        // how a peer that exits ends the stream; during it, the peer refused us.
        if (SSL_is_init_finished(ssl_)) return 0;
        return absl::UnavailableError(absl::StrCat(
            "TLS handshake with ", peer_, " failed: the peer closed the connection (is it a "
            "drover peer of this cluster, with TLS on?)"));
      }
      if (e == EINTR || e == EAGAIN) {
        *wait = IoWait::kRead;
        return 0;
      }
      return absl::UnavailableError(
          absl::StrCat("connection to ", peer_, " lost (TLS ", op, "): ", std::strerror(e)));
    }
    default: {
      std::string why = TakeOpenSslError("TLS protocol error");
      const long verify = SSL_get_verify_result(ssl_);
      if (verify != X509_V_OK) {
        why = absl::StrCat("its certificate does not check against this cluster's CA (",
                           X509_verify_cert_error_string(verify), ")");
      }
      return absl::UnavailableError(absl::StrCat(
          SSL_is_init_finished(ssl_) ? "TLS " : "TLS handshake with ", peer_,
          SSL_is_init_finished(ssl_) ? absl::StrCat(" ", op, " failed: ") : " failed: ", why));
    }
  }
}

namespace {

// One plain recv or send (`op`): its count, or 0 with `*wait` set to `would_block`
// when the socket is not ready.
template <typename Op>
absl::StatusOr<size_t> PlainIo(Op op, IoWait would_block, IoWait* wait) {
  for (;;) {
    const ssize_t k = op();
    if (k >= 0) return static_cast<size_t>(k);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      *wait = would_block;
      return 0;
    }
    return absl::UnavailableError(absl::StrCat("connection lost: ", std::strerror(errno)));
  }
}

// At most what one OpenSSL call takes.
int TlsLength(size_t n) { return static_cast<int>(std::min<size_t>(n, 1 << 30)); }

}  // namespace

absl::StatusOr<size_t> SocketStream::ReadSome(void* buf, size_t n, IoWait* wait) {
  *wait = IoWait::kNone;
  if (ssl_ == nullptr) {
    return PlainIo([&] { return ::recv(fd_, buf, n, 0); }, IoWait::kRead, wait);
  }
  absl::MutexLock lock(&mu_);
  ERR_clear_error();
  return TlsResult(SSL_read(ssl_, buf, TlsLength(n)), "read", wait);
}

absl::StatusOr<size_t> SocketStream::WriteSome(const void* buf, size_t n, IoWait* wait) {
  *wait = IoWait::kNone;
  if (ssl_ == nullptr) {
    return PlainIo([&] { return ::send(fd_, buf, n, MSG_NOSIGNAL); }, IoWait::kWrite, wait);
  }
  absl::MutexLock lock(&mu_);
  ERR_clear_error();
  absl::StatusOr<size_t> r = TlsResult(SSL_write(ssl_, buf, TlsLength(n)), "write", wait);
  if (r.ok() && *r == 0 && *wait == IoWait::kNone) {
    return absl::UnavailableError(absl::StrCat("connection to ", peer_, " closed by the peer"));
  }
  return r;
}

absl::Status SocketStream::Await(IoWait wait, absl::Time deadline) {
  pollfd p{fd_, static_cast<short>(wait == IoWait::kWrite ? POLLOUT : POLLIN), 0};
  for (;;) {
    int ms = -1;
    if (deadline != absl::InfiniteFuture()) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) {
        return absl::DeadlineExceededError(absl::StrCat("no progress on the connection",
                                                        peer_.empty() ? "" : " to ", peer_));
      }
      ms = static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))), 1 << 30));
    }
    int rc = ::poll(&p, 1, ms);
    if (rc > 0) return absl::OkStatus();  // ready, or an error the next call reports
    if (rc < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat("poll: ", std::strerror(errno)));
    }
  }
}

absl::StatusOr<size_t> SocketStream::Read(void* buf, size_t n, absl::Time deadline) {
  for (;;) {
    IoWait wait;
    absl::StatusOr<size_t> got = ReadSome(buf, n, &wait);
    if (!got.ok() || wait == IoWait::kNone) return got;
    if (absl::Status s = Await(wait, deadline); !s.ok()) return s;
  }
}

absl::Status SocketStream::WriteAll(const void* buf, size_t n, absl::Time deadline,
                                    size_t* written) {
  const char* p = static_cast<const char*>(buf);
  size_t off = 0;
  absl::Status status;
  while (off < n) {
    IoWait wait;
    absl::StatusOr<size_t> k = WriteSome(p + off, n - off, &wait);
    if (!k.ok()) {
      status = k.status();
      break;
    }
    off += *k;
    if (wait != IoWait::kNone) {
      status = Await(wait, deadline);
      if (!status.ok()) break;
    }
  }
  if (written != nullptr) *written = off;
  return status;
}

absl::Status SocketStream::Handshake(absl::Time deadline) {
  if (ssl_ == nullptr) return absl::OkStatus();
  for (;;) {
    IoWait wait = IoWait::kNone;
    {
      absl::MutexLock lock(&mu_);
      ERR_clear_error();
      const int rc = SSL_do_handshake(ssl_);
      if (rc == 1) return absl::OkStatus();
      absl::StatusOr<size_t> r = TlsResult(rc, "handshake", &wait);
      if (!r.ok()) return r.status();
      if (wait == IoWait::kNone) {
        return absl::UnavailableError(absl::StrCat("TLS handshake with ", peer_,
                                                   " failed: the peer closed the connection"));
      }
    }
    if (absl::Status s = Await(wait, deadline); !s.ok()) {
      return absl::DeadlineExceededError(
          absl::StrCat("TLS handshake with ", peer_, " did not complete in time"));
    }
  }
}

void SocketStream::Shutdown() { ::shutdown(fd_, SHUT_RDWR); }

}  // namespace drover
