#include "sdk/runtime/connection_loop.h"

#include <errno.h>
#include <sys/epoll.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace drover::internal {

ConnectionLoop::~ConnectionLoop() { Stop(); }

absl::Status ConnectionLoop::Watch(FramedSocket* sock, std::string peer, FrameFn on_frame,
                                   ClosedFn on_closed, BatchEndFn on_batch_end) {
  auto e = std::make_shared<Entry>();
  e->sock = sock;
  e->on_frame = std::move(on_frame);
  e->on_closed = std::move(on_closed);
  e->on_batch_end = std::move(on_batch_end);
  {
    absl::MutexLock l(&mu_);
    if (stopping_) return absl::FailedPreconditionError("the connection loop has stopped");
    if (!failed_.ok()) return failed_;
    if (!started_) {
      if (absl::Status s = loop_.Init(); !s.ok()) return s;
      started_ = true;
      thread_ = std::thread([this] { Run(); });
    }
    e->key = next_key_++;
  }
  std::weak_ptr<Entry> weak = e;
  if (absl::Status s = sock->UseEventLoop([this, weak](bool on) {
        if (std::shared_ptr<Entry> e = weak.lock()) {
          absl::MutexLock l(&e->mu);
          e->send_wants = on;
          Rearm(*e);
        }
      }, std::move(peer));
      !s.ok()) {
    return s;
  }
  absl::MutexLock l(&mu_);
  if (stopping_) return absl::FailedPreconditionError("the connection loop has stopped");
  if (!failed_.ok()) return failed_;
  // Findable before it is registered: its first event finds it.
  entries_[e->key] = e;
  absl::MutexLock el(&e->mu);
  e->armed = EPOLLIN | (e->send_wants ? EPOLLOUT : 0);
  if (absl::Status s = loop_.Add(sock->fd(), e->key, e->armed); !s.ok()) {
    e->removed = true;
    entries_.erase(e->key);
    return s;
  }
  return absl::OkStatus();
}

void ConnectionLoop::Rearm(Entry& e) {
  if (e.removed || e.armed == 0) return;  // armed 0: not yet added (Watch adds it)
  const uint32_t want = EPOLLIN | (e.send_wants || e.read_wants ? EPOLLOUT : 0);
  if (want == e.armed) return;
  if (loop_.Modify(e.sock->fd(), e.key, want).ok()) e.armed = want;
}

void ConnectionLoop::Stop() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
    if (!started_) return;
  }
  loop_.Wake();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
  std::unordered_map<uint64_t, std::shared_ptr<Entry>> dropped;
  std::shared_ptr<Releaser> releaser;
  std::thread releaser_thread;
  {
    absl::MutexLock l(&mu_);
    dropped.swap(entries_);
    releaser = std::move(releaser_);
    releaser_thread = std::move(releaser_thread_);
  }
  for (auto& [key, e] : dropped) {
    absl::MutexLock l(&e->mu);
    if (!e->removed) loop_.Remove(e->sock->fd());
    e->removed = true;
  }
  // `dropped` goes here, outside the lock: the handlers may hold the sockets' owners.
  dropped.clear();
  if (releaser == nullptr) return;
  bool idle = false;
  {
    absl::MutexLock l(&releaser->mu);
    releaser->stopping = true;
    releaser->queue.clear();
    idle = releaser->mu.AwaitWithTimeout(
        absl::Condition(+[](bool* busy) { return !*busy; }, &releaser->busy), kStopReleaseWait);
  }
  if (idle) {
    releaser_thread.join();
  } else {
    DROVER_LOG(WARNING) << "a store delete has not returned after "
                        << absl::FormatDuration(kStopReleaseWait)
                        << " (a restarting store?); shutting down without waiting for it";
    releaser_thread.detach();  // it holds only its shared state, and ends after the delete
  }
}

void ConnectionLoop::ReleaserLoop(std::shared_ptr<Releaser> r) {
  absl::MutexLock l(&r->mu);
  for (;;) {
    r->mu.Await(absl::Condition(
        +[](Releaser* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->mu) {
          return r->stopping || !r->queue.empty();
        },
        r.get()));
    if (r->stopping) return;
    ObjectTable::DeferReleases::Batch batch = std::move(r->queue.front());
    r->queue.pop_front();
    r->busy = true;
    r->mu.Unlock();
    ObjectTable::ReleaseNow(std::move(batch));
    r->mu.Lock();
    r->busy = false;
  }
}

