// ConnectionLoop: the one thread that reads every worker connection of this process's
// owner side (TaskSubmitter's leased workers, ActorClient's actors), on an EventLoop
// (common/event_loop.h), instead of a reader thread per connection, so the process's
// threads do not grow with its connections.
//
// What runs on the loop thread never blocks, so one peer that stops reading (a
// SIGSTOPped worker with a full socket) cannot hold up any other connection:
//   - each watched socket is in FramedSocket's event-loop mode: a Send from any thread
//     (the loop's included) writes what the socket takes and leaves the rest buffered;
//     the loop writes it out on EPOLLOUT;
//   - the handlers run here only read, take their owner's locks briefly and send that
//     way; what may block (asking an agent how a worker died, the scheduler about an
//     actor) they hand to a thread of their own;
//   - store deletes of objects released by the handlers (the last reference to a
//     task's stored argument) are collected (ObjectTable::DeferReleases) and made on a
//     thread of the loop's own.
//
// Each watched connection's frames go, whole and in arrival order, to its `on_frame`;
// once it ends (its peer closed it, it broke, an oversize frame, this side shut it
// down with FramedSocket::Shutdown, or the loop itself failed) its `on_closed` runs once
// with why, and the loop lets go of it.
//
// Shutdown is two phases: the owners shut their sockets (each core's Shutdown), then
// Stop ends the thread; neither waits on a peer.
//
// Thread safety: Watch, Stop and watched from any thread. The handlers of all
// connections run on the loop thread, one at a time, without the loop's lock.
// Lock order: a FramedSocket's lock, then an Entry's (senders arm EPOLLOUT with their
// socket's lock held), then the loop's mu_ is never taken under either.
#ifndef DROVER_SDK_RUNTIME_CONNECTION_LOOP_H_
#define DROVER_SDK_RUNTIME_CONNECTION_LOOP_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/event_loop.h"
#include "common/framed_socket.h"
#include "sdk/runtime/object_table.h"

namespace drover::internal {

class ConnectionLoop {
 public:
  using FrameFn = std::function<void(std::string_view payload)>;
  using ClosedFn = std::function<void(const absl::Status& why)>;
  using BatchEndFn = std::function<void()>;

  ConnectionLoop() = default;
  // Stops (see Stop). Every socket watched must have been let go or outlive the loop's
  // owner's use of it; the loop must outlive the sockets it watched (their Sends call it).
  ~ConnectionLoop();
  ConnectionLoop(const ConnectionLoop&) = delete;
  ConnectionLoop& operator=(const ConnectionLoop&) = delete;

  // Puts `sock` in event-loop mode and reads it on the loop (starting the loop thread
  // on first use). `sock` must stay alive until `on_closed` has run (its handlers
  // usually hold its owner). `peer` names the other end in its errors. `on_batch_end`
  // (may be empty) runs once per loop wake-up in which `sock` was read, after every
  // connection read in that wake-up was handled: an owner collects what its
  // `on_frame` calls decided to send and sends it there, one write per peer per wake-up
  // instead of one per frame. FAILED_PRECONDITION once stopped; the loop's error once
  // it failed.
  absl::Status Watch(FramedSocket* sock, std::string peer, FrameFn on_frame, ClosedFn on_closed,
                     BatchEndFn on_batch_end = nullptr) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the loop thread and joins it (it never waits on a peer: bounded). Connections
  // still watched are dropped without their `on_closed` (their owners have shut them
  // down and failed their work). Store deletes not yet begun are dropped (the store
  // frees a job's objects when it ends); one in progress (a restarting store) is waited
  // for up to kStopReleaseWait, then left to finish on its own: it uses only what it
  // owns (the batch carries the release functions, not the tables), so the cores and
  // the object table may go meanwhile.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);
  static constexpr absl::Duration kStopReleaseWait = absl::Seconds(2);
  // The loop's error once it failed (Watch then always fails with it); OK before.
  absl::Status failure() ABSL_LOCKS_EXCLUDED(mu_);
  // Connections watched now.
  size_t watched() ABSL_LOCKS_EXCLUDED(mu_);

  // For tests: how many times the loop thread's wait has returned (a loop that spins
  // on an event nobody handles counts thousands a second).
  uint64_t wakeups() const { return wakeups_.load(std::memory_order_relaxed); }

  // For tests: makes the loop fail as if epoll_wait had (every connection's on_closed
  // runs with the error; later Watch calls fail).
  void FailForTest() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    FramedSocket* sock = nullptr;
    uint64_t key = 0;
    FrameFn on_frame;
    ClosedFn on_closed;
    BatchEndFn on_batch_end;
    // The wake-up it was last read in (loop thread only): read once per wake-up.
    uint64_t read_in_wake = 0;
    // The epoll interest: senders arm EPOLLOUT from their threads (under their
    // FramedSocket's lock, which comes first in the lock order).
    absl::Mutex mu;
    bool send_wants ABSL_GUARDED_BY(mu) = false;
    bool read_wants ABSL_GUARDED_BY(mu) = false;  // a TLS read waits for writability
    uint32_t armed ABSL_GUARDED_BY(mu) = 0;
    bool removed ABSL_GUARDED_BY(mu) = false;
  };
  void Run();
  // Handles `events` of `e`. Read entries go to `read` (for their batch ends); those
  // read up to the per-event cap with more waiting go to `again`.
  void Serve(const std::shared_ptr<Entry>& e, uint32_t events, uint64_t wake,
             std::vector<std::shared_ptr<Entry>>* read,
             std::vector<std::shared_ptr<Entry>>* again);
  void Close(const std::shared_ptr<Entry>& e, const absl::Status& why);
  void Rearm(Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(e.mu);
  // The loop failed: every connection is told, and the loop thread ends.
  void Fail(const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);
  // Makes collected store deletes on the releaser thread.
  void Release(ObjectTable::DeferReleases::Batch batch) ABSL_LOCKS_EXCLUDED(mu_);

  EventLoop loop_;
  absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool fail_for_test_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failed_ ABSL_GUARDED_BY(mu_);
  uint64_t next_key_ ABSL_GUARDED_BY(mu_) = 1;
  std::unordered_map<uint64_t, std::shared_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
  // Store deletes of objects the handlers released: one thread, made on first use. Its
  // state is shared with it, so Stop may leave it in a delete that does not return.
  struct Releaser {
    absl::Mutex mu;
    std::deque<ObjectTable::DeferReleases::Batch> queue ABSL_GUARDED_BY(mu);
    bool stopping ABSL_GUARDED_BY(mu) = false;
    bool busy ABSL_GUARDED_BY(mu) = false;  // in a delete
  };
  static void ReleaserLoop(std::shared_ptr<Releaser> r);
  std::shared_ptr<Releaser> releaser_ ABSL_GUARDED_BY(mu_);
  std::thread releaser_thread_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
  std::atomic<uint64_t> wakeups_{0};
};

}  // namespace drover::internal

#endif  // DROVER_SDK_RUNTIME_CONNECTION_LOOP_H_
