// The queue and backfill policy: which pending jobs start now, where, and why the
// others wait.
//
// Pure: no lock, no clock of its own (`now` is an input), no I/O. SchedulerCore gathers
// the inputs under its lock (pending jobs, the ALIVE nodes' capacity and use, the
// running jobs' time limits), calls PlanQueue and applies the decisions; the policy is
// unit-tested directly (queue_policy_test.cc). Gang placement itself is PlaceGang
// (placement.h); this unit decides the order and what each job may use.
//
// The policy (as Slurm's backfill, without runtime estimates beyond time limits):
//   - pending jobs are considered in order: gangs waiting to restart first (they held
//     resources a moment ago), then by submission;
//   - the first job that does not fit now claims what it would take if every running
//     job ended (placement against total capacity): a Claim. Later jobs start only in
//     what is left beside the claim, so a stream of small jobs cannot starve a big one;
//   - a later job whose time limit ends before the claim's earliest start (the latest
//     time limit among the jobs holding the claimed nodes; never, if one has none) may
//     use the claimed resources meanwhile: limits are enforced, so it cannot delay the
//     claiming job.
#ifndef DROVER_SCHEDULER_QUEUE_POLICY_H_
#define DROVER_SCHEDULER_QUEUE_POLICY_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "proto/common.pb.h"
#include "scheduler/placement.h"

namespace drover {

// A job waiting to be placed.
struct QueuedJob {
  std::string job_id;
  // Not owned; must outlive the PlanQueue call. REQUIRES: passed ValidateJobSpec.
  const proto::JobSpec* spec = nullptr;
  // > 0: a gang waiting to start generation `restart_count` (goes first).
  int restart_count = 0;
  // Submission order (smaller: earlier).
  int64_t seq = 0;
};

// An ALIVE node: what it has and what running jobs hold of it.
struct NodeUse {
  std::string node_id;
  std::string node_ip;
  proto::Resources total;
  proto::Resources used;
  std::vector<int> gpu_ids;  // every GPU index of the node, ascending
  std::set<int> used_gpus;
};

// A job that holds resources (running, or stopping but not yet reported gone).
struct HoldingJob {
  std::vector<std::string> node_ids;  // nodes it holds resources on
  // When its hold ends at the latest, by its enforced time limit; InfiniteFuture if it
  // has none (or is restarting, or not known to end).
  absl::Time ends_by = absl::InfiniteFuture();
};

// What the oldest pending job that does not fit would take once running jobs end:
// later jobs may not use it. Per node: resources and GPU indices.
struct Claim {
  std::string job_id;  // empty: no claim
  std::map<std::string, proto::Resources> resources;
  std::map<std::string, std::set<int>> gpus;
  // When the claimed resources are free at the latest (see HoldingJob::ends_by);
  // InfiniteFuture if a holder has no limit (then nobody may borrow the claim).
  absl::Time earliest_start = absl::InfiniteFuture();
};

// The decision for one pending job.
struct QueueDecision {
  std::string job_id;
  bool start = false;
  // start: where each rank goes (PlaceGang's placement against free capacity).
  std::vector<proto::RankPlacement> ranks;
  // !start: why it waits, in words for the user (the job's `reason`).
  std::string reason;
};

struct QueuePlan {
  std::vector<QueueDecision> decisions;  // one per pending job, in queue order
  Claim claim;                            // job_id empty if every job started or none can
};

// Decides the queue. `nodes` are the ALIVE nodes in placement preference order;
// `holding` the jobs that hold resources now. Jobs started by this plan count as
// holding (from `now`, by their own time limit) for later jobs of the same plan.
QueuePlan PlanQueue(std::vector<QueuedJob> pending, std::vector<NodeUse> nodes,
                    std::vector<HoldingJob> holding, absl::Time now);

// Capacities for PlaceGang: each node's total, or what is free (total - used, minus
// `claim`'s share if given; GPUs in use or claimed left out).
std::vector<NodeCapacity> TotalCapacities(const std::vector<NodeUse>& nodes);
std::vector<NodeCapacity> FreeCapacities(const std::vector<NodeUse>& nodes,
                                         const Claim* claim = nullptr);

// Why a pending job waits, as one of a few fixed words (a metrics label, bounded), from
// the reason PlanQueue gave it: "no_nodes" (none alive), "behind_claim" (an earlier
// job's claim is in its way), "resources" (it does not fit in what is free), or
// "not_yet_scheduled" (no queue pass has looked at it yet). A restart's prefix is
// looked through.
const char* PendingReasonClass(const std::string& reason);

}  // namespace drover

#endif  // DROVER_SCHEDULER_QUEUE_POLICY_H_
