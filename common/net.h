// Addresses and ports.
#ifndef DROVER_COMMON_NET_H_
#define DROVER_COMMON_NET_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace drover {

struct HostPort {
  std::string host;
  int port = 0;
};

// "host:port" or "[v6]:port"; the port must be 1..65535 (0 allowed if `allow_zero`).
absl::StatusOr<HostPort> ParseHostPort(const std::string& s, bool allow_zero = false);

// The local address this machine would use to reach `host` (no packet is sent).
// This is how an agent learns the address other nodes can reach it at.
absl::StatusOr<std::string> LocalAddressFor(const std::string& host);

// A TCP port on `ip` that is free right now (bound to port 0, then released).
absl::StatusOr<int> PickFreePort(const std::string& ip = "127.0.0.1");

// A TCP connection to "host:port" (a name or a numeric address), made by `deadline`:
// the socket (blocking, close-on-exec, TCP_NODELAY), owned by the caller. UNAVAILABLE
// if the host does not resolve, nobody listens or the time passes.
absl::StatusOr<int> ConnectTcp(const std::string& host_port, absl::Time deadline);

// The machine's hostname.
std::string Hostname();

// Name of the network interface that holds IPv4 address `ip` ("eth0", "lo"), or "".
// Workers get it as GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME: Gloo and NCCL otherwise pick
// the address the hostname resolves to, which is often loopback.
std::string InterfaceForAddress(const std::string& ip);

// The first IPv4 address of an interface that is up and not loopback, or "".
std::string FirstNonLoopbackAddress();

}  // namespace drover

#endif  // DROVER_COMMON_NET_H_
