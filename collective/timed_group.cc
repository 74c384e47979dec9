#include "collective/timed_group.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "collective/group_internal.h"

namespace drover::collective::internal {
namespace {

// The process's reporters, one per (scheduler, job), alive while a timed group holds it.
struct Reporters {
  absl::Mutex mu;
  std::map<std::pair<std::string, std::string>, std::weak_ptr<TimelineReporter>> live
      ABSL_GUARDED_BY(mu);
  bool at_exit ABSL_GUARDED_BY(mu) = false;
};

Reporters& TheReporters() {
  static Reporters* r = new Reporters;
  return *r;
}

// At exit: send what the reporters of groups still alive (never destroyed) hold.
void FlushAtExit() {
  std::vector<std::shared_ptr<TimelineReporter>> live;
  {
    Reporters& r = TheReporters();
    absl::MutexLock lock(&r.mu);
    for (auto& [key, weak] : r.live) {
      if (auto s = weak.lock()) live.push_back(std::move(s));
    }
  }
  for (auto& rep : live) rep->Flush(absl::Seconds(2));
}

absl::StatusOr<std::shared_ptr<TimelineReporter>> ReporterFor(const GroupOptions& options) {
  absl::StatusOr<KvClientOptions> kv = KvOptionsFor(options);  // reads the token
  if (!kv.ok()) return kv.status();
  Reporters& r = TheReporters();
  absl::MutexLock lock(&r.mu);
  auto& slot = r.live[{options.scheduler_address, options.job_id}];
  if (auto existing = slot.lock()) return existing;
  TimelineReporterOptions o;
  const char* worker = std::getenv("DROVER_WORKER_ID");
  o.reporter = absl::StrCat("rank ", options.rank, "@", options.node_id);
  o.job_id = options.job_id;
  o.node_id = options.node_id;
  if (worker != nullptr) o.worker_id = worker;
  o.capacity = TimelineBufferFromEnvironment(o.capacity);
  o.batch = std::min(o.batch, o.capacity);
  auto made = std::make_shared<TimelineReporter>(
      o, SchedulerTimelineSender(options.scheduler_address, kv->token));
  slot = made;
  if (!r.at_exit) {
    r.at_exit = true;
    std::atexit(FlushAtExit);
  }
  return made;
}

std::string Describe(const Group& g, DataType type, const char* op = nullptr) {
  return absl::StrCat("group '", g.name(), "' of ", g.size(), ", ", DataTypeName(type),
                      op == nullptr ? "" : absl::StrCat(" ", op));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Group>> TimedGroup::Wrap(std::unique_ptr<Group> inner,
                                                        const GroupOptions& options) {
  absl::StatusOr<std::shared_ptr<TimelineReporter>> reporter = ReporterFor(options);
  if (!reporter.ok()) return reporter.status();
  return std::unique_ptr<Group>(new TimedGroup(std::move(inner), *std::move(reporter)));
}

TimedGroup::TimedGroup(std::unique_ptr<Group> inner, std::shared_ptr<TimelineReporter> reporter)
    : inner_(std::move(inner)), reporter_(std::move(reporter)) {}

template <typename Op>
absl::Status TimedGroup::Timed(const char* what, size_t bytes, std::string detail, Op op) {
  const absl::Time start = absl::Now();
  absl::Status s = op();
  TimelineRecord r;
  r.kind = proto::TIMELINE_COLLECTIVE;
  r.start_us = absl::ToUnixMicros(start);
  r.duration_us = absl::ToInt64Microseconds(absl::Now() - start);
  r.name = what;
  r.bytes = static_cast<int64_t>(bytes);
  r.rank = inner_->rank();
  r.detail = std::move(detail);
  if (!s.ok()) {
    r.failed = true;
    absl::StrAppend(&r.detail, ": ", s.message().substr(0, 400));
  }
  reporter_->Add(std::move(r));
  return s;
}

absl::Status TimedGroup::AllReduce(void* buf, size_t count, DataType type, ReduceOp op) {
  return Timed("allreduce", count * DataTypeSize(type), Describe(*this, type, ReduceOpName(op)),
               [&] { return inner_->AllReduce(buf, count, type, op); });
}

absl::Status TimedGroup::Broadcast(void* buf, size_t count, DataType type, int root) {
  return Timed("broadcast", count * DataTypeSize(type),
               absl::StrCat(Describe(*this, type), ", root ", root),
               [&] { return inner_->Broadcast(buf, count, type, root); });
}

absl::Status TimedGroup::AllGather(const void* in, void* out, size_t count_per_rank,
                                   DataType type) {
  return Timed("allgather", count_per_rank * DataTypeSize(type), Describe(*this, type),
               [&] { return inner_->AllGather(in, out, count_per_rank, type); });
}

absl::Status TimedGroup::ReduceScatter(const void* in, void* out, size_t count_per_rank,
                                       DataType type, ReduceOp op) {
  return Timed("reduce_scatter", count_per_rank * static_cast<size_t>(size()) * DataTypeSize(type),
               Describe(*this, type, ReduceOpName(op)),
               [&] { return inner_->ReduceScatter(in, out, count_per_rank, type, op); });
}

absl::Status TimedGroup::Barrier() {
  return Timed("barrier", 0, absl::StrCat("group '", name(), "' of ", size()),
               [&] { return inner_->Barrier(); });
}

absl::Status TimedGroup::Send(const void* buf, size_t bytes, int peer, uint32_t tag) {
  return Timed("send", bytes, absl::StrCat("group '", name(), "', to rank ", peer, ", tag ", tag),
               [&] { return inner_->Send(buf, bytes, peer, tag); });
}

absl::Status TimedGroup::Recv(void* buf, size_t bytes, int peer, uint32_t tag) {
  return Timed("recv", bytes, absl::StrCat("group '", name(), "', from rank ", peer, ", tag ", tag),
               [&] { return inner_->Recv(buf, bytes, peer, tag); });
}

}  // namespace drover::collective::internal
