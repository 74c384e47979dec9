#include "common/thread_group.h"

#include <thread>

namespace drover {

ThreadGroup::~ThreadGroup() {
  Close();
  Wait();
}

bool ThreadGroup::Spawn(std::function<void()> fn) {
  {
    absl::MutexLock l(&mu_);
    if (closed_) return false;
    ++running_;
  }
  std::thread([this, fn = std::move(fn)] {
    fn();
    absl::MutexLock l(&mu_);
    --running_;
  }).detach();
  return true;
}

void ThreadGroup::Close() {
  absl::MutexLock l(&mu_);
  closed_ = true;
}

void ThreadGroup::Wait() {
  absl::MutexLock l(&mu_);
  mu_.Await(absl::Condition(
      +[](int* running) { return *running == 0; }, &running_));
}

}  // namespace drover
