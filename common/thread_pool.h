// A fixed set of worker threads running posted closures in FIFO order.
//
// Used for blocking outbound RPCs, so a slow or dead peer delays only the calls
// behind it on one worker, never the caller's lock holder. Thread-safe. The
// destructor runs every closure already posted, then joins the workers.
#ifndef DROVER_COMMON_THREAD_POOL_H_
#define DROVER_COMMON_THREAD_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace drover {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Post(std::function<void()> fn);

 private:
  void Run();

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace drover

#endif  // DROVER_COMMON_THREAD_POOL_H_
