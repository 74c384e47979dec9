#include "scheduler/queue_policy.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace drover {
namespace {

// When `claim`'s resources are free at the latest (see Claim::earliest_start).
absl::Time EarliestStart(const Claim& claim, const std::vector<HoldingJob>& holding,
                         absl::Time now) {
  absl::Time latest = now;
  for (const HoldingJob& h : holding) {
    const bool there = std::any_of(h.node_ids.begin(), h.node_ids.end(), [&](const auto& id) {
      return claim.resources.count(id) > 0;
    });
    if (!there) continue;
    if (h.ends_by == absl::InfiniteFuture()) return absl::InfiniteFuture();
    latest = std::max(latest, h.ends_by);
  }
  return latest;
}

// Why `job` waits although PlaceGang found no room: `placement_reason`, or, if only
// `claim` is in its way, behind whom; prefixed with the restart it waits for.
constexpr absl::string_view kRestartPrefix = "restart ";
constexpr absl::string_view kRestartWaiting = " waiting: ";
constexpr absl::string_view kBehindPrefix = "waiting behind ";
constexpr absl::string_view kNoNodesReason = "no nodes are alive";
constexpr absl::string_view kNotScheduledReason = "waiting to be placed";

std::string WaitReason(const QueuedJob& job, const std::string& placement_reason,
                       const std::vector<NodeUse>& nodes, const Claim* claim, absl::Time now) {
  std::string why = placement_reason;
  if (claim != nullptr && PlaceGang(*job.spec, FreeCapacities(nodes)).ok) {
    why = absl::StrCat(kBehindPrefix, claim->job_id,
                       " (submitted earlier): the free resources it will need are kept for it");
    // An absolute time, so the reason (and the job's version) does not change every pass.
    if (claim->earliest_start != absl::InfiniteFuture() &&
        claim->earliest_start - now >= absl::Seconds(1)) {
      absl::StrAppend(&why, "; a --time-limit ending before ",
                      absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", claim->earliest_start,
                                       absl::UTCTimeZone()),
                      " would let it start now");
    }
  }
  if (job.restart_count == 0) return why;
  return absl::StrCat(kRestartPrefix, job.restart_count, " of ", job.spec->max_restarts(),
                      kRestartWaiting, why);
}

// Records `ranks` of a job needing `per` each as used on `nodes`.
void Take(const std::vector<proto::RankPlacement>& ranks, const proto::Resources& per,
          std::vector<NodeUse>* nodes) {
  for (const auto& p : ranks) {
    for (NodeUse& n : *nodes) {
      if (n.node_id != p.node_id()) continue;
      AddResources(&n.used, per, +1);
      n.used_gpus.insert(p.gpu_ids().begin(), p.gpu_ids().end());
      break;
    }
  }
}

}  // namespace

namespace {

// Each node's capacity for PlaceGang: its total, or (`free`) what is neither used nor
// claimed.
std::vector<NodeCapacity> Capacities(const std::vector<NodeUse>& nodes, bool free,
                                     const Claim* claim) {
  std::vector<NodeCapacity> caps;
  caps.reserve(nodes.size());
  for (const NodeUse& n : nodes) {
    NodeCapacity c;
    c.node_id = n.node_id;
    c.node_ip = n.node_ip;
    c.available = free ? SubtractResources(n.total, n.used) : n.total;
    const std::set<int>* claimed_gpus = nullptr;
    if (free && claim != nullptr) {
      if (auto it = claim->resources.find(c.node_id); it != claim->resources.end()) {
        c.available = SubtractResources(c.available, it->second);
        // Nothing below zero: a claim on what running jobs still hold leaves nothing.
        c.available.set_memory_bytes(std::max<int64_t>(0, c.available.memory_bytes()));
        for (auto& [k, v] : *c.available.mutable_custom()) v = std::max(0.0, v);
      }
      if (auto it = claim->gpus.find(c.node_id); it != claim->gpus.end()) {
        claimed_gpus = &it->second;
      }
    }
    for (int g : n.gpu_ids) {
      if (free && (n.used_gpus.count(g) || (claimed_gpus != nullptr && claimed_gpus->count(g)))) {
        continue;
      }
      c.gpu_ids.push_back(g);
    }
    c.available.set_gpus(static_cast<int>(c.gpu_ids.size()));
    caps.push_back(std::move(c));
  }
  return caps;
}

}  // namespace

