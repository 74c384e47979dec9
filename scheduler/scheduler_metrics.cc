#include "scheduler/scheduler_metrics.h"

#include "common/exit_text.h"
#include "common/metrics_http.h"

namespace drover {
namespace {

// Seconds to minutes: a job placed at once takes under a millisecond; one that waits
// for resources, as long as they take to free.
const prometheus::Histogram::BucketBoundaries kPlacementBuckets = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1,      2.5,   5,      10,    30,   60,    300,  900, 3600};

prometheus::Family<prometheus::Counter>& CounterFamily(prometheus::Registry& r,
                                                       const std::string& name,
                                                       const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r);
}

void AddNodes(const proto::GetClusterStatusReply& status, ScrapeFamilies* f) {
  std::map<std::string, int> by_state;
  for (int s = proto::NodeState_MIN; s <= proto::NodeState_MAX; ++s) {
    by_state[proto::NodeState_Name(static_cast<proto::NodeState>(s))] = 0;
  }
  for (const auto& n : status.nodes()) ++by_state[proto::NodeState_Name(n.state())];
  f->Gauge("drover_nodes", "Nodes the scheduler knows, by state.");
  for (const auto& [state, count] : by_state) f->Add(count, {{"state", state}});

  // Per node: bounded by the cluster's size. DEAD nodes keep their series (at zero free)
  // so a dashboard shows them until the scheduler forgets them.
  struct PerNode {
    const char* name;
    const char* help;
    double (*value)(const proto::NodeInfo&);
  };
  static const PerNode kPerNode[] = {
      {"drover_node_cpus", "CPUs a node offers.",
       [](const proto::NodeInfo& n) { return n.total().cpus(); }},
      {"drover_node_cpus_free", "CPUs of a node not held by jobs or leases.",
       [](const proto::NodeInfo& n) { return n.free().cpus(); }},
      {"drover_node_memory_bytes", "Memory a node offers.",
       [](const proto::NodeInfo& n) { return static_cast<double>(n.total().memory_bytes()); }},
      {"drover_node_memory_free_bytes", "Memory of a node not held by jobs or leases.",
       [](const proto::NodeInfo& n) { return static_cast<double>(n.free().memory_bytes()); }},
      {"drover_node_gpus", "GPUs a node offers.",
       [](const proto::NodeInfo& n) { return static_cast<double>(n.total().gpus()); }},
      {"drover_node_gpus_free", "GPUs of a node not held by jobs or leases.",
       [](const proto::NodeInfo& n) { return static_cast<double>(n.free().gpus()); }},
      {"drover_node_warnings", "Problems a node's agent found at start (drover status shows them).",
       [](const proto::NodeInfo& n) { return static_cast<double>(n.warnings_size()); }},
  };
  f->Gauge("drover_node_info",
           "One per node known, with its state, address and hostname as labels (value 1).");
  for (const auto& n : status.nodes()) {
    f->Add(1, {{"node", n.node_id()},
               {"state", proto::NodeState_Name(n.state())},
               {"ip", n.node_ip()},
               {"hostname", n.hostname()}});
  }
  for (const PerNode& m : kPerNode) {
    f->Gauge(m.name, m.help);
    for (const auto& n : status.nodes()) f->Add(m.value(n), {{"node", n.node_id()}});
  }
}

}  // namespace

SchedulerMetrics::SchedulerMetrics(SchedulerCore* core, LeaseManager* leases)
    : core_(core),
      leases_(leases),
      registry_(std::make_shared<prometheus::Registry>()),
      rpcs_(registry_.get()),
      submitted_(CounterFamily(*registry_, "drover_jobs_submitted_total",
                               "Jobs submitted (drivers registered included).")
                     .Add({})),
      ended_(CounterFamily(*registry_, "drover_jobs_ended_total",
                           "Jobs that reached a final state, by state.")),
      restarts_(CounterFamily(*registry_, "drover_job_restarts_total",
                              "Gang restarts begun after a rank failed.")
                    .Add({})),
      ranks_started_(CounterFamily(*registry_, "drover_ranks_started_total",
                                   "Ranks the agents started (every generation).")
                         .Add({})),
      rank_exits_(CounterFamily(*registry_, "drover_rank_exits_total",
                                "Ranks that ended, by cause (success, exit_code, signal, "
                                "error: could not start or node lost).")),
      worker_exits_(CounterFamily(*registry_, "drover_task_worker_exits_total",
                                  "Task workers that exited while holding a lease, by cause.")),
      placement_latency_(prometheus::BuildHistogram()
                             .Name("drover_placement_latency_seconds")
                             .Help("From a generation being ready to place (submission, or "
                                   "the previous generation fully stopped) to its placement.")
                             .Register(*registry_)
                             .Add({}, kPlacementBuckets)) {
  for (const char* cause : {"success", "exit_code", "signal", "error"}) {
    rank_exits_.Add({{"cause", cause}});
    worker_exits_.Add({{"cause", cause}});
  }
  for (proto::JobState s : {proto::SUCCEEDED, proto::FAILED, proto::CANCELLED}) {
    ended_.Add({{"state", proto::JobState_Name(s)}});
  }
}

