// ConnectionLoop: the one thread that reads every worker connection of this process's
// owner side (TaskSubmitter's leased workers, ActorClient's actors), on an EventLoop
// (common/event_loop.h), instead of a reader thread per connection. So the process's
// thread count does not grow with its connections.
//
// Each watched connection's frames go, whole and in arrival order, to its `on_frame`
// on the loop thread; once it ends (its peer closed it, it broke, an oversize frame,
// or this side shut it down with FramedSocket::Shutdown) its `on_closed` runs once with
// why, and the loop lets go of it. Handlers run without the loop's lock and must not
// block for long: every connection waits for them (slow work such as asking an agent
// how a worker died goes to a pool). Sends do not go through the loop: callers keep
// sending with FramedSocket::Send from their own threads.
//
// Thread safety: Watch and Stop from any thread. The handlers of a connection run on
// the loop thread, one at a time.
#ifndef DROVER_SDK_RUNTIME_CONNECTION_LOOP_H_
#define DROVER_SDK_RUNTIME_CONNECTION_LOOP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <thread>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/event_loop.h"
#include "common/framed_socket.h"

namespace drover::internal {

class ConnectionLoop {
 public:
  using FrameFn = std::function<void(std::string_view payload)>;
  using ClosedFn = std::function<void(const absl::Status& why)>;

  ConnectionLoop() = default;
  // Stops (see Stop).
  ~ConnectionLoop();
  ConnectionLoop(const ConnectionLoop&) = delete;
  ConnectionLoop& operator=(const ConnectionLoop&) = delete;

  // Reads `sock` on the loop (starting the loop thread on first use) and sets it
  // non-blocking. `sock` must stay alive until `on_closed` has run (its handlers
  // usually hold its owner). FAILED_PRECONDITION once stopped.
  absl::Status Watch(FramedSocket* sock, FrameFn on_frame, ClosedFn on_closed)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the loop thread and joins it; connections still watched are dropped without
  // their `on_closed` (their owners have shut them down and failed their work).
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);
  // Connections watched now.
  size_t watched() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    FramedSocket* sock;
    FrameFn on_frame;
    ClosedFn on_closed;
    bool wants_write = false;  // a TLS read waits for writability (loop thread only)
  };
  void Run();
  void Serve(uint64_t key, const std::shared_ptr<Entry>& e);

  EventLoop loop_;
  absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_key_ ABSL_GUARDED_BY(mu_) = 1;
  std::unordered_map<uint64_t, std::shared_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace drover::internal

#endif  // DROVER_SDK_RUNTIME_CONNECTION_LOOP_H_
