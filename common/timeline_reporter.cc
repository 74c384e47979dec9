#include "common/timeline_reporter.h"

#include <unistd.h>

#include <cstdlib>
#include <random>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/rpc.h"
#include "common/status.h"
#include "proto/scheduler.grpc.pb.h"

namespace drover {

TimelineSender SchedulerTimelineSender(const std::string& address, const std::string& token) {
  std::shared_ptr<proto::Scheduler::Stub> stub = proto::Scheduler::NewStub(MakeChannel(address));
  return [stub, token](const proto::ReportTimelineRequest& req) {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, token, std::chrono::milliseconds(2000));
    proto::ReportTimelineReply reply;
    return FromGrpcStatus(stub->ReportTimeline(&ctx, req, &reply));
  };
}

bool TimelineSwitch(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  return std::string(v) != "0";
}

size_t TimelineBufferFromEnvironment(size_t fallback) {
  const char* v = std::getenv("DROVER_TIMELINE_BUFFER");
  size_t n = 0;
  if (v == nullptr || !absl::SimpleAtoi(v, &n) || n == 0) return fallback;
  return n;
}

namespace {

std::string ReporterId(const std::string& name) {
  std::random_device rd;
  return absl::StrCat(name, "/", ::getpid(), "/",
                      absl::Hex(static_cast<uint64_t>(rd()) << 32 | rd(), absl::kZeroPad16));
}

}  // namespace

TimelineReporter::TimelineReporter(TimelineReporterOptions options, TimelineSender send)
    : options_(std::move(options)), send_(std::move(send)), reporter_id_(ReporterId(options_.reporter)) {
  buffer_.reserve(options_.capacity);
  spare_.reserve(options_.capacity);
  last_send_ = options_.clock->Now();
  thread_ = std::thread([this] { Run(); });
}

TimelineReporter::~TimelineReporter() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    full_ = true;
    wake_.Signal();
  }
  thread_.join();
}

