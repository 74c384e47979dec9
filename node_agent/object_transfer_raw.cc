#include "node_agent/object_transfer_raw.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace drover {
namespace {

// Largest single send/recv, so that cancellation and shutdown are noticed often.
constexpr size_t kRawIoBytes = 16 << 20;
// Socket timeouts and poll intervals: how often waits look at cancellation.
constexpr absl::Duration kTick = absl::Milliseconds(100);
constexpr int kTickMs = 100;

// A numeric IP (v4 or v6) and port as a socket address; false if `ip` is not numeric.
bool ToSockaddr(const std::string& ip, int port, sockaddr_storage* ss, socklen_t* len) {
  std::memset(ss, 0, sizeof(*ss));
  auto* v4 = reinterpret_cast<sockaddr_in*>(ss);
  if (inet_pton(AF_INET, ip.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    *len = sizeof(sockaddr_in);
    return true;
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(ss);
  if (inet_pton(AF_INET6, ip.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    *len = sizeof(sockaddr_in6);
    return true;
  }
  return false;
}

// poll() for `events` up to `ms`; > 0 if ready.
int PollFd(int fd, short events, int ms) {
  pollfd p{fd, events, 0};
  return ::poll(&p, 1, ms);
}

void SetTimeouts(int fd, absl::Duration d) {
  timeval tv = absl::ToTimeval(d);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

// Compares in constant time.
bool SameToken(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

ScopedFd::~ScopedFd() {
  if (fd_ >= 0) ::close(fd_);
}

std::string NumericHostOf(const std::string& address) {
  std::string host;
  if (!address.empty() && address.front() == '[') {
    size_t end = address.find(']');
    if (end == std::string::npos) return "";
    host = address.substr(1, end - 1);
  } else {
    size_t colon = address.rfind(':');
    if (colon == std::string::npos) return "";
    host = address.substr(0, colon);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) return "";
  char buf[INET6_ADDRSTRLEN] = "";
  const void* a = nullptr;
  if (res->ai_family == AF_INET) a = &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  if (res->ai_family == AF_INET6) a = &reinterpret_cast<sockaddr_in6*>(res->ai_addr)->sin6_addr;
  std::string out;
  if (a != nullptr && inet_ntop(res->ai_family, a, buf, sizeof(buf)) != nullptr) out = buf;
  freeaddrinfo(res);
  return out;
}

int ListenOn(const std::string& ip, int* port) {
  sockaddr_storage ss;
  socklen_t len;
  if (!ToSockaddr(ip, 0, &ss, &len)) {
    errno = EINVAL;
    return -1;
  }
  int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(fd, 1) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    return -1;
  }
  *port = ss.ss_family == AF_INET ? ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port)
                                  : ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return fd;
}

absl::StatusOr<std::string> NewRawToken() {
  std::string token(kRawTokenBytes, '\0');
  if (::getrandom(&token[0], token.size(), 0) != static_cast<ssize_t>(token.size())) {
    return absl::InternalError(absl::StrCat("getrandom: ", std::strerror(errno)));
  }
  return token;
}

absl::StatusOr<std::unique_ptr<SocketStream>> AcceptRawReader(
    int listener, const std::string& token, const TransportSecurity& security,
    absl::Duration connect_timeout, const std::function<bool()>& cancelled,
    const std::string& printable_id) {
  const absl::Time give_up = absl::Now() + connect_timeout;
  int cfd = -1;
  while (cfd < 0) {
    if (cancelled()) {
      return absl::CancelledError(absl::StrCat("the reader of ", printable_id,
                                               " went away before its raw connection"));
    }
    if (absl::Now() >= give_up) {
      return absl::DeadlineExceededError(
          absl::StrCat("ReadObject of ", printable_id, ": no raw connection within ",
                       absl::FormatDuration(connect_timeout)));
    }
    if (PollFd(listener, POLLIN, kTickMs) > 0) {
      cfd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    }
  }
  SetTimeouts(cfd, kTick);
  DROVER_ASSIGN_OR_RETURN(
      std::unique_ptr<SocketStream> conn,
      security.ServerEnd(cfd, absl::StrCat("the raw reader of ", printable_id)));
  // The TLS handshake (nothing for plain text) and the token, each wait a tick at most.
  absl::Status hs = absl::DeadlineExceededError("");
  while (absl::IsDeadlineExceeded(hs) && !cancelled() && absl::Now() < give_up) {
    hs = conn->Handshake(std::min(give_up, absl::Now() + kTick));
  }
  if (!hs.ok()) {
    return absl::Status(absl::IsUnavailable(hs) ? hs.code() : absl::StatusCode::kPermissionDenied,
                        absl::StrCat("ReadObject of ", printable_id, ": ",
                                     absl::IsDeadlineExceeded(hs)
                                         ? "the raw connection did not complete its TLS handshake"
                                         : hs.message()));
  }
  std::string got(token.size(), '\0');
  size_t have = 0;
  while (have < got.size()) {
    if (cancelled() || absl::Now() >= give_up) break;
    absl::StatusOr<size_t> k =
        conn->Read(&got[have], got.size() - have, std::min(give_up, absl::Now() + kTick));
    if (k.ok() && *k == 0) break;
    if (!k.ok()) {
      if (absl::IsDeadlineExceeded(k.status())) continue;
      break;
    }
    have += *k;
  }
  if (have < got.size() || !SameToken(got, token)) {
    return absl::PermissionDeniedError(
        absl::StrCat("ReadObject of ", printable_id,
                     ": the raw connection did not present the offer's token"));
  }
  if (absl::Status s = conn->WriteAll(kRawAck, sizeof(kRawAck) - 1, give_up); !s.ok()) {
    return absl::UnavailableError(absl::StrCat("ReadObject of ", printable_id,
                                               ": cannot acknowledge the raw reader's token: ",
                                               s.message()));
  }
  return conn;
}

absl::Status SendRaw(SocketStream& conn, const uint8_t* data, int64_t size,
                     absl::Duration stall, const std::function<bool()>& cancelled,
                     const std::string& printable_id, int64_t* sent) {
  *sent = 0;
  int64_t left = size;
  absl::Time last_progress = absl::Now();
  // A TLS stream takes one record (16 KiB) per write: asking `cancelled` (a gRPC
  // context's, which polls its completion queue) for each made a TLS pull 3x slower.
  absl::Time next_check = absl::InfinitePast();
  while (left > 0) {
    const absl::Time now = absl::Now();
    if (now >= next_check) {
      if (cancelled()) {
        return absl::CancelledError(absl::StrCat("the reader of ", printable_id,
                                                 " went away after ", *sent, " bytes"));
      }
      next_check = now + kTick;
    }
    IoWait wait;
    absl::StatusOr<size_t> k =
        conn.WriteSome(data, static_cast<size_t>(std::min<int64_t>(left, kRawIoBytes)), &wait);
    if (!k.ok()) {
      return absl::UnavailableError(absl::StrCat("the raw connection for ", printable_id,
                                                 " broke after ", *sent,
                                                 " bytes: ", k.status().message()));
    }
    if (*k > 0) {
      data += *k;
      left -= static_cast<int64_t>(*k);
      *sent += static_cast<int64_t>(*k);
      last_progress = now;
      continue;
    }
    next_check = absl::InfinitePast();  // about to wait: ask first
    if (absl::Now() - last_progress >= stall) {
      return absl::UnavailableError(absl::StrCat("the reader of ", printable_id,
                                                 " took nothing for ",
                                                 absl::FormatDuration(stall), " after ", *sent,
                                                 " bytes"));
    }
    (void)conn.Await(wait, absl::Now() + kTick);  // a timeout only means: look again
  }
  return absl::OkStatus();
}

absl::Status ReceiveRaw(const std::string& ip, int port, const std::string& token,
                        const TransportSecurity& security, uint8_t* dst, int64_t want,
                        absl::Time deadline,
                        absl::Duration connect_timeout, absl::Duration stall,
                        const std::atomic<bool>& stop, int64_t* got, bool* connected,
                        std::atomic<int64_t>* progress) {
  *got = 0;
  *connected = false;
  const bool v6 = ip.find(':') != std::string::npos;
  const std::string where = absl::StrCat(v6 ? "[" : "", ip, v6 ? "]" : "", ":", port);
  sockaddr_storage ss;
  socklen_t len;
  if (!ToSockaddr(ip, port, &ss, &len)) {
    return absl::InvalidArgumentError(absl::StrCat("bad raw address ", where));
  }
  ScopedFd fd(::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (fd.get() < 0) {
    return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  }
  const absl::Time connect_by = std::min(deadline, absl::Now() + connect_timeout);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    if (errno != EINPROGRESS) {
      return absl::UnavailableError(
          absl::StrCat("cannot connect to the raw offer at ", where, ": ", std::strerror(errno)));
    }
    while (PollFd(fd.get(), POLLOUT, kTickMs) <= 0) {
      if (stop) return absl::UnavailableError("shutting down");
      if (absl::Now() >= connect_by) {
        return absl::UnavailableError(
            absl::StrCat("timed out connecting to the raw offer at ", where));
      }
    }
    int err = 0;
    socklen_t elen = sizeof(err);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &elen);
    if (err != 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot connect to the raw offer at ", where, ": ", std::strerror(err)));
    }
  }
  ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
  SetTimeouts(fd.get(), kTick);
  if (stop) return absl::UnavailableError("shutting down");
  absl::StatusOr<std::unique_ptr<SocketStream>> conn =
      security.ClientEnd(fd.Release(), absl::StrCat("the raw offer at ", where), connect_by);
  if (!conn.ok()) return absl::UnavailableError(conn.status().message());
  if (absl::Status s = (*conn)->WriteAll(token.data(), token.size(), connect_by); !s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot send the token to the raw offer at ", where, ": ", s.message()));
  }
  *connected = true;
  absl::Time last_progress = absl::Now();
  // Reads `n` bytes into `to`, counting them in `*count` (and in `*report` if set), with
  // the stall and deadline bounds of the whole transfer.
  auto read_exactly = [&](uint8_t* to, int64_t n, int64_t* count,
                          std::atomic<int64_t>* report) -> absl::Status {
    while (*count < n) {
      if (stop) return absl::UnavailableError("shutting down");
      IoWait wait;
      absl::StatusOr<size_t> k = (*conn)->ReadSome(
          to + *count, static_cast<size_t>(std::min<int64_t>(n - *count, kRawIoBytes)), &wait);
      if (!k.ok()) {
        return absl::UnavailableError(
            absl::StrCat("the raw connection (", where, ") broke: ", k.status().message()));
      }
      if (*k > 0) {
        *count += static_cast<int64_t>(*k);
        if (report != nullptr) *report = *count;
        last_progress = absl::Now();
        continue;
      }
      if (wait == IoWait::kNone) {
        return absl::UnavailableError(
            absl::StrCat("the holder closed the raw connection (", where, ")"));
      }
      absl::Time now = absl::Now();
      if (now >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat("the deadline passed after ", *count, " of ", n,
                                                        " bytes on the raw connection (", where, ")"));
      }
      if (now - last_progress >= stall) {
        return absl::UnavailableError(absl::StrCat("no data on the raw connection (", where,
                                                   ") for ", absl::FormatDuration(stall)));
      }
      (void)(*conn)->Await(wait, std::min(deadline, now + kTick));
    }
    return absl::OkStatus();
  };
  // The holder acknowledges the token before the bytes: anything else (a TLS holder's
  // alert to a plain-text puller) is never taken for the object's bytes.
  uint8_t ack[sizeof(kRawAck) - 1];
  int64_t ack_got = 0;
  DROVER_RETURN_IF_ERROR(read_exactly(ack, sizeof(ack), &ack_got, nullptr));
  if (std::memcmp(ack, kRawAck, sizeof(ack)) != 0) {
    return absl::UnavailableError(absl::StrCat(
        "the raw offer at ", where,
        " answered the token with bytes that are not drover's acknowledgement (a holder "
        "with TLS answering a puller without, or another program on that port): every node "
        "of a cluster must use the same TLS setting"));
  }
  return read_exactly(dst, want, got, progress);
  return absl::OkStatus();
}

}  // namespace drover
