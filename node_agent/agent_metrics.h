// AgentMetrics: a node agent's Prometheus metrics (every one is listed in
// docs/metrics.md), each labelled with the node's id. What the agent holds now (its
// resources and GPUs, task workers by state, the object store's use, read from the
// store with one Stats request per scrape) is read at each scrape; what happens is
// counted as it happens: processes started (the process manager's counts), exits by
// kind and cause (counted here from the agent's exit callback), object transfers (the
// transfer's own counters), store restarts (the supervisor's), and the latency of the
// RPCs the agent serves (common/rpc_metrics.h).
//
// Threading: thread-safe. ProcessExited runs on the process manager's thread and only
// bumps an atomic.
#ifndef DROVER_NODE_AGENT_AGENT_METRICS_H_
#define DROVER_NODE_AGENT_AGENT_METRICS_H_

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/rpc_metrics.h"
#include "node_agent/object_transfer.h"
#include "node_agent/process_manager.h"
#include "node_agent/resources.h"
#include "node_agent/store_local_objects.h"
#include "node_agent/store_supervisor.h"
#include "node_agent/worker_pool.h"
#include "prometheus/collectable.h"
#include "prometheus/registry.h"
#include "proto/common.pb.h"

namespace drover {

// Where the figures come from. Any pointer may be null (that part is not running);
// all must outlive the AgentMetrics.
struct AgentMetricSources {
  std::function<std::string()> node_id;  // "" until registered
  const NodeResources* resources = nullptr;
  ProcessManager* processes = nullptr;
  WorkerPool* workers = nullptr;
  StoreSupervisor* store = nullptr;
  StoreLocalObjects* store_objects = nullptr;
  ObjectTransfer* transfer = nullptr;
};

class AgentMetrics {
 public:
  AgentMetrics();

  // REQUIRES: before the first scrape.
  void SetSources(AgentMetricSources sources) { sources_ = std::move(sources); }
  // A process of this node ended (a gang rank, or a task worker when `task_worker`).
  void ProcessExited(bool task_worker, const proto::ExitInfo& exit);
  // What /metrics serves.
  std::vector<std::shared_ptr<prometheus::Collectable>> Sources();
  RpcMetrics& rpcs() { return rpcs_; }

 private:
  static constexpr int kCauses = 4;  // ExitCause's words
  AgentMetricSources sources_;
  const std::shared_ptr<prometheus::Registry> registry_;
  RpcMetrics rpcs_;
  // [task_worker][cause]
  std::array<std::array<std::atomic<int64_t>, kCauses>, 2> exits_{};
};

// The store's figures as a heartbeat carries them.
proto::ObjectStoreUsage StoreUsage(const object_store::StoreStats& stats);

}  // namespace drover

#endif  // DROVER_NODE_AGENT_AGENT_METRICS_H_
