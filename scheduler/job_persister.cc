#include "scheduler/job_persister.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace drover {
namespace {

constexpr absl::Duration kMinBackoff = absl::Milliseconds(100);
constexpr absl::Duration kMaxBackoff = absl::Seconds(2);

}  // namespace

JobPersister::JobPersister(StateStore* store, Clock* clock, absl::Duration write_delay)
    : store_(store), clock_(clock), write_delay_(write_delay), backoff_(kMinBackoff) {}

JobPersister::~JobPersister() { Stop(absl::ZeroDuration()); }

absl::Status JobPersister::Start(const std::vector<std::string>& counters) {
  for (const std::string& counter : counters) {
    absl::StatusOr<int64_t> last = store_->ReserveIds(counter, kIdBlock);
    if (!last.ok()) return last.status();
    absl::MutexLock lock(&mu_);
    AddBlockLocked(counter, *last);
  }
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void JobPersister::Stop(absl::Duration grace) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      stopping_ = true;
      // Real time: shutting down is about the process, whatever clock drives the rest.
      stop_deadline_ = absl::Now() + grace;
      cv_.SignalAll();
    }
  }
  if (thread_.joinable()) thread_.join();
  CancelWaits();
  absl::MutexLock lock(&mu_);
  stopped_ = true;
  if (!queued_.empty() || !actors_queued_.empty()) {
    DROVER_LOG(WARNING) << "stopping with " << queued_.size() << " job record(s) and "
                        << actors_queued_.size() << " actor record(s) not saved to "
                        << store_->Describe() << ": " << last_error_;
  }
  cv_.SignalAll();
}

void JobPersister::Put(const proto::JobInfo& job) {
  if (store_->InMemory()) {
    if (absl::Status s = store_->PutJob(job); !s.ok()) {
      DROVER_LOG(WARNING) << "saving job " << job.job_id() << ": " << s;
    }
    return;
  }
  absl::MutexLock lock(&mu_);
  QueueLocked(queued_, job.job_id(), job.job_id(), job);
}

void JobPersister::PutActor(const std::string& actor_id, int64_t version, std::string record) {
  if (store_->InMemory()) {
    if (absl::Status s = store_->PutActor(actor_id, version, record); !s.ok()) {
      DROVER_LOG(WARNING) << "saving actor " << actor_id << ": " << s;
    }
    return;
  }
  absl::MutexLock lock(&mu_);
  QueueLocked(actors_queued_, actor_id, std::string(1, kActorMark) + actor_id,
              std::make_pair(version, std::move(record)));
}

absl::Status JobPersister::AwaitStored(const std::string& job_id, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = clock_->Now() + timeout;
  while (queued_.count(job_id) > 0 || in_flight_ == job_id) {
    if (stopped_ || clock_->WaitWithDeadline(&cv_, &mu_, deadline)) {
      if (queued_.count(job_id) == 0 && in_flight_ != job_id) break;
      return UnavailableLocked(absl::StrCat("job ", job_id, " is not saved"),
                               "the scheduler keeps trying to save it in the background");
    }
  }
  return absl::OkStatus();
}

bool JobPersister::Stored(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  return StoredLocked(job_id);
}

bool JobPersister::AllStored(const std::vector<std::string>& job_ids) {
  if (store_->InMemory()) return true;
  absl::MutexLock lock(&mu_);
  for (const std::string& id : job_ids) {
    if (!StoredLocked(id)) return false;
  }
  return true;
}

void JobPersister::WhenStored(std::vector<std::string> job_ids,
                              std::function<void(bool stored)> done) {
  bool stored = true;
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& id : job_ids) stored = stored && StoredLocked(id);
    if (!stored && !waits_cancelled_) {
      waiters_.push_back(Waiter{std::move(job_ids), std::move(done)});
      return;
    }
  }
  done(stored);
}

void JobPersister::CancelWaits() {
  absl::MutexLock lock(&mu_);
  waits_cancelled_ = true;
  RunWaitersLocked(/*cancel=*/true);
}

void JobPersister::RunWaitersLocked(bool cancel) {
  if (waiters_.empty()) return;
  std::vector<Waiter> ready;
  for (size_t i = 0; i < waiters_.size();) {
    bool stored = true;
    for (const std::string& id : waiters_[i].job_ids) stored = stored && StoredLocked(id);
    if (stored || cancel) {
      ready.push_back(std::move(waiters_[i]));
      waiters_[i] = std::move(waiters_.back());
      waiters_.pop_back();
    } else {
      ++i;
    }
  }
  if (ready.empty()) return;
  mu_.Unlock();
  for (Waiter& w : ready) w.done(!cancel);
  mu_.Lock();
}

absl::Status JobPersister::Health() {
  absl::MutexLock lock(&mu_);
  if (clock_->Now() - failing_since_ > kDownAfter) {
    return UnavailableLocked(absl::StrCat(
        "cannot save jobs: the state store has failed every call for ",
        absl::FormatDuration(absl::Trunc(clock_->Now() - failing_since_, absl::Seconds(1)))),
        "nothing was created or changed: retry the call");
  }
  return absl::OkStatus();
}

std::optional<int64_t> JobPersister::TakeId(const std::string& counter) {
  absl::MutexLock lock(&mu_);
  IdBlocks& ids = ids_[counter];
  if (ids.left < kIdLowWater) cv_.SignalAll();  // the writer reserves the next block
  if (ids.left == 0) return std::nullopt;
  auto& front = ids.ranges.front();
  const int64_t id = front.first++;
  if (front.first > front.second) ids.ranges.pop_front();
  --ids.left;
  return id;
}

