#include "node_agent/agent_metrics.h"

#include <cstring>

#include "common/exit_text.h"
#include "common/metrics_http.h"

namespace drover {
namespace {

constexpr const char* kCauseNames[] = {"success", "exit_code", "signal", "error"};

int CauseIndex(const proto::ExitInfo& e) {
  const char* cause = ExitCause(e);
  for (int i = 0; i < 4; ++i) {
    if (std::strcmp(cause, kCauseNames[i]) == 0) return i;
  }
  return 3;
}

double D(int64_t v) { return static_cast<double>(v); }
double D(uint64_t v) { return static_cast<double>(v); }

}  // namespace

proto::ObjectStoreUsage StoreUsage(const object_store::StoreStats& s) {
  proto::ObjectStoreUsage u;
  u.set_capacity_bytes(static_cast<int64_t>(s.capacity));
  u.set_used_bytes(static_cast<int64_t>(s.used));
  u.set_objects(static_cast<int64_t>(s.objects));
  u.set_spilled_objects(static_cast<int64_t>(s.spilled_objects));
  u.set_spilled_bytes(static_cast<int64_t>(s.spilled_bytes));
  u.set_evictions(static_cast<int64_t>(s.evictions));
  return u;
}

AgentMetrics::AgentMetrics()
    : registry_(std::make_shared<prometheus::Registry>()), rpcs_(registry_.get()) {}

void AgentMetrics::ProcessExited(bool task_worker, const proto::ExitInfo& exit) {
  exits_[task_worker ? 1 : 0][CauseIndex(exit)].fetch_add(1, std::memory_order_relaxed);
}

std::vector<std::shared_ptr<prometheus::Collectable>> AgentMetrics::Sources() {
  auto node_label = [this] {
    std::string id = sources_.node_id ? sources_.node_id() : "";
    return MetricLabels{{"node", id.empty() ? "unregistered" : id}};
  };
  auto snapshot = CollectAtScrape(
      [this](ScrapeFamilies* f) {
        const AgentMetricSources& s = sources_;
        if (s.resources != nullptr) {
          f->Gauge("drover_agent_cpus", "CPUs this node offers.").Add(s.resources->total.cpus());
          f->Gauge("drover_agent_memory_bytes", "Memory this node offers.")
              .Add(D(s.resources->total.memory_bytes()));
          f->Gauge("drover_agent_gpus", "GPUs this node offers (discovered or --num-gpus).")
              .Add(s.resources->total.gpus());
        }
        f->Counter("drover_agent_process_exits_total",
                   "Processes of this node that ended, by kind (rank, task_worker) and cause "
                   "(success, exit_code, signal, error).");
        for (int k = 0; k < 2; ++k) {
          for (int c = 0; c < kCauses; ++c) {
            f->Add(D(exits_[k][c].load(std::memory_order_relaxed)),
                   {{"kind", k == 0 ? "rank" : "task_worker"}, {"cause", kCauseNames[c]}});
          }
        }
        if (s.processes != nullptr) {
          const ProcessManager::StartCounts st = s.processes->start_counts();
          f->Counter("drover_agent_processes_started_total",
                     "Processes this node started, by kind (rank, task_worker).")
              .Add(D(st.ranks), {{"kind", "rank"}})
              .Add(D(st.task_workers), {{"kind", "task_worker"}});
          f->Counter("drover_agent_rank_restarts_total",
                     "Ranks started here for a restarted generation (a gang restart).")
              .Add(D(st.rank_restarts));
          f->Counter("drover_agent_process_start_failures_total",
                     "Start requests whose processes could not be spawned.")
              .Add(D(st.failed));
        }
        if (s.workers != nullptr) {
          const WorkerPool::Counts w = s.workers->counts();
          f->Gauge("drover_agent_task_workers", "Task workers of this node by state.")
              .Add(w.starting, {{"state", "starting"}})
              .Add(w.idle, {{"state", "idle"}})
              .Add(w.leased, {{"state", "leased"}})
              .Add(w.actors, {{"state", "actor"}});
          f->Counter("drover_agent_task_workers_reused_total",
                     "Leases given an idle worker of the warm pool (no process started).")
              .Add(D(w.reused));
        }
        if (s.store != nullptr) {
          f->Counter("drover_object_store_restarts_total",
                     "Times this node's object store died and was restarted.")
              .Add(s.store->restarts());
        }
        if (s.store_objects != nullptr) {
          absl::StatusOr<object_store::StoreStats> st = s.store_objects->Stats(absl::Seconds(2));
          f->Gauge("drover_object_store_up", "1 if this node's object store answered the scrape.")
              .Add(st.ok() ? 1 : 0);
          if (st.ok()) {
            f->Gauge("drover_object_store_capacity_bytes", "Shared memory of the object store.")
                .Add(D(st->capacity));
            f->Gauge("drover_object_store_used_bytes",
                     "Object store bytes holding objects (sealed, being written or leased).")
                .Add(D(st->used));
            f->Gauge("drover_object_store_objects", "Objects in the store's memory.")
                .Add(D(st->objects));
            f->Gauge("drover_object_store_spilled_bytes", "Bytes of objects spilled to disk.")
                .Add(D(st->spilled_bytes));
            f->Gauge("drover_object_store_spilled_objects", "Objects spilled to disk.")
                .Add(D(st->spilled_objects));
            f->Counter("drover_object_store_evictions_total",
                       "Secondary copies evicted to make room (since the store started).")
                .Add(D(st->evictions));
            f->Counter("drover_object_store_spills_total", "Objects spilled to disk.")
                .Add(D(st->spills));
            f->Counter("drover_object_store_restores_total", "Spilled objects read back.")
                .Add(D(st->restores));
          }
        }
        if (s.transfer != nullptr) {
          const ObjectTransferStats t = s.transfer->stats();
          f->Counter("drover_object_pulls_total",
                     "Objects this node pulled from another, by result (started, succeeded).")
              .Add(D(t.pulls_started), {{"result", "started"}})
              .Add(D(t.pulls_succeeded), {{"result", "succeeded"}});
          f->Counter("drover_object_pulled_bytes_total",
                     "Bytes written into this node's store by pulls (aborted ones included).")
              .Add(D(t.bytes_pulled));
          f->Counter("drover_object_fetches_joined_total",
                     "Fetches that waited on a pull of the same object already running.")
              .Add(D(t.fetches_joined));
          f->Counter("drover_object_reads_served_total",
                     "Objects streamed to other nodes, by result (started, completed).")
              .Add(D(t.reads_started), {{"result", "started"}})
              .Add(D(t.reads_completed), {{"result", "completed"}});
          f->Counter("drover_object_served_bytes_total", "Bytes streamed to other nodes.")
              .Add(D(t.bytes_served));
          f->Counter("drover_object_raw_transfers_total",
                     "Transfers whose bytes took the direct TCP path (TLS in a TLS cluster) "
                     "instead of gRPC messages, by direction (served, pulled).")
              .Add(D(t.raw_reads), {{"direction", "served"}})
              .Add(D(t.raw_pulls), {{"direction", "pulled"}});
        }
      },
      node_label);
  return {registry_, snapshot};
}

}  // namespace drover
