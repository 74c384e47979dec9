#include "sdk/runtime/object_table.h"

#include <sched.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace drover::internal {
namespace {

// The DeferReleases alive on this thread, innermost.
thread_local ObjectTable::DeferReleases* t_defer = nullptr;

// The longest Get spins for a result before it sleeps on the table's condition variable.
constexpr absl::Duration kSpinBeforeSleep = absl::Microseconds(50);

}  // namespace

RefState::~RefState() { table_->Released(this); }

void ObjectTable::set_release(ReleaseFn fn) {
  absl::MutexLock l(&mu_);
  release_ = std::move(fn);
}

std::shared_ptr<RefState> ObjectTable::NewPending(std::string id) {
  return std::make_shared<RefState>(this, std::move(id));
}

std::shared_ptr<RefState> ObjectTable::NewReady(std::string id, ObjectValue value) {
  auto ref = NewPending(std::move(id));
  Complete(ref, std::move(value));
  return ref;
}

std::shared_ptr<RefState> ObjectTable::NewFailed(std::string id, absl::Status error) {
  auto ref = NewPending(std::move(id));
  Fail(ref, std::move(error));
  return ref;
}

void ObjectTable::Finish(const std::shared_ptr<RefState>& ref) {
  ref->done.store(true, std::memory_order_release);
  ref->done_seq = next_done_seq_++;
  ref->pending_reason.clear();
  ref->waits_on.clear();
  for (absl::CondVar* cv : ref->waiters) cv->Signal();
}

void ObjectTable::Complete(const std::shared_ptr<RefState>& ref, ObjectValue value) {
  std::vector<std::function<void()>> callbacks;
  const absl::Time now = absl::Now();
  {
    absl::MutexLock l(&mu_);
    if (ref->state != RefState::State::kPending) return;
    ref->state = RefState::State::kReady;
    ref->made = now;
    ref->inline_bytes = std::move(value.inline_bytes);
    ref->stored = std::move(value.stored);
    ref->contained = std::move(value.contained);
    Finish(ref);
    callbacks.swap(ref->on_done);
  }
  for (auto& cb : callbacks) cb();
}

void ObjectTable::Fail(const std::shared_ptr<RefState>& ref, absl::Status error) {
  std::vector<std::function<void()>> callbacks;
  {
    absl::MutexLock l(&mu_);
    if (ref->state != RefState::State::kPending) return;
    ref->state = RefState::State::kFailed;
    ref->error = std::move(error);
    Finish(ref);
    callbacks.swap(ref->on_done);
  }
  for (auto& cb : callbacks) cb();
}

void ObjectTable::SetPendingReason(const std::shared_ptr<RefState>& ref, const std::string& reason) {
  absl::MutexLock l(&mu_);
  if (ref->state == RefState::State::kPending) ref->pending_reason = reason;
}

void ObjectTable::SetWaitsOn(const std::shared_ptr<RefState>& ref, std::string task,
                             std::vector<std::pair<size_t, std::weak_ptr<RefState>>> args) {
  absl::MutexLock l(&mu_);
  if (ref->state != RefState::State::kPending) return;
  ref->waiting_task = std::move(task);
  ref->waits_on = std::move(args);
}

std::string ObjectTable::PendingReason(const std::shared_ptr<RefState>& ref) {
  // Refs locked below are let go after the lock: the last one's ~RefState takes it.
  std::vector<std::shared_ptr<RefState>> keep;
  absl::MutexLock l(&mu_);
  std::string out;
  const RefState* r = ref.get();
  // Bounded: a chain longer than this is cut (and refs cannot form a cycle).
  for (int depth = 0; depth < 8 && r->state == RefState::State::kPending; ++depth) {
    if (!r->pending_reason.empty()) {
      absl::StrAppend(&out, r->pending_reason);
      break;
    }
    std::shared_ptr<RefState> next;
    size_t index = 0;
    for (const auto& [i, weak] : r->waits_on) {
      std::shared_ptr<RefState> a = weak.lock();
      if (a == nullptr) continue;
      const bool pending = a->state == RefState::State::kPending;
      keep.push_back(std::move(a));
      if (pending) {
        next = keep.back();
        index = i;
        break;
      }
    }
    if (next == nullptr) break;
    absl::StrAppend(&out, "task ", r->waiting_task, " waits for its argument ", index,
                    " (object ", next->id, "), which is not ready");
    if (!next->pending_reason.empty() || !next->waits_on.empty()) absl::StrAppend(&out, ": ");
    r = next.get();
  }
  if (out.size() >= 2 && out.compare(out.size() - 2, 2, ": ") == 0) out.resize(out.size() - 2);
  return out;
}

void ObjectTable::WhenDone(const std::shared_ptr<RefState>& ref, std::function<void()> fn) {
  {
    absl::MutexLock l(&mu_);
    if (ref->state == RefState::State::kPending) {
      ref->on_done.push_back(std::move(fn));
      return;
    }
  }
  fn();
}

