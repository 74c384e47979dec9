#include "bench/scale_leases.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "bench/bench_util.h"
#include "common/auth.h"
#include "common/rpc.h"
#include "proto/lease.grpc.pb.h"

namespace drover::bench {
namespace {

// Calls to the scheduler's Leases service for one driver job.
class Leases {
 public:
  Leases(const LeaseBenchOptions& o)
      : token_(o.token), stub_(proto::Leases::NewStub(MakeChannel(o.address))) {}

  absl::Status RegisterDriver() {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, token_);
    proto::RegisterDriverRequest req;
    req.set_name("scale-bench");
    req.set_request_id("scale-bench-driver");
    proto::RegisterDriverReply reply;
    grpc::Status s = stub_->RegisterDriver(&ctx, req, &reply);
    if (!s.ok()) return absl::UnavailableError(absl::StrCat("RegisterDriver: ", s.error_message()));
    job_id_ = reply.job_id();
    return absl::OkStatus();
  }

  // A one-CPU lease under `request_id`, waiting up to `wait`.
  proto::RequestLeaseRequest Ask(const std::string& request_id, absl::Duration wait) const {
    proto::RequestLeaseRequest req;
    req.set_job_id(job_id_);
    req.set_owner("scale-bench");
    req.set_request_id(request_id);
    req.set_wait_ms(absl::ToInt64Milliseconds(wait));
    req.mutable_shape()->set_cpus(1);
    req.mutable_package()->set_hash("scale-bench");
    return req;
  }

  absl::StatusOr<proto::RequestLeaseReply> Request(const std::string& request_id,
                                                   absl::Duration wait) {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, token_, std::chrono::milliseconds(absl::ToInt64Milliseconds(wait)) +
                                     std::chrono::seconds(10));
    proto::RequestLeaseReply reply;
    grpc::Status s = stub_->RequestLease(&ctx, Ask(request_id, wait), &reply);
    if (!s.ok()) return absl::UnavailableError(absl::StrCat("RequestLease: ", s.error_message()));
    return reply;
  }

  absl::Status Return(const std::string& lease_id) {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, token_);
    proto::ReturnWorkerLeaseRequest req;
    req.set_lease_id(lease_id);
    req.set_reason("scale-bench");
    proto::ReturnWorkerLeaseReply reply;
    grpc::Status s = stub_->ReturnLease(&ctx, req, &reply);
    if (!s.ok()) return absl::UnavailableError(absl::StrCat("ReturnLease: ", s.error_message()));
    return absl::OkStatus();
  }

  proto::Leases::Stub* stub() { return stub_.get(); }
  const std::string& token() const { return token_; }

 private:
  const std::string token_;
  std::unique_ptr<proto::Leases::Stub> stub_;
  std::string job_id_;
};

// Runs `body(i)` for i in [0, count) on `threads` threads; latencies in ms and the
// first error.
struct Run {
  std::vector<double> ms;
  std::string error;
  absl::Duration wall;
};
template <typename Body>
Run Parallel(int count, int threads, Body body) {
  Run run;
  absl::Mutex mu;
  std::vector<std::thread> workers;
  const absl::Time start = absl::Now();
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::vector<double> mine;
      std::string error;
      for (int i = t; i < count && error.empty(); i += threads) {
        const absl::Time t0 = absl::Now();
        absl::Status s = body(i);
        if (!s.ok()) error = std::string(s.message());
        mine.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
      }
      absl::MutexLock l(&mu);
      run.ms.insert(run.ms.end(), mine.begin(), mine.end());
      if (run.error.empty()) run.error = error;
    });
  }
  for (auto& w : workers) w.join();
  run.wall = absl::Now() - start;
  return run;
}

// One RequestLease in flight through gRPC's callback API (no thread of ours waits).
struct AsyncAsk {
  grpc::ClientContext ctx;
  proto::RequestLeaseRequest req;
  proto::RequestLeaseReply reply;
};

}  // namespace

