// FramedSocket: protobuf messages over a stream socket (Unix or TCP, the latter with TLS
// when the cluster uses it), each framed as a 4-byte little-endian length and the
// serialized message. The task layer's direct channels (owner <-> worker, worker <->
// agent) use it; see proto/task.proto.
//
// Writes are batched without waiting: Send appends the frame to an output buffer and,
// unless another thread is already writing, writes the buffer out (and whatever other
// threads appended meanwhile) before it returns. So a burst of sends from several
// threads costs a few large writes, and a lone send costs one write.
//
// Reading is either blocking (Read, for a thread per connection) or incremental
// (FrameReader fed from a non-blocking socket, for an event loop).
//
// Event-loop mode (UseEventLoop, for sdk/runtime/connection_loop.h): the socket is
// non-blocking and Send never waits: what the socket does not take at once stays
// buffered, and the loop writes it out when the socket is writable (WriteReady), so
// no thread (the loop's included) ever blocks on a peer that does not read.
//
// Thread safety: Send may be called from any thread; Read from one thread at a time.
// Shutdown may be called from any thread and wakes a blocked Read.
#ifndef DROVER_COMMON_FRAMED_SOCKET_H_
#define DROVER_COMMON_FRAMED_SOCKET_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/socket_stream.h"
#include "common/tls.h"
#include "google/protobuf/message_lite.h"

namespace drover {

// Largest frame accepted (larger lengths are a protocol error).
inline constexpr uint32_t kMaxFrameBytes = 64u << 20;

// Splits a byte stream into frames.
class FrameReader {
 public:
  // Where to read up to `n` new bytes into; call Commit(k) after reading k of them.
  char* WritePtr(size_t n);
  void Commit(size_t k) { end_ += k; }
  // The next complete frame's payload, if one is buffered. An error for a frame
  // longer than kMaxFrameBytes.
  absl::StatusOr<bool> Next(std::string_view* payload);
  // Bytes buffered but not yet returned by Next.
  size_t buffered() const { return end_ - begin_; }
  // Bytes of buffer held (at most about twice what has arrived, or 64 KiB ahead).
  size_t reserved() const { return buf_.size(); }

 private:
  std::string buf_;
  size_t begin_ = 0;
  size_t end_ = 0;
};

class FramedSocket {
 public:
  // Takes ownership of `fd` (a connected stream socket, blocking mode).
  explicit FramedSocket(int fd);
  // Over `stream` (plain or TLS).
  explicit FramedSocket(std::unique_ptr<SocketStream> stream);
  // Closes the socket.
  ~FramedSocket();
  FramedSocket(const FramedSocket&) = delete;
  FramedSocket& operator=(const FramedSocket&) = delete;

  // Connects to a Unix socket path, or to a TCP "host:port" secured as `security` says
  // (the TLS handshake, which checks the server, done within `timeout`). UNAVAILABLE if
  // nobody listens or the handshake fails (the message says why).
  static absl::StatusOr<std::unique_ptr<FramedSocket>> ConnectUnix(const std::string& path);
  static absl::StatusOr<std::unique_ptr<FramedSocket>> ConnectTcp(
      const std::string& host_port, const TransportSecurity& security = *ProcessTransport(),
      absl::Duration timeout = absl::Seconds(10));

  // Sends one frame (see the class comment). UNAVAILABLE once the connection broke.
  absl::Status Send(const google::protobuf::MessageLite& msg);
  // Sends frames already encoded with AppendFrame (a batch), the same way.
  absl::Status SendFrames(const std::string& frames);
  // Reads the next frame into `msg`, blocking. UNAVAILABLE on end of stream or error
  // (the message says which), DATA_LOSS for a frame that does not parse.
  absl::Status Read(google::protobuf::MessageLite* msg);
  // Shuts the socket down both ways: a blocked Read returns, later Sends fail.
  void Shutdown();