bool ObjectTable::WaitDone(const std::shared_ptr<RefState>& ref, absl::Time deadline) {
  // A result that comes back within a few tens of microseconds (a short task on a warm
  // worker) is caught by spinning, which spares the futex wake-up of this thread (on a
  // 2-CPU machine the largest part of a round trip). Yielding lets the thread that
  // completes it run on this CPU.
  if (!ref->done.load(std::memory_order_acquire)) {
    const absl::Duration spin =
        std::min(kSpinBeforeSleep, absl::Microseconds(ref->spin_us.load(std::memory_order_relaxed)));
    const absl::Time spin_until = std::min(deadline, absl::Now() + spin);
    while (!ref->done.load(std::memory_order_acquire) && absl::Now() < spin_until) {
      sched_yield();
    }
  }
  absl::MutexLock l(&mu_);
  if (ref->state != RefState::State::kPending) return true;
  absl::CondVar cv;
  ref->waiters.push_back(&cv);
  bool timed_out = false;
  while (ref->state == RefState::State::kPending && !timed_out) {
    timed_out = cv.WaitWithDeadline(&mu_, deadline);
  }
  ref->waiters.erase(std::find(ref->waiters.begin(), ref->waiters.end(), &cv));
  return ref->state != RefState::State::kPending;
}

std::vector<size_t> ObjectTable::WaitAny(const std::vector<std::shared_ptr<RefState>>& refs,
                                         int num, absl::Time deadline) {
  absl::MutexLock l(&mu_);
  std::vector<size_t> done;
  const size_t want = std::min<size_t>(std::max(num, 0), refs.size());
  absl::CondVar cv;
  bool registered = false;
  for (;;) {
    done.clear();
    for (size_t i = 0; i < refs.size(); ++i) {
      if (refs[i] != nullptr && refs[i]->state != RefState::State::kPending) done.push_back(i);
    }
    if (done.size() >= want) break;
    if (!registered) {
      // Woken by the completion of any of them (a ref listed twice is woken once).
      for (const auto& r : refs) {
        if (r != nullptr && std::find(r->waiters.begin(), r->waiters.end(), &cv) == r->waiters.end()) {
          r->waiters.push_back(&cv);
        }
      }
      registered = true;
    }
    if (cv.WaitWithDeadline(&mu_, deadline)) break;
  }
  if (registered) {
    for (const auto& r : refs) {
      if (r == nullptr) continue;
      auto it = std::find(r->waiters.begin(), r->waiters.end(), &cv);
      if (it != r->waiters.end()) r->waiters.erase(it);
    }
  }
  std::sort(done.begin(), done.end(),
            [&](size_t a, size_t b) { return refs[a]->done_seq < refs[b]->done_seq; });
  if (done.size() > want) done.resize(want);
  return done;
}

ObjectTable::Outcome ObjectTable::Read(const std::shared_ptr<RefState>& ref) {
  absl::MutexLock l(&mu_);
  Outcome out;
  out.state = ref->state;
  out.value.inline_bytes = ref->inline_bytes;
  out.value.stored = ref->stored;
  out.value.contained = ref->contained;
  out.error = ref->error;
  out.cache = ref->cache;
  out.pending_reason = ref->pending_reason;
  out.made = ref->made;
  return out;
}

void ObjectTable::SetCache(const std::shared_ptr<RefState>& ref, ValueView view) {
  absl::MutexLock l(&mu_);
  ref->cache = std::move(view);
}

void ObjectTable::SetLineage(const std::shared_ptr<RefState>& ref, std::shared_ptr<TaskRecord> task) {
  absl::MutexLock l(&mu_);
  ref->lineage = std::move(task);
}

std::shared_ptr<TaskRecord> ObjectTable::TakeLineage(const std::shared_ptr<RefState>& ref) {
  absl::MutexLock l(&mu_);
  if (ref->lineage == nullptr || ref->state == RefState::State::kPending) return nullptr;
  std::shared_ptr<TaskRecord> task = std::move(ref->lineage);
  ref->lineage = nullptr;
  ref->state = RefState::State::kPending;
  ref->done.store(false, std::memory_order_release);
  ref->error = absl::OkStatus();
  ref->stored.reset();
  ref->inline_bytes.reset();
  ref->contained.clear();
  ref->cache.reset();
  ref->made = absl::InfiniteFuture();
  return task;
}

void ObjectTable::MarkEscaped(const std::shared_ptr<RefState>& ref) {
  absl::MutexLock l(&mu_);
  ref->escaped = true;
}

void ObjectTable::Released(RefState* ref) {
  std::vector<StoredRef> objects;
  ReleaseFn release;
  {
    absl::MutexLock l(&mu_);
    // Nobody can hold a pointer to `ref` any more: its fields are ours alone.
    if (ref->escaped || !release_) return;
    if (ref->stored) objects.push_back(*ref->stored);
    objects.insert(objects.end(), ref->contained.begin(), ref->contained.end());
    release = release_;
  }
  if (objects.empty()) return;
  if (t_defer != nullptr) {
    t_defer->batch_.emplace_back(std::move(release), std::move(objects));
    return;
  }
  release(objects);
}

ObjectTable::DeferReleases::DeferReleases() : outer_(t_defer) { t_defer = this; }

ObjectTable::DeferReleases::~DeferReleases() {
  t_defer = outer_;
  ReleaseNow(Take());
}

void ObjectTable::ReleaseNow(DeferReleases::Batch batch) {
  for (auto& [release, objects] : batch) release(objects);
}

}  // namespace drover::internal
