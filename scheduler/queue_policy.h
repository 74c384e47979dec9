// The queue and backfill policy: which pending jobs start now, where, and why the
// others wait.
//
// Pure: no lock, no clock of its own (`now` is an input), no I/O. SchedulerCore keeps
// the pending jobs in a JobQueue and the nodes in a NodeTable (node_table.h), both
// guarded by its lock, runs JobQueue::Plan after every change and applies what it is
// told; the policy is unit-tested directly (queue_policy_test.cc), also through
// PlanQueue, which plans once over plain vectors. Gang placement itself is PlaceGang
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
//
// How it scales (docs/scaling.md): jobs of one shape (the same per-process resources,
// process count, layout and time limit) form a class, kept in submission order. Within
// one pass, once a job of a class does not fit, no later job of that class can (room
// only shrinks during a pass), so the rest of the class waits with the same reason
// without being placed one by one; and a pass that follows only new submissions (no
// resource, node or time change) looks at the new jobs alone. A pass therefore costs
// one placement per job it starts and per class, not per queued job: 100,000 queued
// jobs of a few shapes cost what a few do. And a placement on what is free costs what
// changed since the last one, not a scan of every node: the classes of one shape
// (per-process resources and processes per node) share a CapacityIndex
// (capacity_index.h), for up to 32 shapes at once (the others' jobs scan). The one approximation: the waiting jobs of a
// class share the reason of the first of them that did not fit (its numbers, such as
// "the most free on any node is 2 CPUs", are those seen at that point of the pass).
#ifndef DROVER_SCHEDULER_QUEUE_POLICY_H_
#define DROVER_SCHEDULER_QUEUE_POLICY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "proto/common.pb.h"
#include "scheduler/capacity_index.h"
#include "scheduler/node_table.h"
#include "scheduler/placement.h"

namespace drover {

// A job waiting to be placed.
struct QueuedJob {
  std::string job_id;
  // Not owned; must outlive the job's stay in the queue (and a PlanQueue call).
  // REQUIRES: passed ValidateJobSpec.
  const proto::JobSpec* spec = nullptr;
  // > 0: a gang waiting to start generation `restart_count` (goes first).
  int restart_count = 0;
  // Submission order (smaller: earlier).
  int64_t seq = 0;
  // The caller's handle for the job, handed back in JobQueue's callbacks.
  void* ref = nullptr;
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

// The pending jobs, by class, and the placement passes over them. Not thread-safe.
class JobQueue {
 public:
  // What a pass tells its caller, in queue order. `start`: the job is placed at
  // `ranks` and leaves the queue; the caller must record it in the NodeTable (its
  // resources used, its hold) before returning, so the rest of the pass sees it.
  // `wait`: the job waits, for `reason` (the caller may have been told the same before;
  // a job whose reason did not change is mostly not told again). Neither may call
  // Add or Remove.
  struct Callbacks {
    std::function<void(const QueuedJob& job, std::vector<proto::RankPlacement> ranks)> start;
    std::function<void(const QueuedJob& job, const std::string& reason)> wait;
  };

  JobQueue();
  ~JobQueue();
  JobQueue(const JobQueue&) = delete;
  JobQueue& operator=(const JobQueue&) = delete;

  // Queues a job; the next pass decides it. REQUIRES: not queued.
  void Add(const QueuedJob& job);
  // Takes a job out (cancelled, or no longer pending); `job` as it was added. No-op if
  // it is not queued.
  void Remove(const QueuedJob& job);
  // The next pass looks at every job again although the NodeTable did not change (time
  // moved: borrowing and the reasons depend on it).
  void Invalidate() { dirty_ = true; }
  size_t size() const { return size_; }

  // Starts what fits and tells the others why they wait. Looks at every class when the
  // table (its version) changed, a job that went first or held the claim was added or
  // removed, or Invalidate was called; otherwise only at the jobs added since the last
  // pass; returns at once if there are none.
  void Plan(NodeTable& nodes, absl::Time now, const Callbacks& callbacks);

  // PlaceGang(spec, nodes.Total()): where the job would go if every node were empty
  // (a claim), or why it can never run on these nodes. Remembered per class until
  // the nodes' totals change. Valid until the next call.
  const PlacementResult& Whole(const proto::JobSpec& spec, NodeTable& nodes);

  // The claim of the last pass (job_id empty: none).
  const Claim& claim() const { return claim_; }
  // How many passes Plan has run: the claim changes only when this moves.
  uint64_t passes() const { return passes_; }

 private:
  struct Class;
  class Pass;
  static constexpr size_t kMaxIndexes = 32;

  // The index of a new class's shape: the one its shape has, a new one, or none if
  // kMaxIndexes shapes have one and classes use them all.
  std::shared_ptr<CapacityIndex> IndexFor(const std::string& shape, const proto::JobSpec& spec);

  // Restarting gangs, by submission; each decided on its own.
  std::map<int64_t, QueuedJob> restarts_;
  // The other jobs, by class key.
  absl::flat_hash_map<std::string, std::unique_ptr<Class>> classes_;
  // Whole's answers by class key, for the totals of whole_version_.
  absl::flat_hash_map<std::string, PlacementResult> whole_;
  uint64_t whole_version_ = 0;
  // Capacity indexes by shape key, shared with the classes of the shape, and kept
  // after them (a stream of jobs of one shape into a cluster with room makes and ends
  // a class per job): the least recently used one no class uses goes first.
  struct SharedIndex {
    std::shared_ptr<CapacityIndex> index;
    uint64_t used = 0;
  };
  absl::flat_hash_map<std::string, SharedIndex> indexes_;
  uint64_t index_uses_ = 0;
  std::set<Class*> fresh_;  // classes with jobs added since the last pass
  size_t size_ = 0;
  bool dirty_ = true;
  uint64_t table_version_ = 0;  // the table's version after the last pass
  Claim claim_;
  uint64_t passes_ = 0;
  // The job holding claim_, if it belongs to a class (its key and seq): it was told a
  // reason of its own.
  std::string holder_key_;
  int64_t holder_seq_ = -1;
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

// One pass over plain values (a JobQueue and a NodeTable made for it). `nodes` are the
// ALIVE nodes in placement preference order; `holding` the jobs that hold resources
// now. Jobs started by this plan count as holding (from `now`, by their own time limit)
// for later jobs of the same plan.
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