bool RunLeaseBench(SchedulerProcess& scheduler, const LeaseBenchOptions& o) {
  Leases leases(o);
  if (absl::Status s = leases.RegisterDriver(); !s.ok()) {
    Note(std::string(s.message()));
    return false;
  }

  // Grant and return, one after the other per caller.
  const absl::Duration c0 = scheduler.CpuTime();
  Run cycles = Parallel(o.cycles, o.threads, [&](int i) -> absl::Status {
    auto granted = leases.Request(absl::StrCat("cycle-", i), absl::Seconds(10));
    if (!granted.ok()) return granted.status();
    if (!granted->granted()) return absl::UnavailableError(granted->pending_reason());
    return leases.Return(granted->lease_id());
  });
  if (!cycles.error.empty()) {
    Note("lease cycles: " + cycles.error);
    return false;
  }
  const double rate = o.cycles / absl::ToDoubleSeconds(cycles.wall);
  Bench("lease_cycles_per_s", o.nodes, rate, "leases/s");
  Note(absl::StrFormat("RequestLease + ReturnLease %s; %.0f us of scheduler CPU each",
                       DescribeLatencies(cycles.ms),
                       absl::ToDoubleMicroseconds(scheduler.CpuTime() - c0) / o.cycles));

  // Fill the cluster with leases held, then ask for more: answered pending, remembered.
  std::vector<std::string> held(o.slots);
  Run fill = Parallel(o.slots, o.threads, [&](int i) -> absl::Status {
    auto granted = leases.Request(absl::StrCat("hold-", i), absl::Seconds(10));
    if (!granted.ok()) return granted.status();
    if (!granted->granted()) return absl::UnavailableError(granted->pending_reason());
    held[i] = granted->lease_id();
    return absl::OkStatus();
  });
  if (!fill.error.empty()) {
    Note("filling the cluster with leases: " + fill.error);
    return false;
  }
  const int64_t rss_full = scheduler.RssBytes();
  Run pending = Parallel(o.pending, o.threads, [&](int i) -> absl::Status {
    auto answer = leases.Request(absl::StrCat("pending-", i), absl::ZeroDuration());
    if (!answer.ok()) return answer.status();
    if (answer->granted()) return absl::InternalError("granted in a full cluster");
    return absl::OkStatus();
  });
  if (!pending.error.empty()) {
    Note("pending requests: " + pending.error);
    return false;
  }
  Bench("pending_leases_per_s", o.nodes, o.pending / absl::ToDoubleSeconds(pending.wall),
        "requests/s");
  Bench("rss_per_pending_lease", o.nodes,
        static_cast<double>(scheduler.RssBytes() - rss_full) / o.pending, "bytes");
  Note(absl::StrCat(o.pending, " requests answered pending and remembered: ",
                    DescribeLatencies(pending.ms)));

  // Requests that wait in their RPC: a scheduler thread each.
  const int threads_before = scheduler.Threads();
  const int64_t rss_before = scheduler.RssBytes();
  std::vector<std::unique_ptr<AsyncAsk>> asks;
  std::atomic<int> granted{0}, answered{0};
  absl::Mutex mu;
  absl::Time last_grant = absl::InfinitePast();
  std::vector<std::string> got;
  for (int i = 0; i < o.waiting; ++i) {
    auto ask = std::make_unique<AsyncAsk>();
    PrepareContext(&ask->ctx, leases.token(), std::chrono::seconds(45));
    ask->req = leases.Ask(absl::StrCat("waiting-", i), absl::Seconds(30));
    AsyncAsk* a = ask.get();
    leases.stub()->async()->RequestLease(&a->ctx, &a->req, &a->reply, [&, a](grpc::Status s) {
      absl::MutexLock l(&mu);
      if (s.ok() && a->reply.granted()) {
        ++granted;
        last_grant = absl::Now();
        got.push_back(a->reply.lease_id());
      }
      ++answered;
    });
    asks.push_back(std::move(ask));
  }
  // Until each holds a scheduler thread (or 20 s: then as many as did).
  for (absl::Time deadline = absl::Now() + absl::Seconds(20);
       scheduler.Threads() < threads_before + o.waiting && absl::Now() < deadline;) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  const int waiting = scheduler.Threads() - threads_before;
  const double idle = [&] {
    const absl::Duration c = scheduler.CpuTime();
    absl::SleepFor(absl::Seconds(2));
    return absl::FDivDuration(scheduler.CpuTime() - c, absl::Seconds(2));
  }();
  Bench("waiting_leases", o.nodes, waiting, "requests");
  Note(absl::StrFormat("%d requests waiting hold %d more scheduler threads and %.1f MiB; the "
                       "scheduler uses %.2f cores meanwhile",
                       o.waiting, waiting, (scheduler.RssBytes() - rss_before) / 1048576.0,
                       idle));
  // The held leases come back at once: how fast do the waiting requests get them?
  const absl::Time released = absl::Now();
  const absl::Duration c1 = scheduler.CpuTime();
  Run back = Parallel(o.slots, o.threads, [&](int i) { return leases.Return(held[i]); });
  for (absl::Time deadline = absl::Now() + absl::Seconds(40);
       answered.load() < o.waiting && absl::Now() < deadline;) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  {
    absl::MutexLock l(&mu);
    const double secs = absl::ToDoubleSeconds(last_grant - released);
    Bench("waiting_leases_granted_per_s", o.nodes, granted / std::max(secs, 1e-3), "leases/s");
    Note(absl::StrFormat("%d of %d waiting requests granted %.2f s after %d leases came back "
                         "(%.0f us of scheduler CPU per grant)",
                         granted.load(), o.waiting, secs, o.slots,
                         absl::ToDoubleMicroseconds(scheduler.CpuTime() - c1) /
                             std::max(1, granted.load())));
  }
  for (absl::Time deadline = absl::Now() + absl::Seconds(40);
       answered.load() < o.waiting && absl::Now() < deadline;) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  if (answered.load() < o.waiting) {
    for (auto& a : asks) a->ctx.TryCancel();
    while (answered.load() < o.waiting) absl::SleepFor(absl::Milliseconds(10));
  }
  Parallel(static_cast<int>(got.size()), o.threads, [&](int i) { return leases.Return(got[i]); });
  return back.error.empty();
}

}  // namespace drover::bench
