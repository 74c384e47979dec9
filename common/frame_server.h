// The one event loop of the processes that serve framed connections: a task worker
// (sdk/runtime/worker_server.cc), a queue host (sdk/runtime/queue_host.cc) and, for its
// loop layer only, the object store (object_store/store_reactor.cc).
//
// Two layers:
//   - EventLoop (common/event_loop.h): an epoll set and a wake-up eventfd. Waiting is
//     the owner's (the store polls by its own policy; a worker spins briefly after work).
//   - FrameServer: on an EventLoop, listening Unix and TCP sockets (TCP ends TLS when the
//     transport says so), and connections (FrameConn) with framed reads (FrameReader,
//     common/framed_socket.h) and buffered writes. Poll waits once, accepts, reads every
//     whole frame into the handler, writes what the sockets take and watches for
//     writability only while output is left. A peer that closes, breaks, or sends a
//     frame longer than kMaxFrameBytes is closed and told to the handler; the loop goes
//     on with the others.
//
// Closing: a connection is closed only between frames. Handler code and failed writes
// mark it (FrameConn::MarkClosed); Poll closes what is marked before it returns, and
// CloseMarked does so at once. So a handler may keep a shared_ptr<FrameConn> (e.g. a
// queued task's caller) and check closed() later.
//
// Thread safety: one thread (the loop's) calls everything, except EventLoop::Wake and
// FrameServer::Wake, which any thread may call.
#ifndef DROVER_COMMON_FRAME_SERVER_H_
#define DROVER_COMMON_FRAME_SERVER_H_

#include <sys/epoll.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/event_loop.h"
#include "common/framed_socket.h"
#include "common/socket_stream.h"
#include "common/tls.h"
#include "google/protobuf/message_lite.h"

namespace drover {

class FrameServer;

// One connection of a FrameServer. Handlers that keep state per connection derive
// from it (FrameServer::Handler::NewConnection makes theirs).
class FrameConn {
 public:
  FrameConn() = default;
  virtual ~FrameConn();
  FrameConn(const FrameConn&) = delete;
  FrameConn& operator=(const FrameConn&) = delete;

  // Unique within its server, from 1, never reused.
  uint64_t id() const { return id_; }
  // The socket; -1 once closed.
  int fd() const { return stream_ != nullptr ? stream_->fd() : -1; }
  // Marked or closed: no more frames are read from or written to it.
  bool closed() const { return closed_; }
  // Asks the server to close it between frames (see the file comment).
  void MarkClosed();

  // Appends one frame to the output (nothing once closed); FrameServer::Flush (or Send)
  // writes it.
  void Queue(const google::protobuf::MessageLite& msg);

 private:
  friend class FrameServer;
  FrameServer* server_ = nullptr;
  uint64_t id_ = 0;
  std::unique_ptr<SocketStream> stream_;  // owns the socket (plain, or TLS)
  FrameReader reader_;
  std::string out_;
  bool read_wants_write_ = false;  // a TLS read (its handshake) waits to write
  bool watching_out_ = false;      // EPOLLOUT is in its registration
  bool closed_ = false;
};

class FrameServer {
 public:
  class Handler {
   public:
    virtual ~Handler() = default;
    // A new connection object (the server fills in its socket). Override to keep
    // per-connection state in a FrameConn subclass.
    virtual std::shared_ptr<FrameConn> NewConnection() { return std::make_shared<FrameConn>(); }
    // One whole frame's payload from `c` (valid during the call). MarkClosed drops `c`
    // after the call; later frames of it are not delivered.
    virtual void OnFrame(const std::shared_ptr<FrameConn>& c, std::string_view payload) = 0;
    // `c` is closed (its socket too): by its peer, a failure, an oversize frame, a peer
    // over max_queued_bytes, or MarkClosed. Once per connection; not from ~FrameServer.
    virtual void OnClosed(const std::shared_ptr<FrameConn>& c, std::string_view why) {}
  };

