#include "common/net.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace drover {

absl::StatusOr<HostPort> ParseHostPort(const std::string& s, bool allow_zero) {
  auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("address '", s, "' is not of the form HOST:PORT"));
  }
  HostPort hp;
  hp.host = s.substr(0, colon);
  if (hp.host.size() > 2 && hp.host.front() == '[' && hp.host.back() == ']') {
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  }
  if (!absl::SimpleAtoi(s.substr(colon + 1), &hp.port) || hp.port < (allow_zero ? 0 : 1) ||
      hp.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("address '", s, "' has an invalid port (want 1..65535)"));
  }
  return hp;
}

absl::StatusOr<std::string> LocalAddressFor(const std::string& host) {
  struct addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  struct addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), "9", &hints, &res);
  if (rc != 0 || res == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("cannot resolve '", host, "': ", gai_strerror(rc)));
  }
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    ::freeaddrinfo(res);
    return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  }
  rc = ::connect(fd, res->ai_addr, res->ai_addrlen);
  ::freeaddrinfo(res);
  if (rc != 0) {
    int err = errno;
    ::close(fd);
    return absl::UnavailableError(
        absl::StrCat("no route to '", host, "': ", std::strerror(err)));
  }
  struct sockaddr_in local;
  socklen_t len = sizeof(local);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len);
  ::close(fd);
  char buf[INET_ADDRSTRLEN];
  ::inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf));
  return std::string(buf);
}

absl::StatusOr<int> PickFreePort(const std::string& ip) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  struct sockaddr_in addr;
  std::memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  if (::inet_pton(AF_INET, ip.c_str(), &addr.sin_addr) != 1) {
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    ::close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot bind a port on ", ip, ": ", std::strerror(err)));
  }
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

namespace {

// Calls fn(name, ipv4 text, flags) for every IPv4 interface address.
template <typename Fn>
void ForEachIpv4(Fn fn) {
  struct ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return;
  for (auto* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    char buf[INET_ADDRSTRLEN];
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf,
                sizeof(buf));
    if (fn(std::string(a->ifa_name), std::string(buf), a->ifa_flags)) break;
  }
  ::freeifaddrs(list);
}

}  // namespace

std::string InterfaceForAddress(const std::string& ip) {
  std::string found;
  ForEachIpv4([&](const std::string& name, const std::string& addr, unsigned) {
    if (addr != ip) return false;
    found = name;
    return true;
  });
  return found;
}

std::string FirstNonLoopbackAddress() {
  std::string found;
  ForEachIpv4([&](const std::string&, const std::string& addr, unsigned flags) {
    if ((flags & IFF_UP) == 0 || (flags & IFF_LOOPBACK) != 0) return false;
    found = addr;
    return true;
  });
  return found;
}

absl::StatusOr<int> ConnectTcp(const std::string& host_port, absl::Time deadline) {
  absl::StatusOr<HostPort> hp = ParseHostPort(host_port);
  if (!hp.ok()) return hp.status();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(hp->host.c_str(), absl::StrCat(hp->port).c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve '", hp->host, "': ", gai_strerror(rc)));
  }
  std::string error = "no address";
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    int fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    int err = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
      if (ms > 0 && ::poll(&p, 1, static_cast<int>(std::min<int64_t>(ms, 1 << 30))) > 0) {
        socklen_t len = sizeof(err);
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      } else {
        err = ETIMEDOUT;
      }
    }
    if (err == 0) {
      ::freeaddrinfo(res);
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL, 0) & ~O_NONBLOCK);
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return fd;
    }
    error = std::strerror(err);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return absl::UnavailableError(absl::StrCat("cannot connect to ", host_port, ": ", error));
}

std::string Hostname() {
  char buf[256] = {0};
  ::gethostname(buf, sizeof(buf) - 1);
  return buf;
}

}  // namespace drover