void TimelineReporter::Add(TimelineRecord record) {
  if (full_.load(std::memory_order_relaxed) && record.job_id.empty()) {
    dropped_fast_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  absl::MutexLock lock(&mu_);
  if (buffer_.size() >= options_.capacity || stop_ || off_) {
    if (record.job_id.empty()) {
      ++dropped_default_;
    } else {
      ++dropped_other_[record.job_id];
    }
    ++counts_.dropped;
    return;
  }
  buffer_.push_back(std::move(record));
  ++counts_.added;
  if (buffer_.size() >= options_.capacity) full_ = true;
  if (idle_) {
    idle_ = false;
    wake_.Signal();
  } else if (buffer_.size() >= options_.batch && !woken_) {
    woken_ = true;
    wake_.Signal();
  }
}

void TimelineReporter::SetActor(const std::string& actor_id) {
  absl::MutexLock lock(&mu_);
  actor_id_ = actor_id;
}

bool TimelineReporter::Flush(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = options_.clock->Now() + timeout;
  flush_ = true;
  wake_.Signal();
  auto settled = [&] { return buffer_.empty() && pending_ == nullptr && !sending_ && !flush_; };
  while (!settled()) {
    if (options_.clock->WaitWithDeadline(&done_, &mu_, deadline)) break;
  }
  return buffer_.empty() && pending_ == nullptr && !sending_;
}

TimelineReporter::Counts TimelineReporter::counts() {
  absl::MutexLock lock(&mu_);
  Counts c = counts_;
  c.dropped += dropped_fast_.load(std::memory_order_relaxed);
  return c;
}

absl::Time TimelineReporter::NextSendLocked() {
  if (stop_ || flush_) return absl::InfinitePast();
  if (buffer_.size() >= options_.batch) return last_send_ + options_.min_gap;
  return last_send_ + options_.interval;
}

void TimelineReporter::FillEvent(const TimelineRecord& r, const std::string& actor_id,
                                 proto::TimelineEvent* e) const {
  e->set_kind(r.kind);
  e->set_time_us(r.start_us);
  e->set_duration_us(r.duration_us);
  e->set_node_id(r.node_id.empty() ? options_.node_id : r.node_id);
  if (!options_.worker_id.empty()) e->set_worker_id(options_.worker_id);
  if (r.rank >= 0) e->add_ranks(r.rank);
  if (r.bytes != 0) e->set_bytes(r.bytes);
  if (r.failed) e->set_failed(true);
  if (!r.name.empty()) e->set_name(r.name);
  if (!r.actor_id.empty()) {
    e->set_actor_id(r.actor_id);
  } else if (r.actor_call) {
    e->set_actor_id(actor_id);
  }
  if (!r.object_id.empty()) e->set_object_id(r.object_id);
  if (!r.source_node_id.empty()) e->set_source_node_id(r.source_node_id);
  if (!r.detail.empty()) e->set_detail(r.detail);
}

bool TimelineReporter::HasWorkLocked() const {
  return !buffer_.empty() || dropped_default_ > 0 || !dropped_other_.empty() ||
         dropped_fast_.load(std::memory_order_relaxed) > 0;
}

TimelineReporter::Taken TimelineReporter::TakeLocked() {
  Taken t;
  t.records = std::move(spare_);
  t.records.swap(buffer_);
  full_ = stop_ || off_;
  const int64_t fast = dropped_fast_.exchange(0, std::memory_order_relaxed);
  counts_.dropped += fast;
  t.dropped_default = dropped_default_ + fast;
  t.dropped_other.swap(dropped_other_);
  dropped_default_ = 0;
  t.seq = next_seq_++;
  t.actor_id = actor_id_;
  return t;
}

std::unique_ptr<TimelineReporter::Batch> TimelineReporter::Build(const Taken& t) const {
  auto b = std::make_unique<Batch>();
  b->request.set_reporter(reporter_id_);
  b->request.set_seq(t.seq);
  b->records = static_cast<int64_t>(t.records.size());
  std::map<std::string, proto::JobTimelineReport*> jobs;
  auto job = [&](const std::string& id) {
    proto::JobTimelineReport*& j = jobs[id];
    if (j == nullptr) {
      j = b->request.add_jobs();
      j->set_job_id(id);
    }
    return j;
  };
  if (t.dropped_default > 0 && !options_.job_id.empty()) {
    job(options_.job_id)->set_dropped(t.dropped_default);
  }
  for (const auto& [id, n] : t.dropped_other) job(id)->set_dropped(job(id)->dropped() + n);
  for (const TimelineRecord& r : t.records) {
    const std::string& id = r.job_id.empty() ? options_.job_id : r.job_id;
    if (id.empty()) continue;  // no job to show it in
    FillEvent(r, t.actor_id, job(id)->add_events());
    ++b->per_job[id];
  }
  return b;
}

void TimelineReporter::Run() {
  absl::MutexLock lock(&mu_);
  for (;;) {
    // Nothing to send: wait for the first record (Add wakes the thread), then give
    // the batch its interval to fill.
    while (!stop_ && !flush_ && pending_ == nullptr && !HasWorkLocked()) {
      idle_ = true;
      done_.SignalAll();
      wake_.Wait(&mu_);
      idle_ = false;
      last_send_ = options_.clock->Now();
    }
    while (!stop_ && !flush_ && options_.clock->Now() < NextSendLocked()) {
      options_.clock->WaitWithDeadline(&wake_, &mu_, NextSendLocked());
    }
    const bool stopping = stop_;
    std::unique_ptr<Batch> b;
    if (pending_ != nullptr) {
      b = std::move(pending_);
    } else if (HasWorkLocked()) {
      // Built without the lock, so Add is never held up by it.
      Taken t = TakeLocked();
      sending_ = true;
      mu_.Unlock();
      b = Build(t);
      t.records.clear();  // keeps its memory for the next round
      mu_.Lock();
      spare_ = std::move(t.records);
      sending_ = false;
    }
    flush_ = flush_ && (b != nullptr);  // a flush ends once a round finds nothing to send
    woken_ = false;
    last_send_ = options_.clock->Now();
    if (b == nullptr || off_) {
      if (b != nullptr) counts_.dropped += b->records;
      done_.SignalAll();
      if (stopping) return;
      continue;
    }
    const int64_t records = b->records;
    sending_ = true;
    mu_.Unlock();
    const absl::Status sent = send_(b->request);
    mu_.Lock();
    sending_ = false;
    if (sent.ok()) {
      counts_.sent += b->records;
      ++counts_.batches;
    } else if (sent.code() == absl::StatusCode::kUnimplemented) {
      off_ = true;  // a scheduler without timelines of reported events
      full_ = true;
      counts_.dropped += b->records + static_cast<int64_t>(buffer_.size());
      buffer_.clear();
    } else if (++b->attempts < options_.attempts && !stopping) {
      pending_ = std::move(b);
    } else {
      // Given up: the next batch tells the scheduler these are missing.
      counts_.dropped += b->records;
      for (const auto& [id, n] : b->per_job) {
        if (id == options_.job_id) {
          dropped_default_ += n;
        } else {
          dropped_other_[id] += n;
        }
      }
    }
    done_.SignalAll();
    if (stopping && pending_ == nullptr && buffer_.empty() &&
        (records == 0 || !HasWorkLocked())) {
      return;
    }
  }
}

}  // namespace drover