std::vector<NodeCapacity> TotalCapacities(const std::vector<NodeUse>& nodes) {
  return Capacities(nodes, /*free=*/false, nullptr);
}

std::vector<NodeCapacity> FreeCapacities(const std::vector<NodeUse>& nodes, const Claim* claim) {
  return Capacities(nodes, /*free=*/true, claim);
}

QueuePlan PlanQueue(std::vector<QueuedJob> pending, std::vector<NodeUse> nodes,
                    std::vector<HoldingJob> holding, absl::Time now) {
  std::stable_sort(pending.begin(), pending.end(), [](const QueuedJob& a, const QueuedJob& b) {
    if ((a.restart_count > 0) != (b.restart_count > 0)) return a.restart_count > 0;
    return a.seq < b.seq;
  });
  // A job started now holds its nodes from the start of this millisecond (the
  // scheduler records generation starts in milliseconds).
  const absl::Time start = absl::FromUnixMillis(absl::ToUnixMillis(now));
  QueuePlan plan;
  Claim& claim = plan.claim;
  for (const QueuedJob& job : pending) {
    QueueDecision d;
    d.job_id = job.job_id;
    const bool claimed = !claim.job_id.empty();
    // Backfill: a job sure to end (its time limit is enforced) before the claiming job
    // could start anyway may use the claimed resources meanwhile.
    const int64_t limit_ms = job.spec->time_limit_ms();
    const bool borrows =
        claimed && limit_ms > 0 && now + absl::Milliseconds(limit_ms) <= claim.earliest_start;
    const Claim* in_the_way = claimed && !borrows ? &claim : nullptr;
    PlacementResult placed = PlaceGang(*job.spec, FreeCapacities(nodes, in_the_way));
    if (placed.ok) {
      d.start = true;
      d.ranks = std::move(placed.ranks);
      Take(d.ranks, job.spec->per_process(), &nodes);
      HoldingJob h;
      for (const auto& p : d.ranks) h.node_ids.push_back(p.node_id());
      if (limit_ms > 0) h.ends_by = start + absl::Milliseconds(limit_ms);
      holding.push_back(std::move(h));
      plan.decisions.push_back(std::move(d));
      continue;
    }
    d.reason = WaitReason(job, placed.reason, nodes, in_the_way, now);
    plan.decisions.push_back(std::move(d));
    if (claimed) continue;
    PlacementResult whole = PlaceGang(*job.spec, TotalCapacities(nodes));
    if (!whole.ok) continue;  // cannot run on today's nodes even when empty: no claim
    claim.job_id = job.job_id;
    for (const auto& p : whole.ranks) {
      AddResources(&claim.resources[p.node_id()], job.spec->per_process(), +1);
      claim.gpus[p.node_id()].insert(p.gpu_ids().begin(), p.gpu_ids().end());
    }
    claim.earliest_start = EarliestStart(claim, holding, now);
  }
  return plan;
}

const char* PendingReasonClass(const std::string& reason) {
  absl::string_view why = reason;
  // WaitReason's restart prefix: "restart N of M waiting: <why>".
  if (absl::StartsWith(why, kRestartPrefix)) {
    auto colon = why.find(kRestartWaiting);
    if (colon != absl::string_view::npos) why.remove_prefix(colon + kRestartWaiting.size());
  }
  if (absl::StartsWith(why, kNoNodesReason)) return "no_nodes";
  if (absl::StartsWith(why, kBehindPrefix)) return "behind_claim";
  if (why.empty() || why == kNotScheduledReason) return "not_yet_scheduled";
  return "resources";
}

}  // namespace drover
