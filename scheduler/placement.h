// Gang placement: where each process of a job goes, all or nothing.
//
// A pure function over a snapshot of node capacities, so it is unit-tested without
// any daemon. The scheduler calls it with free capacity to place a job now, and with
// total capacity to reject at submit a job that could never fit.
#ifndef DROVER_SCHEDULER_PLACEMENT_H_
#define DROVER_SCHEDULER_PLACEMENT_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "proto/common.pb.h"

namespace drover {

// What placement may use on one node.
struct NodeCapacity {
  std::string node_id;
  std::string node_ip;
  proto::Resources available;
  // GPU indices available, ascending; size() >= available.gpus().
  std::vector<int> gpu_ids;
};

struct PlacementResult {
  bool ok = false;
  // One entry per rank, rank order; ranks are contiguous per node and local ranks
  // count from 0 on each node. Empty unless ok.
  std::vector<proto::RankPlacement> ranks;
  // Unless ok: why not, in words a user can act on, e.g.
  // "needs 4 GPUs on one node; the most free on any node is 2".
  std::string reason;
};

// Places spec.nproc() processes on `nodes` (in preference order).
// With spec.nproc_per_node() > 0 uses exactly nproc/nproc_per_node nodes with that
// many each; otherwise PACK (fewest nodes) or SPREAD (round-robin) by spec.strategy().
// REQUIRES: spec passed ValidateJobSpec.
PlacementResult PlaceGang(const proto::JobSpec& spec, const std::vector<NodeCapacity>& nodes);
// The same over pointers, so a caller can place on a view it did not copy.
PlacementResult PlaceGang(const proto::JobSpec& spec,
                          const std::vector<const NodeCapacity*>& nodes);

// The pieces of PlaceGang, for a caller that keeps node capacities indexed instead of
// scanning them (capacity_index.h) and must decide exactly as PlaceGang would:
//
// How many processes needing `per` fit into `avail` (INT_MAX if `per` needs nothing).
int ProcessesThatFit(const proto::Resources& avail, const proto::Resources& per);
// PlaceGang's reason when there are no nodes.
inline constexpr char kNoNodesAlive[] =
    "no nodes are alive; start a node agent (`drover start --address ...`)";
// The most of each resource kind that any one node has available (0 if none has it).
struct ResourceMaxima {
  double gpus = 0;
  double cpus = 0;
  double memory_bytes = 0;
  std::map<std::string, double> custom;
};
ResourceMaxima MaximaOf(const std::vector<const NodeCapacity*>& nodes);
// PlaceGang's reason for not placing `spec` on `nodes` nodes whose most available of
// each kind is `best`, given `fit`: with spec.nproc_per_node(), how many nodes have
// room for that many processes; else how many processes fit on all of them together.
// REQUIRES: `fit` is too few.
std::string PlacementShortfall(const proto::JobSpec& spec, const ResourceMaxima& best,
                               size_t nodes, long fit);
// The ranks of a placement of `counts` processes on each node, nodes in group order.
std::vector<proto::RankPlacement> AssignRanks(
    const proto::Resources& per, const std::vector<std::pair<const NodeCapacity*, int>>& counts);

// Checks a spec for errors a user can fix (empty command, zero processes, negative
// resources, nproc not divisible by nproc_per_node...). Returns "" if valid, else
// the message.
std::string ValidateJobSpec(const proto::JobSpec& spec);

// Checks what a node offers at registration: every amount finite and not negative, and
// `gpu_ids` naming each of total.gpus() GPUs once, with ids >= 0 (two ranks must never
// be pinned to one GPU). Returns "" if valid, else the message.
std::string ValidateNodeOffer(const proto::Resources& total,
                              const google::protobuf::RepeatedField<int32_t>& gpu_ids);

// acc += sign * r, kind by kind (custom resources by name).
void AddResources(proto::Resources* acc, const proto::Resources& r, int sign);
// total - used; CPUs that round to below zero are clamped to 0.
proto::Resources SubtractResources(const proto::Resources& total, const proto::Resources& used);

// "2 CPUs, 1 GPU, 4.0 GiB memory" for messages.
std::string DescribeResources(const proto::Resources& r);

}  // namespace drover

#endif  // DROVER_SCHEDULER_PLACEMENT_H_
