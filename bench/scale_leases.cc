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

// Requests "<prefix><from>" .. "<prefix><from + count - 1>", each waiting up to 30 s
// in its RPC; which were granted, and when the last was.
class Waits {
 public:
  Waits(Leases& leases, const std::string& prefix, int from, int count) : count_(count) {
    for (int i = from; i < from + count; ++i) {
      auto ask = std::make_unique<AsyncAsk>();
      PrepareContext(&ask->ctx, leases.token(), std::chrono::seconds(45));
      ask->req = leases.Ask(absl::StrCat(prefix, i), absl::Seconds(30));
      AsyncAsk* a = ask.get();
      leases.stub()->async()->RequestLease(&a->ctx, &a->req, &a->reply, [this, a](grpc::Status s) {
        absl::MutexLock l(&mu_);
        if (s.ok() && a->reply.granted()) {
          last_grant_ = absl::Now();
          got_.push_back(a->reply.lease_id());
        }
        ++answered_;
      });
      asks_.push_back(std::move(ask));
    }
  }
  ~Waits() {
    for (auto& a : asks_) a->ctx.TryCancel();
    absl::MutexLock l(&mu_);
    mu_.Await(absl::Condition(this, &Waits::Done));
  }
  // Waits up to `timeout` for every answer.
  bool AllAnswered(absl::Duration timeout) {
    absl::MutexLock l(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(this, &Waits::Done), timeout);
  }
  std::vector<std::string> got() {
    absl::MutexLock l(&mu_);
    return got_;
  }
  absl::Time last_grant() {
    absl::MutexLock l(&mu_);
    return last_grant_;
  }

 private:
  bool Done() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return answered_ == count_; }

  const int count_;
  std::vector<std::unique_ptr<AsyncAsk>> asks_;
  mutable absl::Mutex mu_;
  int answered_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> got_ ABSL_GUARDED_BY(mu_);
  absl::Time last_grant_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

