// StoreReactor: the store's sockets and its event loop's waiting. It owns the
// listening Unix socket, the event loop (common/event_loop.h, the one the task layer's
// servers run on too: the epoll set and the eventfd that stops the loop), and every
// client connection: accepting (with the StoreHello that carries the arena's
// descriptor), reading frames, queueing and flushing replies, and closing. It knows
// nothing of what a request means (request_switch.h) and decides nothing about
// polling (polling_policy.h): it carries out the policy's steps.
//
// A connection marked closing (MarkClosing: EOF, a socket error, an oversize frame, a
// client that does not read its replies) is only closed by CloseMarked, between two
// rounds of events, so that no one holds a dangling StoreConn in the middle of one.
//
// Thread safety: one thread (the store's loop) calls everything, except Wake, which
// any thread may call.
#ifndef DROVER_OBJECT_STORE_STORE_REACTOR_H_
#define DROVER_OBJECT_STORE_STORE_REACTOR_H_

#include <sys/epoll.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/event_loop.h"
#include "object_store/object_id.h"
#include "object_store/polling_policy.h"
#include "object_store/protocol.h"
#include "proto/object_store.pb.h"

namespace drover::object_store {

// One client's connection.
struct StoreConn {
  ClientId id = 0;
  int fd = -1;
  FrameDecoder in;
  std::string out;          // replies not yet sent, from out_start on
  size_t out_start = 0;
  bool want_write = false;  // waiting for EPOLLOUT
  bool batching = false;    // in a ReplyBatch: replies are flushed once at its end
  bool closing = false;     // marked; closed by CloseMarked
};

class StoreReactor {
 public:
  // `arena_fd` and `arena_capacity` go to every client in its hello; the descriptor
  // stays the caller's. `stay_awake`: ServerOptions::stay_awake.
  StoreReactor(int arena_fd, uint64_t arena_capacity, absl::Duration stay_awake);
  // Closes every socket.
  ~StoreReactor();
  StoreReactor(const StoreReactor&) = delete;
  StoreReactor& operator=(const StoreReactor&) = delete;

  // Binds and listens on `path` (mode 0600; its directory created 0700 if missing; a
  // stale socket file replaced, a live one refused) and sets up epoll.
  absl::Status Listen(const std::string& path);
  // True once Listen created the socket file (so it is the caller's to remove).
  bool bound() const { return bound_; }
  // Makes the loop's next Dispatch report a stop. Any thread.
  void Wake();

  // Waits for events: polls while the polling policy says so (after requests), else
  // blocks until an event or `next_deadline` (a Get's; InfiniteFuture for none).
  // Returns the number of events, 0 at the deadline, or -1 with errno (EINTR: again).
  int Wait(epoll_event* events, int max_events, absl::Time next_deadline);
  // A request came: the policy may keep the loop awake.
  void StayAwake() { policy_.OnRequest(absl::Now()); }

  // Handles the reactor's own part of an event (the stop eventfd, new connections,
  // a connection writable again) and returns the connection that has bytes to read,
  // or nullptr. `*stop` is set when Wake was called.
  StoreConn* Dispatch(const epoll_event& event, bool* stop);

  // Reading, one read() per call into c.in, charged to `*budget` (bytes a wake-up
  // may read, so one busy client cannot starve the others).
  enum class ReadResult {
    kMore,     // read a full chunk: handle its frames, then read again
    kLast,     // read the rest (or the budget is spent): handle its frames and stop
    kNothing,  // nothing to read, or the connection failed (marked closing)
  };
  ReadResult Read(StoreConn& c, size_t* budget);
  // The next whole frame read from `c` (valid until the next Read or NextFrame);
  // false if none is buffered, or the frame is oversize (then `c` is marked closing).
  bool NextFrame(StoreConn& c, absl::string_view* body);

  // Queues `reply` on `c` and sends it, unless a ReplyBatch is open on `c` (then at
  // its end). A reply beyond the frame limit is answered with RESOURCE_EXHAUSTED
  // instead; more than 64 MiB queued closes the connection.
  void Send(StoreConn& c, const proto::StoreReply& reply);
  // Sends what is queued now, if more requests are buffered behind (a leased put's
  // reply goes out before the store turns to the frames behind it).
  void FlushBeforeMore(StoreConn& c);
  void MarkClosing(StoreConn& c, absl::string_view why);

  // Open for the frames of one read: their replies go out in one send() at the end.
  class ReplyBatch {
   public:
    ReplyBatch(StoreReactor* reactor, StoreConn& c) : reactor_(reactor), c_(c) {
      c_.batching = true;
    }
    ~ReplyBatch();
    ReplyBatch(const ReplyBatch&) = delete;
    ReplyBatch& operator=(const ReplyBatch&) = delete;

   private:
    StoreReactor* reactor_;
    StoreConn& c_;
  };

  // Closes the connections marked closing and appends (client, why) for each to
  // `*closed`.
  void CloseMarked(std::vector<std::pair<ClientId, std::string>>* closed);

  // The connection of `client`, or nullptr.
  StoreConn* Find(ClientId client);
  size_t connections() const { return conns_.size(); }

 private:
  absl::Status Watch(int fd, uint64_t key, uint32_t events, bool add);
  void AcceptAll();
  void Flush(StoreConn& c);
  // Moves this thread to another allowed CPU (PollingPolicy::Step::kMove).
  static void MoveOffThisCpu();
  // This thread's involuntary context switches so far.
  static uint64_t InvoluntarySwitches();

  const int arena_fd_;
  const uint64_t arena_capacity_;
  PollingPolicy policy_;
  int listen_fd_ = -1;
  EventLoop loop_;
  int spare_fd_ = -1;  // given up to accept (and drop) a client when out of descriptors
  bool bound_ = false;
  ClientId next_client_id_ = 1;
  std::unordered_map<ClientId, StoreConn> conns_;
  std::vector<std::pair<ClientId, std::string>> close_reasons_;
};

}  // namespace drover::object_store

#endif  // DROVER_OBJECT_STORE_STORE_REACTOR_H_
