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

bool Retry(int err) { return err == EAGAIN || err == EWOULDBLOCK || err == EINTR; }

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

absl::StatusOr<int> AcceptRawReader(int listener, const std::string& token,
                                    absl::Duration connect_timeout,
                                    const std::function<bool()>& cancelled,
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
  ScopedFd conn(cfd);
  SetTimeouts(conn.get(), kTick);
  std::string got(token.size(), '\0');
  size_t have = 0;
  while (have < got.size()) {
    if (cancelled() || absl::Now() >= give_up) break;
    ssize_t k = ::recv(conn.get(), &got[have], got.size() - have, 0);
    if (k == 0) break;
    if (k < 0) {
      if (Retry(errno)) continue;
      break;
    }
    have += static_cast<size_t>(k);
  }
  if (have < got.size() || !SameToken(got, token)) {
    return absl::PermissionDeniedError(
        absl::StrCat("ReadObject of ", printable_id,
                     ": the raw connection did not present the offer's token"));
  }
  return conn.Release();
}

absl::Status SendRaw(int fd, const uint8_t* data, int64_t size, absl::Duration stall,
                     const std::function<bool()>& cancelled, const std::string& printable_id,
                     int64_t* sent) {
  *sent = 0;
  int64_t left = size;
  absl::Time last_progress = absl::Now();
  while (left > 0) {
    if (cancelled()) {
      return absl::CancelledError(absl::StrCat("the reader of ", printable_id,
                                               " went away after ", *sent, " bytes"));
    }
    ssize_t k = ::send(fd, data, std::min<int64_t>(left, kRawIoBytes), MSG_NOSIGNAL);
    if (k > 0) {
      data += k;
      left -= k;
      *sent += k;
      last_progress = absl::Now();
      continue;
    }
    if (k < 0 && Retry(errno)) {
      if (absl::Now() - last_progress < stall) continue;
      return absl::UnavailableError(absl::StrCat("the reader of ", printable_id,
                                                 " took nothing for ",
                                                 absl::FormatDuration(stall), " after ", *sent,
                                                 " bytes"));
    }
    return absl::UnavailableError(absl::StrCat("the raw connection for ", printable_id,
                                               " broke after ", *sent,
                                               " bytes: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status ReceiveRaw(const std::string& ip, int port, const std::string& token,
                        uint8_t* dst, int64_t want, absl::Time deadline,
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
  size_t sent = 0;
  while (sent < token.size()) {
    ssize_t k = ::send(fd.get(), token.data() + sent, token.size() - sent, MSG_NOSIGNAL);
    if (k > 0) {
      sent += static_cast<size_t>(k);
    } else if (k < 0 && Retry(errno) && absl::Now() < connect_by && !stop) {
      continue;
    } else {
      return absl::UnavailableError(absl::StrCat("cannot send the token to the raw offer at ",
                                                 where, ": ", std::strerror(errno)));
    }
  }
  *connected = true;
  absl::Time last_progress = absl::Now();
  while (*got < want) {
    if (stop) return absl::UnavailableError("shutting down");
    ssize_t k = ::recv(fd.get(), dst + *got,
                       static_cast<size_t>(std::min<int64_t>(want - *got, kRawIoBytes)), 0);
    if (k > 0) {
      *got += k;
      if (progress != nullptr) *progress = *got;
      last_progress = absl::Now();
      continue;
    }
    if (k == 0) {
      return absl::UnavailableError(
          absl::StrCat("the holder closed the raw connection (", where, ")"));
    }
    if (!Retry(errno)) {
      return absl::UnavailableError(
          absl::StrCat("the raw connection (", where, ") broke: ", std::strerror(errno)));
    }
    absl::Time now = absl::Now();
    if (now >= deadline) return absl::DeadlineExceededError("the deadline passed");
    if (now - last_progress >= stall) {
      return absl::UnavailableError(absl::StrCat("no data on the raw connection (", where,
                                                 ") for ", absl::FormatDuration(stall)));
    }
  }
  return absl::OkStatus();
}

}  // namespace drover
