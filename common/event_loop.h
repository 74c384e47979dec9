// EventLoop: an epoll set whose registrations carry a 64-bit key the owner picks, and an
// eventfd that any thread may use to wake it. The one loop under the framed servers
// (common/frame_server.h: task workers, queue hosts) and the object store's reactor
// (object_store/store_reactor.h), which keeps its own polling policy around Wait.
//
// Ownership: it owns the epoll set and the eventfd, not the descriptors it watches.
// Thread safety: Wait and Drain from the loop's one thread; Wake from any thread. Add,
// Modify and Remove are epoll_ctl calls, safe from any thread (the kernel orders
// them): the SDK's ConnectionLoop arms and disarms EPOLLOUT from the threads that
// send; the framed servers and the store's reactor call them from the loop only.
#ifndef DROVER_COMMON_EVENT_LOOP_H_
#define DROVER_COMMON_EVENT_LOOP_H_

#include <sys/epoll.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace drover {

class EventLoop {
 public:
  // The key of the wake-up eventfd's events (owners' keys must differ).
  static constexpr uint64_t kWakeKey = ~0ull;

  EventLoop() = default;
  // Closes the epoll set and the eventfd (not the watched descriptors).
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Creates the epoll set and the eventfd (watched under kWakeKey).
  absl::Status Init();

  absl::Status Add(int fd, uint64_t key, uint32_t events);
  absl::Status Modify(int fd, uint64_t key, uint32_t events);
  void Remove(int fd);

  // One epoll_wait: the number of events (0 at the timeout), or -1 with errno.
  // `timeout_ms`: -1 waits for ever, 0 only looks.
  int Wait(epoll_event* events, int max_events, int timeout_ms);

  // Makes a wait return with a kWakeKey event until Drain. Any thread.
  void Wake();
  // Empties the eventfd (the owner saw the wake-up).
  void Drain();

  // Milliseconds from now until `deadline`, rounded up, for Wait: -1 for
  // InfiniteFuture, 0 once due.
  static int TimeoutMs(absl::Time deadline);

 private:
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
};

}  // namespace drover

#endif  // DROVER_COMMON_EVENT_LOOP_H_
