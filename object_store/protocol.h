// Framing of the object store's control protocol over a SOCK_STREAM Unix socket.
//
// A frame is a 4-byte little-endian length N followed by N bytes of a serialized
// protobuf message (proto/object_store.proto). N is at most kMaxFrameSize; a larger
// length is a protocol error (the peer is broken or hostile), reported without
// allocating N bytes. File descriptors travel as SCM_RIGHTS ancillary data attached
// to the first byte of a frame (SendFd / RecvFrameWithFd).
//
// Two styles: blocking helpers for the client and tests (WriteFrame, ReadFrame), and
// FrameDecoder, an incremental parser the server feeds with whatever a non-blocking
// read returned.
//
// Thread safety: the free functions are reentrant; use one socket from one thread at
// a time. FrameDecoder is not thread-safe.
#ifndef DROVER_OBJECT_STORE_PROTOCOL_H_
#define DROVER_OBJECT_STORE_PROTOCOL_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "google/protobuf/message_lite.h"

namespace drover::object_store {

inline constexpr uint32_t kFrameHeaderSize = 4;
inline constexpr uint32_t kMaxFrameSize = 16u << 20;

// Overlapped seals (SealLeasedRequest): the store acknowledges in the word after the
// ready word, with the ready value if the object is sealed, or with this bit added if
// it is not (the reply says why).
inline constexpr uint64_t kSealAckFailed = 1ull << 63;

// Appends the frame of `msg` (header + serialized bytes) to `*out`. INVALID_ARGUMENT
// if the message is larger than kMaxFrameSize.
// Connects a SOCK_STREAM Unix socket (close-on-exec) to the store at `socket_path`.
// INVALID_ARGUMENT for a path that does not fit sockaddr_un; UNAVAILABLE (saying what
// to check) if nothing listens there, or if its queue of connections stays full for
// `timeout` (a stopped store's backlog fills up).
absl::StatusOr<int> ConnectToStore(const std::string& socket_path,
                                   absl::Duration timeout = absl::InfiniteDuration());

// poll(2) timeout in ms until `deadline` (-1 for an infinite deadline, rounded up,
// capped at 2^30); nullopt once the deadline has passed.
std::optional<int> PollTimeoutMs(absl::Time deadline);

absl::Status AppendFrame(const google::protobuf::MessageLite& msg, std::string* out);

// Writes all of `data` to the blocking socket `fd`, retrying on EINTR and partial
// writes. UNAVAILABLE if the peer is gone (EPIPE/ECONNRESET; SIGPIPE is suppressed).
absl::Status WriteAll(int fd, absl::string_view data);

// Reads exactly `n` bytes from the blocking socket `fd` into `buf`. UNAVAILABLE on EOF
// (with how many bytes came) or a socket error.
absl::Status ReadExact(int fd, char* buf, size_t n);

// Serializes `msg` into `*scratch` (reused between calls to avoid allocation) and
// writes the frame with one write(2) where possible.
absl::Status WriteFrame(int fd, const google::protobuf::MessageLite& msg, std::string* scratch);

// Reads one frame from the blocking socket and parses it into `*msg`, using `*scratch`
// as the body buffer. INVALID_ARGUMENT for an oversize length or bytes that do not
// parse; UNAVAILABLE for EOF or a socket error (including EOF mid-frame).
absl::Status ReadFrame(int fd, google::protobuf::MessageLite* msg, std::string* scratch,
                       uint32_t max_frame_size = kMaxFrameSize);

// Sends `payload` (at least one byte) on socket `sock` with `fd_to_send` attached as
// SCM_RIGHTS to its first byte. The caller keeps ownership of `fd_to_send`.
absl::Status SendFd(int sock, int fd_to_send, absl::string_view payload);

// Receives exactly `n` (>= 1) bytes into `buf` and the one descriptor attached to them
// (close-on-exec). The caller owns the returned descriptor. INVALID_ARGUMENT if no
// descriptor came (or more than one: the extra ones are closed); UNAVAILABLE on EOF.
absl::StatusOr<int> RecvFd(int sock, char* buf, size_t n);

// Reads one frame whose first byte carries a descriptor (RecvFd for the header, then
// the body), parses it into `*msg`, and returns the descriptor (owned by the caller).
absl::StatusOr<int> RecvFrameWithFd(int sock, google::protobuf::MessageLite* msg,
                                    uint32_t max_frame_size = kMaxFrameSize);

// A connection to the store and the arena descriptor its hello carried; both the
// caller's to close.
struct StoreGreeting {
  int fd = -1;
  int arena_fd = -1;
};
// Connects to the store at `socket_path` (ConnectToStore) and reads its hello (a frame
// whose first byte carries the arena descriptor, parsed into `*hello`) within
// `timeout`, which stays set as the socket's receive timeout. UNAVAILABLE naming the
// path if nothing listens there or no hello came.
absl::StatusOr<StoreGreeting> ConnectAndReceiveHello(const std::string& socket_path,
                                                     absl::Duration timeout,
                                                     google::protobuf::MessageLite* hello);

// Incremental frame parser for non-blocking sockets:
//   decoder.Append(bytes, n);
//   absl::string_view body;
//   while (true) { auto got = decoder.Next(&body); if (!got.ok()) close; if (!*got) break; ... }
// `body` stays valid until the next Append or Next call.
class FrameDecoder {
 public:
  explicit FrameDecoder(uint32_t max_frame_size = kMaxFrameSize)
      : max_frame_size_(max_frame_size) {}

  // Returns a buffer of at least `n` writable bytes at the end of the pending data;
  // after reading into it, call Commit with how many bytes were written.
  char* PrepareWrite(size_t n);
  void Commit(size_t n);
  // Copies bytes in (PrepareWrite + memcpy + Commit).
  void Append(const char* data, size_t n);

  // True and `*body` set if a whole frame is buffered; false if more bytes are needed;
  // INVALID_ARGUMENT if the next frame's length exceeds the maximum (the stream cannot
  // be resynchronized: close it).
  absl::StatusOr<bool> Next(absl::string_view* body);

  // Bytes buffered but not yet returned by Next.
  size_t buffered() const { return end_ - start_; }

 private:
  void Compact();

  uint32_t max_frame_size_;
  std::string buf_;
  size_t start_ = 0;  // first unconsumed byte
  size_t end_ = 0;    // one past the last valid byte
};

}  // namespace drover::object_store

#endif  // DROVER_OBJECT_STORE_PROTOCOL_H_