JobTimeline::Listener SchedulerMetrics::TimelineListener() {
  return [this](const std::string& job_id, const proto::TimelineEvent& e) { OnEvent(job_id, e); };
}

void SchedulerMetrics::OnEvent(const std::string& job_id, const proto::TimelineEvent& e) {
  switch (e.kind()) {
    case proto::TIMELINE_SUBMITTED:
      submitted_.Increment();
      [[fallthrough]];
    case proto::TIMELINE_REQUEUED: {
      absl::MutexLock lock(&mu_);
      waiting_since_[job_id] = e.time_us();
      break;
    }
    case proto::TIMELINE_PLACED: {
      absl::MutexLock lock(&mu_);
      auto it = waiting_since_.find(job_id);
      if (it == waiting_since_.end()) break;  // another node of the same placement
      placement_latency_.Observe(static_cast<double>(e.time_us() - it->second) / 1e6);
      waiting_since_.erase(it);
      break;
    }
    case proto::TIMELINE_RANKS_STARTED:
      ranks_started_.Increment(e.ranks_size());
      break;
    case proto::TIMELINE_RANK_EXITED:
      rank_exits_.Add({{"cause", ExitCause(e.exit())}}).Increment();
      break;
    case proto::TIMELINE_WORKER_EXITED:
      worker_exits_.Add({{"cause", ExitCause(e.exit())}}).Increment();
      break;
    case proto::TIMELINE_RESTARTING:
      restarts_.Increment();
      break;
    case proto::TIMELINE_ENDED: {
      ended_.Add({{"state", e.state()}}).Increment();
      absl::MutexLock lock(&mu_);
      waiting_since_.erase(job_id);  // drivers are never placed
      break;
    }
    default:
      break;
  }
}

std::vector<std::shared_ptr<prometheus::Collectable>> SchedulerMetrics::Sources() {
  auto snapshot = CollectAtScrape([this](ScrapeFamilies* f) {
    const proto::GetClusterStatusReply status = core_->ClusterStatus();
    AddNodes(status, f);
    f->Gauge("drover_jobs", "Jobs the scheduler holds, by state (drivers included).");
    for (const auto& [state, count] : status.job_counts()) f->Add(count, {{"state", state}});
    const SchedulerCore::QueueCounts queue = core_->CountQueue();
    f->Gauge("drover_jobs_pending",
             "Pending jobs by why they wait: no_nodes, resources, behind_claim (an earlier "
             "job's claim), not_yet_scheduled.");
    for (const char* reason : {"no_nodes", "resources", "behind_claim", "not_yet_scheduled"}) {
      auto it = queue.pending_by_reason.find(reason);
      f->Add(it == queue.pending_by_reason.end() ? 0 : it->second, {{"reason", reason}});
    }
    f->Gauge("drover_jobs_restarting", "Jobs whose gang is being stopped for a restart.")
        .Add(queue.restarting);
    if (leases_ == nullptr) return;
    const LeaseManager::Counts c = leases_->counts();
    f->Gauge("drover_leases", "Worker leases held now (actors' included).").Add(c.leases);
    f->Gauge("drover_lease_requests_pending", "Lease requests waiting for resources.")
        .Add(c.pending_requests);
    f->Counter("drover_leases_granted_total", "Worker leases granted.")
        .Add(static_cast<double>(c.leases_granted));
    f->Counter("drover_leases_ended_total",
               "Worker leases that ended (returned, worker exited, node lost, job ended).")
        .Add(static_cast<double>(c.leases_ended));
    f->Counter("drover_leases_revoked_total",
               "Task leases asked back for a pending job's claim.")
        .Add(static_cast<double>(c.leases_revoked));
    f->Gauge("drover_actors", "Actors by state.")
        .Add(c.actors_pending - c.actors_restarting, {{"state", "PENDING"}})
        .Add(c.actors_alive, {{"state", "ALIVE"}})
        .Add(c.actors_restarting, {{"state", "RESTARTING"}})
        .Add(c.actors_dead, {{"state", "DEAD"}});
  });
  return {registry_, snapshot};
}

}  // namespace drover