absl::Status JobPersister::WaitForIds(const std::string& counter, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = clock_->Now() + timeout;
  cv_.SignalAll();
  while (ids_[counter].left == 0) {
    if (stopped_ || clock_->WaitWithDeadline(&cv_, &mu_, deadline)) {
      if (ids_[counter].left > 0) break;
      return UnavailableLocked(absl::StrCat("no new ", counter, " id could be reserved"),
                               "nothing was created: retry the call");
    }
  }
  return absl::OkStatus();
}

size_t JobPersister::backlog() {
  absl::MutexLock lock(&mu_);
  return queued_.size() + actors_queued_.size() + (in_flight_.empty() ? 0 : 1);
}

void JobPersister::AddBlockLocked(const std::string& counter, int64_t last) {
  IdBlocks& ids = ids_[counter];
  ids.ranges.emplace_back(last - kIdBlock + 1, last);
  ids.left += kIdBlock;
}

std::string JobPersister::CounterToRefillLocked() {
  for (const auto& [counter, ids] : ids_) {
    if (ids.left < kIdLowWater) return counter;
  }
  return "";
}

absl::Status JobPersister::UnavailableLocked(const std::string& what, const std::string& then) {
  return absl::UnavailableError(absl::StrCat(
      what, ": ", store_->Describe(), " has not answered",
      last_error_.ok() ? std::string(" yet") : absl::StrCat(" (", last_error_.message(), ")"),
      "; ", then));
}

void JobPersister::NoteResultLocked(const absl::Status& s, const std::string& what) {
  if (s.ok()) {
    if (failing_since_ != absl::InfiniteFuture()) {
      DROVER_LOG(INFO) << store_->Describe() << " answers again; saving "
                       << queued_.size() + 1 << " queued job record(s)";
    }
    failing_since_ = absl::InfiniteFuture();
    last_error_ = absl::OkStatus();
    backoff_ = kMinBackoff;
    retry_at_ = absl::InfinitePast();
    return;
  }
  const absl::Time now = clock_->Now();
  if (failing_since_ == absl::InfiniteFuture()) {
    failing_since_ = now;
    DROVER_LOG(WARNING) << what << " failed (will retry until it works): " << s;
  }
  last_error_ = s;
  retry_at_ = now + backoff_;
  backoff_ = std::min(backoff_ * 2, kMaxBackoff);
}

void JobPersister::RefillLocked(const std::string& counter) {
  mu_.Unlock();
  absl::StatusOr<int64_t> last = store_->ReserveIds(counter, kIdBlock);
  mu_.Lock();
  NoteResultLocked(last.status(), absl::StrCat("reserving ", counter, " ids"));
  if (last.ok()) AddBlockLocked(counter, *last);
}

template <typename Record, typename Write>
void JobPersister::WriteKeyedLocked(std::map<std::string, Record>& queued, const std::string& id,
                                    const std::string& key, const std::string& what,
                                    Write write) {
  auto node = queued.extract(id);
  Record record = std::move(node.mapped());
  in_flight_ = key;
  mu_.Unlock();
  absl::Status s = write(record);
  mu_.Lock();
  in_flight_.clear();
  NoteResultLocked(s, absl::StrCat("saving ", what, " ", id));
  if (!s.ok() && queued.count(id) == 0) {
    // Retried first, as it was first; a newer record queued meanwhile replaces it.
    queued.emplace(id, std::move(record));
    order_.push_front(key);
  }
}

template <typename Record>
void JobPersister::QueueLocked(std::map<std::string, Record>& queued, const std::string& id,
                               const std::string& key, Record record) {
  auto [it, inserted] = queued.insert_or_assign(id, std::move(record));
  if (inserted) {
    order_.push_back(key);
    cv_.SignalAll();
  }
}

void JobPersister::WriteFrontLocked() {
  const std::string key = order_.front();
  order_.pop_front();
  if (!key.empty() && key[0] == kActorMark) {
    WriteKeyedLocked(actors_queued_, key.substr(1), key, "actor",
                     [&](const std::pair<int64_t, std::string>& r) {
                       return store_->PutActor(key.substr(1), r.first, r.second);
                     });
    return;
  }
  WriteKeyedLocked(queued_, key, key, "job", [&](const proto::JobInfo& r) {
    if (write_delay_ > absl::ZeroDuration()) absl::SleepFor(write_delay_);
    return store_->PutJob(r);
  });
}

void JobPersister::Loop() {
  absl::MutexLock lock(&mu_);
  for (;;) {
    if (stopping_ && (order_.empty() || absl::Now() >= stop_deadline_)) return;
    const std::string counter = CounterToRefillLocked();
    const bool may_call = clock_->Now() >= retry_at_;
    if (!counter.empty() && may_call) {
      RefillLocked(counter);
    } else if (!order_.empty() && may_call) {
      WriteFrontLocked();
    } else {
      absl::Time wake = order_.empty() && counter.empty() ? absl::InfiniteFuture() : retry_at_;
      if (stopping_) wake = std::min(wake, clock_->Now() + (stop_deadline_ - absl::Now()));
      clock_->WaitWithDeadline(&cv_, &mu_, wake);
      continue;
    }
    cv_.SignalAll();  // a store call ended: waiters re-check
    RunWaitersLocked(/*cancel=*/false);
  }
}

}  // namespace drover
