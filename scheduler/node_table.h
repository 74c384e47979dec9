// NodeTable: the nodes' resources as placement sees them. For each node the scheduler
// knows: its total, what running jobs and leases use of it, its GPUs, whether it is
// ALIVE (only ALIVE nodes are placed on), and the holds on it (when the jobs holding
// resources there end at the latest, for the queue's claims: queue_policy.h).
//
// Why a table of its own: a placement pass reads every ALIVE node's free capacity, and
// copying 1,000 nodes' records per pass (as the scheduler once did, several times per
// heartbeat) cost more than everything else the scheduler does. The table keeps the
// capacity views placement reads (Free, Total) and refreshes only the entries of nodes
// that changed since they were last read. `version` moves with every change, so a
// caller can tell whether anything happened since it last looked. A log of which
// nodes' free capacity changed (Changes) and the most free of each resource kind
// (FreeMaxima) let an index of its own (capacity_index.h) follow the table without
// reading every node.
//
// Pure: no lock, no clock, no I/O. SchedulerCore owns one and guards it with its mutex.
// Not thread-safe.
#ifndef DROVER_SCHEDULER_NODE_TABLE_H_
#define DROVER_SCHEDULER_NODE_TABLE_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "proto/common.pb.h"
#include "scheduler/placement.h"

namespace drover {

// A node: what it has and what running jobs (and leases) hold of it.
struct NodeUse {
  std::string node_id;
  std::string node_ip;
  proto::Resources total;
  proto::Resources used;
  std::vector<int> gpu_ids;  // every GPU index of the node, ascending
  std::set<int> used_gpus;
  int64_t order = 0;  // placement preference (smaller: first); registration order
};

class NodeTable {
 public:
  // Adds a node (not ALIVE, nothing used) or updates its address, total and GPUs
  // (what it uses stays). `order` ranks it in placement preference (smaller: first).
  void Set(const std::string& node_id, const std::string& node_ip,
           const proto::Resources& total, std::vector<int> gpu_ids, int64_t order);
  // Only ALIVE nodes are placed on and appear in the views.
  void SetAlive(const std::string& node_id, bool alive);
  // Adds (sign +1) or gives back (-1) `r` and `gpus` on a node; no-op for an unknown one.
  void Use(const std::string& node_id, const proto::Resources& r, const std::vector<int>& gpus,
           int sign);
  // Adds (+1) or removes (-1) a hold on each of `node_ids` (repeats count once): a job
  // that holds resources there until `ends_by` at the latest (InfiniteFuture: no known
  // end). Unknown nodes are added (not ALIVE), so holds survive a node's re-registration.
  void Hold(const std::vector<std::string>& node_ids, absl::Time ends_by, int sign);

  // nullptr if unknown.
  const NodeUse* Find(const std::string& node_id) const;
  bool Alive(const std::string& node_id) const;
  // The node's position in the views below, -1 if it is not ALIVE.
  int ViewIndex(const std::string& node_id);
  // When the last hold on the node ends at the latest: InfiniteFuture if a holder has
  // no known end, InfinitePast if nothing holds it.
  absl::Time LatestHoldEnd(const std::string& node_id) const;

  // The ALIVE nodes in preference order, and their capacities for PlaceGang: free
  // (total - used; GPUs in use left out) and total. Valid until the next change.
  const std::vector<const NodeUse*>& AliveNodes();
  const std::vector<NodeCapacity>& Free();
  const std::vector<NodeCapacity>& Total();

  // Where a reader of the change log stands.
  struct Cursor {
    uint64_t epoch = 0;
    uint64_t pos = 0;
  };
  // Calls `changed(i)` for the view index `i` of each ALIVE node whose free capacity
  // changed since `*cursor` (a node may come more than once), then moves the cursor to
  // now. False, with no calls, if the views were rebuilt since (a node set, alive or
  // not) or the log was trimmed past the cursor (a reader that waited long): the
  // reader must read every node of Free() again. Free() is up to date on return.
  template <typename F>
  bool Changes(Cursor* cursor, F changed) {
    Free();
    const bool ok = cursor->epoch == epoch_ && cursor->pos >= log_base_;
    if (ok) {
      for (uint64_t i = cursor->pos - log_base_; i < log_.size(); ++i) {
        changed(log_[i]->view_index);
      }
    }
    cursor->epoch = epoch_;
    cursor->pos = log_base_ + log_.size();
    return ok;
  }
  // The most of each resource kind free on any one ALIVE node (PlaceGang's reasons
  // quote it), with the capacities `overrides` gives (view index, capacity) in place of
  // those nodes' free ones.
  ResourceMaxima FreeMaxima(
      const std::vector<std::pair<int, const NodeCapacity*>>& overrides = {});

  // Moves with every change (a node set, used, held, alive or not).
  uint64_t version() const { return version_; }
  // Moves when the ALIVE nodes or their totals change (not with use or holds).
  uint64_t totals_version() const { return totals_version_; }

 private:
  struct Entry {
    NodeUse use;
    bool alive = false;
    int endless_holds = 0;
    std::multiset<absl::Time> hold_ends;
    int view_index = -1;  // position in the views while ALIVE
  };
  // Per kind, the amounts free on each ALIVE node (for FreeMaxima).
  struct Amounts {
    std::multiset<double> gpus, cpus, memory_bytes;
    std::map<std::string, std::multiset<double>> custom;
    void Add(const NodeCapacity& c);
    void Remove(const NodeCapacity& c);
  };
  void Rebuild();
  Entry* Get(const std::string& node_id);
  void Changed(Entry* e);

  std::map<std::string, Entry> nodes_;
  std::vector<const NodeUse*> alive_;
  std::vector<NodeCapacity> free_, total_;
  bool stale_ = true;  // the ALIVE set, an order or a total changed: rebuild the views
  absl::flat_hash_set<std::string> dirty_;  // nodes whose free capacity is out of date
  Amounts free_amounts_;  // of free_
  // The change log: nodes whose free capacity changed, from position log_base_ on, in
  // this epoch of the views (Rebuild starts a new one).
  std::vector<const Entry*> log_;
  uint64_t log_base_ = 0;
  uint64_t epoch_ = 1;
  uint64_t version_ = 0;
  uint64_t totals_version_ = 0;
};

// A node's capacity for PlaceGang: its total, or (`free`) what is neither used nor
// (by `claimed`, `claimed_gpus` if given) claimed; nothing below zero.
NodeCapacity CapacityOf(const NodeUse& n, bool free, const proto::Resources* claimed = nullptr,
                        const std::set<int>* claimed_gpus = nullptr);

}  // namespace drover

#endif  // DROVER_SCHEDULER_NODE_TABLE_H_