// Returns held[from .. from + count) at once (the cluster is full, `waits` wait) and
// reports how fast and at what CPU the waiting requests got them; the leases granted
// take the returned ones' places in `held`.
bool GrantByReturning(SchedulerProcess& scheduler, Leases& leases, const LeaseBenchOptions& o,
                      std::vector<std::string>& held, int from, Waits& waits,
                      const std::string& name, int count) {
  // What the scheduler spends meanwhile anyway (heartbeats), to tell the grants' cost.
  const absl::Duration c0 = scheduler.CpuTime();
  const absl::Time t0 = absl::Now();
  absl::SleepFor(absl::Seconds(2));
  const double idle = absl::FDivDuration(scheduler.CpuTime() - c0, absl::Now() - t0);
  const absl::Time released = absl::Now();
  const absl::Duration c1 = scheduler.CpuTime();
  Run back = Parallel(count, o.threads, [&](int i) { return leases.Return(held[from + i]); });
  if (!back.error.empty()) {
    Note(name + ": returning leases: " + back.error);
    return false;
  }
  if (!waits.AllAnswered(absl::Seconds(40))) {
    Note(name + ": not every waiting request was answered in 40 s");
    return false;
  }
  const absl::Duration cpu = scheduler.CpuTime() - c1;
  const absl::Duration span = absl::Now() - released;
  std::vector<std::string> got = waits.got();
  const double secs = absl::ToDoubleSeconds(waits.last_grant() - released);
  const double n = static_cast<double>(std::max<size_t>(1, got.size()));
  const double per_grant = absl::ToDoubleMicroseconds(cpu) / n;
  const double net = (absl::ToDoubleMicroseconds(cpu) - idle * absl::ToDoubleMicroseconds(span)) / n;
  Bench(name + "_granted_per_s", o.nodes, got.size() / std::max(secs, 1e-3), "leases/s");
  Bench(name + "_cpu_per_grant", o.nodes, per_grant, "us");
  Bench(name + "_cpu_per_grant_net", o.nodes, net, "us");
  Note(absl::StrFormat("%s: %d of %d waiting requests granted %.3f s after %d leases came back; "
                       "%.0f us of scheduler CPU per lease returned and granted again (%.0f us "
                       "beyond its idle %.2f cores over the %.2f s)",
                       name, got.size(), count, secs, count, per_grant, net, idle,
                       absl::ToDoubleSeconds(span)));
  for (size_t i = 0; i < got.size() && static_cast<int>(i) < count; ++i) held[from + i] = got[i];
  return static_cast<int>(got.size()) == count;
}

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

  // Fill the cluster with leases held.
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
  const int waiting = std::min(o.waiting, o.slots);

  // `waiting` requests wait in their RPC (queued at the scheduler, no thread each), then
  // as many leases come back: each grants the oldest waiting request. Queued first
  // (wait 0), so that they are in order and all there before the leases come back.
  const int threads_before = scheduler.Threads();
  const int64_t rss_before = scheduler.RssBytes();
  Run queue_them = Parallel(waiting, o.threads, [&](int i) -> absl::Status {
    return leases.Request(absl::StrCat("waiting-", i), absl::ZeroDuration()).status();
  });
  if (!queue_them.error.empty()) {
    Note("queueing the waiting requests: " + queue_them.error);
    return false;
  }
  Waits first(leases, "waiting-", 0, waiting);
  absl::SleepFor(absl::Seconds(1));  // for the calls to arrive (they are answered anyway)
  Note(absl::StrFormat("%d requests waiting in their RPC hold %d more scheduler threads and "
                       "%.1f MiB",
                       waiting, scheduler.Threads() - threads_before,
                       (scheduler.RssBytes() - rss_before) / 1048576.0));
  Bench("waiting_leases", o.nodes, waiting, "requests");
  if (!GrantByReturning(scheduler, leases, o, held, 0, first, "waiting_leases", waiting)) return false;

  // A queue: `pending` requests answered "queued" at once (wait 0), remembered.
  const int64_t rss_full = scheduler.RssBytes();
  // The first `waiting` one after the other (they are the queue's oldest, asked again
  // below), the rest in parallel.
  auto queue_one = [&](int i) -> absl::Status {
    auto answer = leases.Request(absl::StrCat("queued-", i), absl::ZeroDuration());
    if (!answer.ok()) return answer.status();
    if (answer->granted()) return absl::InternalError("granted in a full cluster");
    return absl::OkStatus();
  };
  Run pending = Parallel(waiting, 1, queue_one);
  if (pending.error.empty()) {
    Run rest = Parallel(o.pending - waiting, o.threads,
                        [&](int i) { return queue_one(waiting + i); });
    pending.ms.insert(pending.ms.end(), rest.ms.begin(), rest.ms.end());
    pending.wall += rest.wall;
    pending.error = rest.error;
  }
  if (!pending.error.empty()) {
    Note("queued requests: " + pending.error);
    return false;
  }
  Bench("queued_leases_per_s", o.nodes, o.pending / absl::ToDoubleSeconds(pending.wall),
        "requests/s");
  const int64_t rss_queued = scheduler.RssBytes();
  Bench("rss_per_queued_lease", o.nodes, static_cast<double>(rss_queued - rss_full) / o.pending,
        "bytes");
  Note(absl::StrFormat("%d requests queued: %s; scheduler RSS %.0f MiB (+%.0f MiB), %d threads",
                       o.pending, DescribeLatencies(pending.ms), rss_queued / 1048576.0,
                       (rss_queued - rss_full) / 1048576.0, scheduler.Threads()));
  {
    const double idle = [&] {
      const absl::Duration c = scheduler.CpuTime();
      absl::SleepFor(absl::Seconds(2));
      return absl::FDivDuration(scheduler.CpuTime() - c, absl::Seconds(2));
    }();
    Note(absl::StrFormat("with %d queued the scheduler uses %.2f cores idle", o.pending, idle));
  }
  // The oldest `waiting` of the queue ask again and wait (a long poll each), and as many
  // leases come back: grants with the whole queue behind them.
  Waits heads(leases, "queued-", 0, waiting);
  if (!GrantByReturning(scheduler, leases, o, held, 0, heads, "queued_leases", waiting)) {
    return false;
  }
  return true;
}

}  // namespace drover::bench
