// ThreadGroup: detached threads that an owner can wait for. For work that may block for
// a long time (an RPC that waits, a reader of a socket) and that the owner must not
// outlive: Spawn runs it on a new thread; Close refuses new ones; Wait returns once every
// spawned thread has finished.
//
// Thread safety: thread-safe. A thread of the group may Spawn more (not Wait).
#ifndef DROVER_COMMON_THREAD_GROUP_H_
#define DROVER_COMMON_THREAD_GROUP_H_

#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace drover {

class ThreadGroup {
 public:
  ThreadGroup() = default;
  // Waits for the threads (after Close).
  ~ThreadGroup();
  ThreadGroup(const ThreadGroup&) = delete;
  ThreadGroup& operator=(const ThreadGroup&) = delete;

  // Runs `fn` on a new detached thread. False (and `fn` not run) once closed.
  bool Spawn(std::function<void()> fn);
  // Refuses further Spawns.
  void Close();
  // Waits until every spawned thread has returned. REQUIRES: not called from one.
  void Wait();

 private:
  absl::Mutex mu_;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace drover

#endif  // DROVER_COMMON_THREAD_GROUP_H_
