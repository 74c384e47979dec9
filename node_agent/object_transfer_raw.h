// The raw-TCP data path of object transfer: object bytes over a one-time plain TCP
// connection instead of gRPC messages, so that the only copies are the kernel's.
//
// The holder (ServeRaw in object_transfer_serve.cc) listens on the address the puller
// reaches it by (ListenOn, port 0, one connection), offers the port and a random token
// (NewRawToken) on the gRPC stream, accepts the one connection that presents the token
// (AcceptRawReader) and sends the bytes from the pinned object (SendRaw). The puller
// connects, presents the token and receives the bytes straight into the store
// allocation (ReceiveRaw). Every wait is bounded and cancellable; a peer that makes no
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

namespace drover {

inline constexpr size_t kRawTokenBytes = 32;

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
// presents `token`, and returns it (owned by the caller). `cancelled` is asked every
// 100 ms. Errors name the object (`printable_id`): CANCELLED, DEADLINE_EXCEEDED (no
// connection), PERMISSION_DENIED (the connection did not present the token).
absl::StatusOr<int> AcceptRawReader(int listener, const std::string& token,
                                    absl::Duration connect_timeout,
                                    const std::function<bool()>& cancelled,
                                    const std::string& printable_id);

// Holder side: sends `size` bytes from `data` on the connection `fd` (from
// AcceptRawReader); `*sent` counts them. CANCELLED once `cancelled()`, UNAVAILABLE if
// the reader took nothing for `stall` or the connection broke.
absl::Status SendRaw(int fd, const uint8_t* data, int64_t size, absl::Duration stall,
                     const std::function<bool()>& cancelled, const std::string& printable_id,
                     int64_t* sent);

// Puller side: connects to ip:port (within connect_timeout and the deadline), presents
// `token`, and receives `want` bytes into `dst`; `*got` counts them, `*connected` says
// whether the connection and the token got through. UNAVAILABLE if the connection
// cannot be made or breaks, the holder closes it early, nothing comes for `stall`, or
// `stop` is set; DEADLINE_EXCEEDED at the deadline. `progress` (may be null) follows
// `*got` for readers on other threads.
absl::Status ReceiveRaw(const std::string& ip, int port, const std::string& token,
                        uint8_t* dst, int64_t want, absl::Time deadline,
                        absl::Duration connect_timeout, absl::Duration stall,
                        const std::atomic<bool>& stop, int64_t* got, bool* connected,
                        std::atomic<int64_t>* progress = nullptr);

}  // namespace drover

#endif  // DROVER_NODE_AGENT_OBJECT_TRANSFER_RAW_H_