  // Event-loop mode (see the class comment): sets the socket non-blocking. From then
  // on `want_write(true)` is called when bytes stay buffered (the loop then watches
  // for writability and calls WriteReady), `want_write(false)` once they are all
  // written. `peer` names the other end in errors ("worker w1 on node n1").
  //
  // `want_write` runs on whichever thread sends (or the loop's), with this socket's
  // lock held: it may only arm a poller. Lock order: FramedSocket::mu_ before the
  // poller's own lock (ConnectionLoop's Entry::mu); never the other way.
  //
  // A peer that does not read cannot make the buffer grow without bound: a Send that
  // would leave more than `max_unsent` bytes unsent fails RESOURCE_EXHAUSTED (naming the
  // peer and the bytes unsent), and so does the connection, which is shut down.
  absl::Status UseEventLoop(std::function<void(bool)> want_write, std::string peer = "the peer",
                            size_t max_unsent = kMaxUnsentBytes) ABSL_LOCKS_EXCLUDED(mu_);
  static constexpr size_t kMaxUnsentBytes = size_t{1} << 30;
  // The loop, once the socket is writable: writes what it takes of the buffer now.
  void WriteReady() ABSL_LOCKS_EXCLUDED(mu_);
  // The loop, once the socket is readable: reads what has arrived (non-blocking, at
  // most about kMaxReadPerEvent bytes: `*more` says it stopped there, so the loop
  // serves the other connections and comes back) and calls `on_frame` with each whole
  // frame's payload (valid during the call). OK while the connection is open; once it
  // ended, after the frames that came before, why: UNAVAILABLE naming what happened
  // (closed by the peer, reset, shut down by this side), RESOURCE_EXHAUSTED (see
  // UseEventLoop), DATA_LOSS for an oversize frame. `*wants_write`: a TLS read must
  // wait until the socket is writable. A TLS write that waited for a read goes on
  // here. One thread at a time (as Read).
  absl::Status ReadReady(const std::function<void(std::string_view)>& on_frame,
                         bool* wants_write, bool* more = nullptr);
  static constexpr size_t kMaxReadPerEvent = 256 * 1024;
  // Bytes sent but not yet taken by the socket (event-loop mode).
  size_t unsent() ABSL_LOCKS_EXCLUDED(mu_);

  int fd() const { return stream_->fd(); }

 private:
  // Event-loop mode: writes `pending_` without waiting; what stays is left for the
  // loop (want_write armed). REQUIRES: writing_ was set by this caller.
  void WriteNonBlockingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WriteAll(const std::string& bytes);
  // Appends to pending_ with `append`, then writes as Send describes.
  template <typename Append>
  absl::Status Enqueue(Append append);

  const std::unique_ptr<SocketStream> stream_;
  FrameReader reader_;  // used by Read only

  absl::Mutex mu_;
  std::string pending_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  std::function<void(bool)> want_write_ ABSL_GUARDED_BY(mu_);  // set: event-loop mode
  std::string peer_ ABSL_GUARDED_BY(mu_);
  size_t max_unsent_ ABSL_GUARDED_BY(mu_) = kMaxUnsentBytes;
  bool armed_ ABSL_GUARDED_BY(mu_) = false;  // want_write(true) told, not yet undone
  // A TLS write must read first (renegotiation, key update): it goes on after the next
  // read event, not on writability (the socket is writable: the loop would spin).
  bool write_waits_read_ ABSL_GUARDED_BY(mu_) = false;
  // Shutdown was called: the end of the stream that follows is this side's doing.
  std::atomic<bool> shut_down_{false};
};

// For event loops over non-blocking sockets (a task worker's, a queue host's): reads
// what `stream` has now into `reader` (on a TLS stream, until OpenSSL holds no more);
// false once the stream ended or broke. Sets `*read_wants_write` when a TLS read (its
// handshake) must wait until the socket is writable: the loop then watches for that and
// reads again.
bool ReadAvailable(SocketStream& stream, FrameReader& reader, bool* read_wants_write);
// Writes what the socket takes of `out` now and erases that; false once it broke.
// `*waits_read` (if not null): a TLS write must wait for a read event to go on.
bool WriteAvailable(SocketStream& stream, std::string* out, bool* waits_read = nullptr);

// Appends one frame (length + payload) to `out`.
void AppendFrame(const google::protobuf::MessageLite& msg, std::string* out);

// A listening Unix socket at `path` (an old socket file there is replaced), mode
// 0600. Returns the fd.
absl::StatusOr<int> ListenUnix(const std::string& path, int backlog = 128);
// A listening TCP socket on `ip`, port 0 (any free port). Returns the fd and the port.
absl::StatusOr<int> ListenTcp(const std::string& ip, int* port, int backlog = 128);
// Sets O_NONBLOCK (or clears it).
absl::Status SetNonBlocking(int fd, bool on = true);
// TCP_NODELAY on a TCP socket (a no-op for other sockets).
void SetNoDelay(int fd);

// Compares two secrets in time independent of where they differ.
bool ConstantTimeEquals(const std::string& a, const std::string& b);

}  // namespace drover

#endif  // DROVER_COMMON_FRAMED_SOCKET_H_
