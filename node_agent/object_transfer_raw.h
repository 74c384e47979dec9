// The raw-TCP data path of object transfer: object bytes over a one-time TCP connection
// instead of gRPC messages, so that the only copies are the kernel's (and, in a TLS
// cluster, OpenSSL's encryption: the connection is a TLS one, the holder's certificate
// checked against the cluster CA before the token is sent).
//
// The holder (ServeRaw in object_transfer_serve.cc) listens on the address the puller
// reaches it by (ListenOn, port 0, one connection), offers the port and a random token
// (NewRawToken) on the gRPC stream, accepts the one connection that presents the token
// (AcceptRawReader) and sends the bytes from the pinned object (SendRaw). The puller
// connects, presents the token, reads the holder's acknowledgement (kRawAck: bytes that
// are anything else, such as a TLS alert to a plain-text puller, are never taken for the
// object's) and receives the bytes straight into the store allocation (ReceiveRaw). Every wait is bounded and cancellable; a peer that makes no
// progress for `stall` fails the transfer.
//
// Thread safety: stateless functions; each connection is used by one thread.
#ifndef DROVER_NODE_AGENT_OBJECT_TRANSFER_RAW_H_
#define DROVER_NODE_AGENT_OBJECT_TRANSFER_RAW_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/socket_stream.h"
#include "common/tls.h"

namespace drover {

inline constexpr size_t kRawTokenBytes = 32;
// What the holder sends once the token checks out, before the object's bytes.
inline constexpr char kRawAck[] = "drover-raw-ok\n";

// Owns a file descriptor (-1: none) and closes it.
class ScopedFd {
 public:
  explicit ScopedFd(int fd = -1) : fd_(fd) {}
  ~ScopedFd();
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }
  // Gives up ownership: returns the descriptor, which the caller must close.
  int Release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

// The numeric IP of the host part of "host:port" / "[v6]:port"; empty if unresolvable.
std::string NumericHostOf(const std::string& address);

// Listens on ip:0 with room for one pending connection and sets `*port`. Returns the
// socket (owned by the caller), or -1 with errno if `ip` is not numeric or not one of
// this host's.
int ListenOn(const std::string& ip, int* port);

// kRawTokenBytes random bytes.
absl::StatusOr<std::string> NewRawToken();

// Holder side: waits up to `connect_timeout` on `listener` for one connection that
// completes its handshake as `security` says (TLS or plain) and presents `token`, and
// returns it. `cancelled` is asked every 100 ms. Errors name the object
// (`printable_id`): CANCELLED, DEADLINE_EXCEEDED (no connection), PERMISSION_DENIED
// (the connection did not present the token), UNAVAILABLE (its TLS handshake failed).
absl::StatusOr<std::unique_ptr<SocketStream>> AcceptRawReader(
    int listener, const std::string& token, const TransportSecurity& security,
    absl::Duration connect_timeout, const std::function<bool()>& cancelled,
    const std::string& printable_id);

// Holder side: sends `size` bytes from `data` on `conn` (from AcceptRawReader); `*sent`
// counts them. CANCELLED once `cancelled()`, UNAVAILABLE if the reader took nothing for
// `stall` or the connection broke.
absl::Status SendRaw(SocketStream& conn, const uint8_t* data, int64_t size,
                     absl::Duration stall, const std::function<bool()>& cancelled,
                     const std::string& printable_id, int64_t* sent);

// Puller side: connects to ip:port (within connect_timeout and the deadline, TLS
// handshake included when `security` says TLS), presents `token`, and receives `want`
// bytes into `dst`; `*got` counts them, `*connected` says whether the connection and the
// token got through. UNAVAILABLE if the connection cannot be made or breaks, the holder
// closes it early, nothing comes for `stall`, or `stop` is set; DEADLINE_EXCEEDED at the
// deadline. `progress` (may be null) follows `*got` for readers on other threads.
absl::Status ReceiveRaw(const std::string& ip, int port, const std::string& token,
                        const TransportSecurity& security, uint8_t* dst, int64_t want,
                        absl::Time deadline,
                        absl::Duration connect_timeout, absl::Duration stall,
                        const std::atomic<bool>& stop, int64_t* got, bool* connected,
                        std::atomic<int64_t>* progress = nullptr);

}  // namespace drover

#endif  // DROVER_NODE_AGENT_OBJECT_TRANSFER_RAW_H_
