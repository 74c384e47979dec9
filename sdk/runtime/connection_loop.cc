#include "sdk/runtime/connection_loop.h"

#include <errno.h>
#include <sys/epoll.h>

#include <cstring>

#include "common/log.h"
#include "common/status_macros.h"

namespace drover::internal {

ConnectionLoop::~ConnectionLoop() { Stop(); }

absl::Status ConnectionLoop::Watch(FramedSocket* sock, FrameFn on_frame, ClosedFn on_closed) {
  DROVER_RETURN_IF_ERROR(SetNonBlocking(sock->fd()));
  auto e = std::make_shared<Entry>();
  e->sock = sock;
  e->on_frame = std::move(on_frame);
  e->on_closed = std::move(on_closed);
  absl::MutexLock l(&mu_);
  if (stopping_) return absl::FailedPreconditionError("the connection loop has stopped");
  if (!started_) {
    DROVER_RETURN_IF_ERROR(loop_.Init());
    started_ = true;
    thread_ = std::thread([this] { Run(); });
  }
  const uint64_t key = next_key_++;
  // Registered before the entry is findable is harmless: an event for an unknown key
  // is read again (level-triggered) once it is.
  entries_[key] = e;
  if (absl::Status s = loop_.Add(sock->fd(), key, EPOLLIN); !s.ok()) {
    entries_.erase(key);
    return s;
  }
  return absl::OkStatus();
}

void ConnectionLoop::Stop() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
    if (!started_) return;
  }
  loop_.Wake();
  if (thread_.joinable()) thread_.join();
  std::unordered_map<uint64_t, std::shared_ptr<Entry>> dropped;
  {
    absl::MutexLock l(&mu_);
    dropped.swap(entries_);
  }
  for (auto& [key, e] : dropped) loop_.Remove(e->sock->fd());
  // `dropped` goes here, outside the lock: the handlers may hold the sockets' owners.
}

size_t ConnectionLoop::watched() {
  absl::MutexLock l(&mu_);
  return entries_.size();
}

void ConnectionLoop::Run() {
  epoll_event events[64];
  for (;;) {
    const int n = loop_.Wait(events, 64, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      DROVER_LOG(ERROR) << "the owner's connection loop stops: epoll_wait: " << std::strerror(errno);
      return;
    }
    for (int i = 0; i < n; ++i) {
      const uint64_t key = events[i].data.u64;
      if (key == EventLoop::kWakeKey) {
        loop_.Drain();
        continue;
      }
      std::shared_ptr<Entry> e;
      {
        absl::MutexLock l(&mu_);
        auto it = entries_.find(key);
        if (it != entries_.end()) e = it->second;
      }
      if (e != nullptr) Serve(key, e);
    }
    absl::MutexLock l(&mu_);
    if (stopping_) return;
  }
}

void ConnectionLoop::Serve(uint64_t key, const std::shared_ptr<Entry>& e) {
  bool wants_write = false;
  absl::Status s = e->sock->ReadReady(e->on_frame, &wants_write);
  if (!s.ok()) {
    loop_.Remove(e->sock->fd());
    {
      absl::MutexLock l(&mu_);
      entries_.erase(key);
    }
    e->on_closed(s);
    return;
  }
  if (wants_write != e->wants_write) {
    e->wants_write = wants_write;
    loop_.Modify(e->sock->fd(), key, EPOLLIN | (wants_write ? EPOLLOUT : 0)).IgnoreError();
  }
}

}  // namespace drover::internal