  struct Options {
    // Names the server in messages ("worker w-1", "queue 'jobs'").
    std::string name = "frame server";
    // A connection whose unwritten output grows beyond this is closed (its peer does not
    // read); 0: no limit.
    size_t max_queued_bytes = 0;
    // Connections accepted on the TCP socket are TLS ends of this transport when it says
    // TLS. Null: plain.
    const TransportSecurity* tcp_security = nullptr;
  };

  // `handler` must outlive the server.
  FrameServer(Handler* handler, Options options);
  // Closes every socket (listening ones too) without calling the handler.
  ~FrameServer();
  FrameServer(const FrameServer&) = delete;
  FrameServer& operator=(const FrameServer&) = delete;

  absl::Status Init();
  // REQUIRES: Init succeeded, for all below.
  // Listens on a Unix socket at `path` (mode 0600; an old socket file replaced).
  absl::Status ListenUnix(const std::string& path);
  // Listens on TCP `ip`, any free port; returns the port.
  absl::StatusOr<int> ListenTcp(const std::string& ip);
  // Serves a socket connected elsewhere (e.g. one this process dialed) as a connection,
  // `c` (null: the handler's NewConnection()). Sets it non-blocking.
  absl::StatusOr<std::shared_ptr<FrameConn>> Adopt(std::unique_ptr<SocketStream> stream,
                                                   std::shared_ptr<FrameConn> c = nullptr);
  // Watches a descriptor the caller owns (a pipe, an eventfd): `on_ready` runs in Poll
  // when it is readable.
  absl::Status WatchFd(int fd, std::function<void()> on_ready);

  // Waits up to `timeout_ms` (-1: for ever, 0: only looks) for events once and handles
  // them, then closes what is marked. Returns the number of events (0: none), or -1
  // with errno when epoll fails (EINTR counts as 0 events).
  int Poll(int timeout_ms);
  // Makes the current or next Poll return and woken() true. Any thread.
  void Wake() { loop_.Wake(); }
  bool woken() const { return woken_; }

  // Queues `msg` on `c` and writes what the socket takes now.
  void Send(const std::shared_ptr<FrameConn>& c, const google::protobuf::MessageLite& msg);
  // Writes what `c` has queued that the socket takes now; the rest when it is writable.
  // A write that fails marks `c` closed.
  void Flush(FrameConn& c);
  // Flush for every connection with output.
  void FlushAll();
  // Closes the connections marked closed, telling the handler, until none is left.
  void CloseMarked();

  // Every open connection, in the order they came.
  template <typename F>
  void ForEach(F f) {
    for (auto& [id, c] : conns_) f(c);
  }
  std::shared_ptr<FrameConn> Find(uint64_t id) const;

 private:
  // Keys of the listening sockets and watched descriptors (connections use their ids).
  static constexpr uint64_t kUnixKey = ~0ull - 1;
  static constexpr uint64_t kTcpKey = ~0ull - 2;
  static constexpr uint64_t kFdKeyBase = 1ull << 62;

  void Accept(int listen_fd, bool tcp);
  absl::Status Register(const std::shared_ptr<FrameConn>& c);
  void Dispatch(const epoll_event& ev);
  // Reads what `c` has and hands its frames to the handler.
  void ReadFrom(const std::shared_ptr<FrameConn>& c);
  // EPOLLIN, and EPOLLOUT while output is left or a TLS read waits to write.
  void UpdateEvents(FrameConn& c);
  friend class FrameConn;
  // Marks `c` closed for `why` (the first reason is the one told).
  void Mark(FrameConn& c, std::string why);

  Handler* const handler_;
  const Options options_;
  EventLoop loop_;
  int unix_fd_ = -1;
  int tcp_fd_ = -1;
  std::string unix_path_;
  bool woken_ = false;
  uint64_t next_id_ = 1;
  std::map<uint64_t, std::shared_ptr<FrameConn>> conns_;
  std::map<uint64_t, std::function<void()>> fds_;  // by key
  std::vector<std::pair<uint64_t, std::string>> closing_;  // marked: id, why
};

}  // namespace drover

#endif  // DROVER_COMMON_FRAME_SERVER_H_