absl::Status ConnectionLoop::failure() {
  absl::MutexLock l(&mu_);
  return failed_;
}

size_t ConnectionLoop::watched() {
  absl::MutexLock l(&mu_);
  return entries_.size();
}

void ConnectionLoop::FailForTest() {
  {
    absl::MutexLock l(&mu_);
    fail_for_test_ = true;
  }
  loop_.Wake();
}

void ConnectionLoop::Run() {
  epoll_event events[64];
  // Connections read up to the per-event cap with more to read: served again next
  // wake-up (which then only looks, not waits), after the others had their turn.
  std::vector<std::shared_ptr<Entry>> again, again_next, read;
  uint64_t wake = 0;
  for (;;) {
    bool fail = false;
    {
      absl::MutexLock l(&mu_);
      if (stopping_) return;
      fail = fail_for_test_;
    }
    if (fail) {
      Fail(absl::InternalError("the owner's connection loop failed (a test said so)"));
      return;
    }
    const int n = loop_.Wait(events, 64, again.empty() ? -1 : 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      Fail(absl::InternalError(
          absl::StrCat("the owner's connection loop failed: epoll_wait: ", std::strerror(errno))));
      return;
    }
    ++wake;
    wakeups_.fetch_add(1, std::memory_order_relaxed);
    ObjectTable::DeferReleases deferred;
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
      if (e != nullptr) Serve(e, events[i].events, wake, &read, &again_next);
    }
    for (const std::shared_ptr<Entry>& e : again) Serve(e, EPOLLIN, wake, &read, &again_next);
    again.swap(again_next);
    again_next.clear();
    // After every connection of this wake-up was read: their owners send what the
    // frames decided, batched.
    for (const std::shared_ptr<Entry>& e : read) {
      if (e->on_batch_end) e->on_batch_end();
    }
    read.clear();
    Release(deferred.Take());
  }
}

void ConnectionLoop::Serve(const std::shared_ptr<Entry>& e, uint32_t events, uint64_t wake,
                           std::vector<std::shared_ptr<Entry>>* read,
                           std::vector<std::shared_ptr<Entry>>* again) {
  bool read_wants = false;
  {
    absl::MutexLock l(&e->mu);
    if (e->removed) return;
    read_wants = e->read_wants;
  }
  if (events & EPOLLOUT) e->sock->WriteReady();
  if ((events & (EPOLLIN | EPOLLHUP | EPOLLERR)) || (read_wants && (events & EPOLLOUT))) {
    if (e->read_in_wake == wake) return;  // read already (an event and a capped read)
    e->read_in_wake = wake;
    read->push_back(e);
    bool wants_write = false;
    bool more = false;
    absl::Status s = e->sock->ReadReady(e->on_frame, &wants_write, &more);
    if (!s.ok()) {
      Close(e, s);
      return;
    }
    if (more) again->push_back(e);
    absl::MutexLock l(&e->mu);
    if (wants_write != e->read_wants) {
      e->read_wants = wants_write;
      Rearm(*e);
    }
  }
}

void ConnectionLoop::Close(const std::shared_ptr<Entry>& e, const absl::Status& why) {
  {
    absl::MutexLock l(&e->mu);
    if (e->removed) return;
    e->removed = true;
    loop_.Remove(e->sock->fd());
  }
  {
    absl::MutexLock l(&mu_);
    entries_.erase(e->key);
  }
  e->on_closed(why);
}

void ConnectionLoop::Fail(const absl::Status& why) {
  DROVER_LOG(ERROR) << why.message() << "; every worker connection of this process is closed";
  std::unordered_map<uint64_t, std::shared_ptr<Entry>> all;
  {
    absl::MutexLock l(&mu_);
    failed_ = why;
    all = entries_;
  }
  ObjectTable::DeferReleases deferred;
  for (auto& [key, e] : all) {
    e->sock->Shutdown();
    Close(e, why);
  }
  Release(deferred.Take());
}

void ConnectionLoop::Release(ObjectTable::DeferReleases::Batch batch) {
  if (batch.empty()) return;
  std::shared_ptr<Releaser> r;
  {
    absl::MutexLock l(&mu_);
    if (releaser_ == nullptr) {
      releaser_ = std::make_shared<Releaser>();
      releaser_thread_ = std::thread(ReleaserLoop, releaser_);
    }
    r = releaser_;
  }
  absl::MutexLock l(&r->mu);
  if (!r->stopping) r->queue.push_back(std::move(batch));
}

}  // namespace drover::internal
