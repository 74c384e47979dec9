// SocketStream: a connected stream socket that is either plain or TLS (OpenSSL), with
// one interface for both, so the raw-socket paths (the task layer's frames, the object
// store's bulk transfers) encrypt without knowing how.
//
// Two ways to use it:
//   - non-blocking, from an event loop: ReadSome / WriteSome return at once and say
//     which readiness (read or write) to wait for before calling again;
//   - blocking with a deadline: Read / WriteAll / Handshake wait in poll() between tries.
// A plain stream over a blocking socket keeps the plain syscalls (recv/send) and their
// cost; a TLS stream always sets its socket non-blocking (so that no thread ever sleeps
// inside OpenSSL while holding the stream's lock).
//
// Ownership: the stream owns its socket and closes it.
// Thread safety: one thread may read while another writes (TLS calls are serialized by
// an internal mutex, held only for the non-blocking OpenSSL call, never while waiting);
// two concurrent readers or two concurrent writers are not allowed. Shutdown may be
// called from any thread and wakes a waiting Read.
#ifndef DROVER_COMMON_SOCKET_STREAM_H_
#define DROVER_COMMON_SOCKET_STREAM_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

typedef struct ssl_st SSL;

namespace drover {

// What a non-blocking call needs before it can make progress.
enum class IoWait { kNone, kRead, kWrite };

class SocketStream {
 public:
  // A plain stream over `fd` (owned).
  explicit SocketStream(int fd);
  // A TLS stream over `fd` (owned) with `ssl` (owned; already bound to `fd` and set to
  // its client or server role; the handshake is done by Handshake or by the first
  // read or write). Sets `fd` non-blocking.
  SocketStream(int fd, SSL* ssl, std::string peer);
  ~SocketStream();
  SocketStream(const SocketStream&) = delete;
  SocketStream& operator=(const SocketStream&) = delete;

  int fd() const { return fd_; }
  bool tls() const { return ssl_ != nullptr; }

  // Non-blocking read of up to `n` bytes: the count (0 means end of stream, when
  // `*wait` is kNone), or nothing yet with `*wait` naming what to wait for.
  // UNAVAILABLE when the connection broke or the TLS handshake failed (the message
  // says why, e.g. the peer's certificate is not signed by the cluster CA).
  absl::StatusOr<size_t> ReadSome(void* buf, size_t n, IoWait* wait);
  // Non-blocking write of up to `n` bytes: the count taken, or 0 with `*wait` set.
  absl::StatusOr<size_t> WriteSome(const void* buf, size_t n, IoWait* wait);

  // Blocking read: at least one byte, or 0 at the end of the stream.
  // DEADLINE_EXCEEDED at `deadline` (nothing was consumed), UNAVAILABLE as above.
  absl::StatusOr<size_t> Read(void* buf, size_t n, absl::Time deadline = absl::InfiniteFuture());
  // Blocking write of all `n` bytes. DEADLINE_EXCEEDED at `deadline` with `*written`
  // (if not null) saying how many went.
  absl::Status WriteAll(const void* buf, size_t n, absl::Time deadline = absl::InfiniteFuture(),
                        size_t* written = nullptr);
  // Completes the TLS handshake (a no-op for plain streams).
  absl::Status Handshake(absl::Time deadline);

  // Waits until the socket is ready for `wait` or `deadline` passes (DEADLINE_EXCEEDED).
  absl::Status Await(IoWait wait, absl::Time deadline);

  // shutdown(2) both ways: a waiting Read returns, later writes fail.
  void Shutdown();

 private:
  // Maps an OpenSSL result of `op` ("read", "write", "handshake").
  absl::StatusOr<size_t> TlsResult(int rc, const char* op, IoWait* wait)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int fd_;
  const std::string peer_;  // for messages ("the worker at 10.0.0.2:4123")
  absl::Mutex mu_;
  SSL* const ssl_ ABSL_PT_GUARDED_BY(mu_);
};

// The reason of the last OpenSSL errors on this thread (and clears them), e.g.
// "certificate verify failed"; `fallback` if there are none.
std::string TakeOpenSslError(const std::string& fallback);

}  // namespace drover

#endif  // DROVER_COMMON_SOCKET_STREAM_H_
