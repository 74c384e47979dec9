// SchedulerMetrics: the scheduler's Prometheus metrics (every one is listed in
// docs/metrics.md). What the scheduler holds now (nodes by state and their resources,
// jobs by state, pending jobs by reason, leases, actors) is read at each scrape from a
// snapshot (SchedulerCore::ClusterStatus and CountQueue, LeaseManager::counts: each
// takes its lock only to copy or count); what happens (submissions, placements and
// their latency, rank exits by cause, restarts, task workers' exits) is counted as the
// job timeline hears it (job_timeline.h listener); RPC latencies come from a server
// interceptor (common/rpc_metrics.h).
//
// Threading: thread-safe. The listener runs under the core's or the lease manager's
// lock and only updates counters and the latency histogram (plus one small map of
// when each pending generation began waiting, under its own leaf mutex).
#ifndef DROVER_SCHEDULER_SCHEDULER_METRICS_H_
#define DROVER_SCHEDULER_SCHEDULER_METRICS_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/rpc_metrics.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "scheduler/job_timeline.h"
#include "scheduler/lease_manager.h"
#include "scheduler/scheduler_core.h"

namespace drover {

class SchedulerMetrics {
 public:
  // `core` and `leases` (may be null) must outlive this.
  SchedulerMetrics(SchedulerCore* core, LeaseManager* leases);

  // What /metrics serves (common/metrics_http.h ServeMetrics).
  std::vector<std::shared_ptr<prometheus::Collectable>> Sources();
  // Give to JobTimeline::SetListener before the core starts.
  JobTimeline::Listener TimelineListener();
  RpcMetrics& rpcs() { return rpcs_; }

 private:
  void OnEvent(const std::string& job_id, const proto::TimelineEvent& e);

  SchedulerCore* const core_;
  LeaseManager* const leases_;
  const std::shared_ptr<prometheus::Registry> registry_;
  RpcMetrics rpcs_;
  prometheus::Counter& submitted_;
  prometheus::Family<prometheus::Counter>& ended_;
  prometheus::Counter& restarts_;
  prometheus::Counter& ranks_started_;
  prometheus::Family<prometheus::Counter>& rank_exits_;
  prometheus::Family<prometheus::Counter>& worker_exits_;
  prometheus::Histogram& placement_latency_;

  absl::Mutex mu_;
  // Jobs whose next generation waits to be placed: since when (microseconds).
  std::map<std::string, int64_t> waiting_since_ ABSL_GUARDED_BY(mu_);
};

}  // namespace drover

#endif  // DROVER_SCHEDULER_SCHEDULER_METRICS_H_
