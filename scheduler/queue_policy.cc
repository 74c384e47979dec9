#include "scheduler/queue_policy.h"

#include <algorithm>
#include <queue>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace drover {
namespace {

// What a CapacityIndex is made for: the per-process resources and processes per node.
std::string ShapeKey(const proto::JobSpec& spec) {
  const proto::Resources& r = spec.per_process();
  std::string key = absl::StrFormat("%a/%d/%d/%d", r.cpus(), r.memory_bytes(), r.gpus(),
                                    spec.nproc_per_node());
  std::vector<std::pair<std::string, double>> custom(r.custom().begin(), r.custom().end());
  std::sort(custom.begin(), custom.end());
  for (const auto& [name, v] : custom) absl::StrAppendFormat(&key, "/%d:%s=%a", name.size(), name, v);
  return key;
}

// What placement looks at in a spec: jobs with equal keys are placed alike and wait
// for the same reason (the class of queue_policy.h).
std::string ClassKey(const proto::JobSpec& spec) {
  return absl::StrFormat("%s/%d/%d/%d", ShapeKey(spec), spec.nproc(),
                         static_cast<int>(spec.strategy()), spec.time_limit_ms());
}

// When `claim`'s resources are free at the latest (see Claim::earliest_start).
absl::Time EarliestStart(const Claim& claim, const NodeTable& table, absl::Time now) {
  absl::Time latest = now;
  for (const auto& [node, r] : claim.resources) latest = std::max(latest, table.LatestHoldEnd(node));
  return latest;
}

// Why `job` waits although PlaceGang found no room: `placement_reason`, or, if only
// `claim` is in its way (`fits_unclaimed`), behind whom; prefixed with the restart it
// waits for.
constexpr absl::string_view kRestartPrefix = "restart ";
constexpr absl::string_view kRestartWaiting = " waiting: ";
constexpr absl::string_view kBehindPrefix = "waiting behind ";
constexpr absl::string_view kNoNodesReason = "no nodes are alive";
constexpr absl::string_view kNotScheduledReason = "waiting to be placed";

std::string WaitReason(const QueuedJob& job, const std::string& placement_reason,
                       bool fits_unclaimed, const Claim* claim, absl::Time now) {
  std::string why = placement_reason;
  if (claim != nullptr && fits_unclaimed) {
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

}  // namespace

struct JobQueue::Class {
  std::string key;
  std::string shape;  // ShapeKey
  std::map<int64_t, QueuedJob> jobs;  // by submission
  // Jobs added since they were last told a reason.
  std::vector<int64_t> untold;
  // What every other job of the class (but the claim's holder) was last told.
  std::string told;
  // The last pass found a job of the class that did not fit (so would every later one
  // until something changes).
  bool failed = false;
  // Its free capacity per node, shared by the classes of its shape (ShapeKey); none
  // beyond JobQueue's limit (its jobs are placed by scanning the nodes then).
  std::shared_ptr<CapacityIndex> index;
  // During a pass: the next job to decide.
  std::map<int64_t, QueuedJob>::iterator cursor;
};

// One run of Plan.
class JobQueue::Pass {
 public:
  Pass(JobQueue* q, NodeTable* table, absl::Time now, const Callbacks* cb)
      : q_(q), table_(table), now_(now), cb_(cb) {}

  // Every restart, then every class.
  void Full() {
    const std::pair<std::string, int64_t> previous{q_->holder_key_, q_->holder_seq_};
    q_->claim_ = Claim{};
    q_->holder_key_.clear();
    q_->holder_seq_ = -1;
    for (auto it = q_->restarts_.begin(); it != q_->restarts_.end();) {
      const QueuedJob job = it->second;
      Verdict v = Decide(job, nullptr);
      if (v.start) {
        it = q_->restarts_.erase(it);
        --q_->size_;
        cb_->start(job, std::move(v.ranks));
        continue;
      }
      cb_->wait(job, v.reason);
      ++it;
    }
    std::vector<Class*> all;
    for (auto& [key, c] : q_->classes_) {
      c->failed = false;
      if (!c->jobs.empty()) all.push_back(c.get());
    }
    Walk(all);
    // The holder of the previous claim, if it waits without holding: its class's reason.
    if (!previous.first.empty() && previous != std::make_pair(q_->holder_key_, q_->holder_seq_)) {
      auto c = q_->classes_.find(previous.first);
      if (c != q_->classes_.end()) {
        auto it = c->second->jobs.find(previous.second);
        if (it != c->second->jobs.end()) cb_->wait(it->second, c->second->told);
      }
    }
  }

  // Only the jobs added since the last pass (nothing else changed).
  void Fresh() {
    std::vector<Class*> walk;
    for (Class* c : q_->fresh_) {
      if (c->jobs.empty()) continue;
      if (!c->failed) {
        walk.push_back(c);
        continue;
      }
      // Its older jobs still do not fit: neither do the new ones (behind them).
      for (int64_t seq : c->untold) {
        auto it = c->jobs.find(seq);
        if (it != c->jobs.end() && !Holds(c, seq)) cb_->wait(it->second, c->told);
      }
      c->untold.clear();
    }
    Walk(walk);
  }

 private:
  struct Verdict {
    bool start = false;
    bool claims = false;  // waits, holding the claim now
    std::vector<proto::RankPlacement> ranks;
    std::string reason;
  };

  bool Holds(const Class* c, int64_t seq) const {
    return q_->holder_seq_ == seq && q_->holder_key_ == c->key;
  }

  // Decides the jobs of `classes` in submission order across them; a class is done
  // when its jobs have started or one of them does not fit.
  void Walk(const std::vector<Class*>& classes) {
    using Head = std::pair<int64_t, Class*>;
    std::priority_queue<Head, std::vector<Head>, std::greater<Head>> heads;
    for (Class* c : classes) {
      c->cursor = c->jobs.begin();
      if (c->cursor != c->jobs.end() && Holds(c, c->cursor->first)) ++c->cursor;
      if (c->cursor != c->jobs.end()) heads.push({c->cursor->first, c});
    }
    while (!heads.empty()) {
      Class* c = heads.top().second;
      heads.pop();
      const auto it = c->cursor;
      const QueuedJob job = it->second;
      Verdict v = Decide(job, c);
      if (v.start) {
        c->cursor = c->jobs.erase(it);
        --q_->size_;
        cb_->start(job, std::move(v.ranks));
      } else if (v.claims) {
        q_->holder_key_ = c->key;
        q_->holder_seq_ = job.seq;
        cb_->wait(job, v.reason);
        ++c->cursor;
      } else {
        c->failed = true;
        TellClass(c, it, v.reason);
        continue;
      }
      if (c->cursor != c->jobs.end()) heads.push({c->cursor->first, c});
    }
    for (Class* c : classes) {
      if (c->jobs.empty()) c->untold.clear();
    }
  }

  // The jobs of `c` from `first` on (but the holder) wait for `reason`.
  void TellClass(Class* c, std::map<int64_t, QueuedJob>::iterator first,
                 const std::string& reason) {
    if (reason != c->told) {
      c->told = reason;
      for (auto it = first; it != c->jobs.end(); ++it) {
        if (!Holds(c, it->first)) cb_->wait(it->second, reason);
      }
    } else {
      for (int64_t seq : c->untold) {
        auto it = c->jobs.find(seq);
        if (it != c->jobs.end() && seq >= first->first && !Holds(c, seq)) {
          cb_->wait(it->second, reason);
        }
      }
    }
    c->untold.clear();
  }

  // What `claim` leaves of the claimed ALIVE nodes' free capacities, by view index.
  const CapacityIndex::Overrides& Claimed(const Claim& claim) {
    return claimed_.Set(*table_, claim.resources, claim.gpus);
  }

  // Free capacities of the ALIVE nodes, less `claim`'s share.
  const std::vector<const NodeCapacity*>& View(const Claim* claim) {
    const std::vector<NodeCapacity>& free = table_->Free();
    view_.clear();
    view_.reserve(free.size());
    for (const NodeCapacity& n : free) view_.push_back(&n);
    if (claim == nullptr) return view_;
    for (const auto& [i, capacity] : Claimed(*claim)) view_[i] = capacity;
    return view_;
  }

  // Whether `job` (of class `c`, or a restart) starts now; if not, why, and whether it
  // claims what it will need.
  Verdict Decide(const QueuedJob& job, Class* c) {
    Verdict v;
    const proto::JobSpec& spec = *job.spec;
    Claim& claim = q_->claim_;
    const bool claimed = !claim.job_id.empty();
    // Backfill: a job sure to end (its time limit is enforced) before the claiming job
    // could start anyway may use the claimed resources meanwhile.
    const int64_t limit_ms = spec.time_limit_ms();
    const bool borrows =
        claimed && limit_ms > 0 && now_ + absl::Milliseconds(limit_ms) <= claim.earliest_start;
    const Claim* in_the_way = claimed && !borrows ? &claim : nullptr;
    // A class's index answers without a scan of the nodes.
    CapacityIndex* index = c != nullptr ? c->index.get() : nullptr;
    PlacementResult placed;
    if (index == nullptr) {
      placed = PlaceGang(spec, View(in_the_way));
    } else if (in_the_way == nullptr) {
      placed = index->Place(spec, *table_);
    } else {
      placed = index->Place(spec, *table_, Claimed(*in_the_way));
    }
    if (placed.ok) {
      v.start = true;
      v.ranks = std::move(placed.ranks);
      return v;
    }
    const bool fits_unclaimed =
        in_the_way != nullptr &&
        (index != nullptr ? index->Fits(spec, *table_) : PlaceGang(spec, View(nullptr)).ok);
    v.reason = WaitReason(job, placed.reason, fits_unclaimed, in_the_way, now_);
    if (claimed) return v;
    const PlacementResult* whole = &q_->Whole(spec, *table_);
    if (!whole->ok) return v;  // cannot run on today's nodes even when empty: no claim
    claim.job_id = job.job_id;
    for (const auto& p : whole->ranks) {
      AddResources(&claim.resources[p.node_id()], spec.per_process(), +1);
      claim.gpus[p.node_id()].insert(p.gpu_ids().begin(), p.gpu_ids().end());
    }
    claim.earliest_start = EarliestStart(claim, *table_, now_);
    v.claims = true;
    return v;
  }

  JobQueue* const q_;
  NodeTable* const table_;
  const absl::Time now_;
  const Callbacks* const cb_;
  std::vector<const NodeCapacity*> view_;
  ClaimedView claimed_;
};

JobQueue::JobQueue() = default;
JobQueue::~JobQueue() = default;

void JobQueue::Add(const QueuedJob& job) {
  ++size_;
  if (job.restart_count > 0) {
    restarts_[job.seq] = job;
    dirty_ = true;  // it goes first: every later job may decide otherwise
    return;
  }
  const std::string key = ClassKey(*job.spec);
  std::unique_ptr<Class>& c = classes_[key];
  if (c == nullptr) {
    c = std::make_unique<Class>();
    c->key = key;
    c->shape = ShapeKey(*job.spec);
    c->index = IndexFor(c->shape, *job.spec);
  }
  c->jobs[job.seq] = job;
  c->untold.push_back(job.seq);
  fresh_.insert(c.get());
}

void JobQueue::Remove(const QueuedJob& job) {
  if (job.restart_count > 0) {
    if (restarts_.erase(job.seq) > 0) {
      --size_;
      dirty_ = true;
    }
    return;
  }
  auto c = classes_.find(ClassKey(*job.spec));
  if (c == classes_.end() || c->second->jobs.erase(job.seq) == 0) return;
  --size_;
  if (holder_seq_ == job.seq && holder_key_ == c->first) {
    dirty_ = true;  // the claim goes: the next job that does not fit claims instead
    holder_key_.clear();
    holder_seq_ = -1;
  }
  if (c->second->jobs.empty()) {
    fresh_.erase(c->second.get());
    classes_.erase(c);
  }
}

const PlacementResult& JobQueue::Whole(const proto::JobSpec& spec, NodeTable& table) {
  if (whole_version_ != table.totals_version() || whole_.size() >= 1024) {
    whole_.clear();
    whole_version_ = table.totals_version();
  }
  auto [it, inserted] = whole_.try_emplace(ClassKey(spec));
  if (inserted) it->second = PlaceGang(spec, table.Total());
  return it->second;
}

std::shared_ptr<CapacityIndex> JobQueue::IndexFor(const std::string& shape,
                                                  const proto::JobSpec& spec) {
  auto it = indexes_.find(shape);
  if (it == indexes_.end()) {
    if (indexes_.size() >= kMaxIndexes) {
      // Room for it: the least recently used index no class uses now, if any.
      auto oldest = indexes_.end();
      for (auto i = indexes_.begin(); i != indexes_.end(); ++i) {
        if (i->second.index.use_count() == 1 &&
            (oldest == indexes_.end() || i->second.used < oldest->second.used)) {
          oldest = i;
        }
      }
      if (oldest == indexes_.end()) return nullptr;
      indexes_.erase(oldest);
    }
    it = indexes_.emplace(shape, SharedIndex{std::make_shared<CapacityIndex>(
                                                 spec.per_process(), spec.nproc_per_node()),
                                             0})
             .first;
  }
  it->second.used = ++index_uses_;
  return it->second.index;
}

void JobQueue::Plan(NodeTable& nodes, absl::Time now, const Callbacks& callbacks) {
  const bool full = dirty_ || nodes.version() != table_version_;
  if (!full && fresh_.empty()) return;
  ++passes_;
  Pass pass(this, &nodes, now, &callbacks);
  if (full) {
    pass.Full();
  } else {
    pass.Fresh();
  }
  fresh_.clear();
  for (auto it = classes_.begin(); it != classes_.end();) {
    if (it->second->jobs.empty()) {
      classes_.erase(it++);
    } else {
      ++it;
    }
  }
  dirty_ = false;
  table_version_ = nodes.version();
}

// ---------------------------------------------------------------------------

std::vector<NodeCapacity> TotalCapacities(const std::vector<NodeUse>& nodes) {
  std::vector<NodeCapacity> caps;
  caps.reserve(nodes.size());
  for (const NodeUse& n : nodes) caps.push_back(CapacityOf(n, /*free=*/false));
  return caps;
}

std::vector<NodeCapacity> FreeCapacities(const std::vector<NodeUse>& nodes, const Claim* claim) {
  std::vector<NodeCapacity> caps;
  caps.reserve(nodes.size());
  for (const NodeUse& n : nodes) {
    const proto::Resources* r = nullptr;
    const std::set<int>* gpus = nullptr;
    if (claim != nullptr) {
      if (auto it = claim->resources.find(n.node_id); it != claim->resources.end()) {
        r = &it->second;
      }
      if (auto it = claim->gpus.find(n.node_id); it != claim->gpus.end()) gpus = &it->second;
    }
    caps.push_back(CapacityOf(n, /*free=*/true, r, gpus));
  }
  return caps;
}

QueuePlan PlanQueue(std::vector<QueuedJob> pending, std::vector<NodeUse> nodes,
                    std::vector<HoldingJob> holding, absl::Time now) {
  NodeTable table;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const NodeUse& n = nodes[i];
    table.Set(n.node_id, n.node_ip, n.total, n.gpu_ids, static_cast<int64_t>(i));
    table.SetAlive(n.node_id, true);
    table.Use(n.node_id, n.used, std::vector<int>(n.used_gpus.begin(), n.used_gpus.end()), +1);
  }
  for (const HoldingJob& h : holding) table.Hold(h.node_ids, h.ends_by, +1);
  JobQueue queue;
  for (const QueuedJob& j : pending) queue.Add(j);
  // A job started now holds its nodes from the start of this millisecond (the
  // scheduler records generation starts in milliseconds).
  const absl::Time start = absl::FromUnixMillis(absl::ToUnixMillis(now));
  std::map<std::string, QueueDecision> decided;
  JobQueue::Callbacks cb;
  cb.start = [&](const QueuedJob& job, std::vector<proto::RankPlacement> ranks) {
    std::vector<std::string> held;
    for (const auto& p : ranks) {
      table.Use(p.node_id(), job.spec->per_process(),
                std::vector<int>(p.gpu_ids().begin(), p.gpu_ids().end()), +1);
      held.push_back(p.node_id());
    }
    const int64_t limit_ms = job.spec->time_limit_ms();
    table.Hold(held, limit_ms > 0 ? start + absl::Milliseconds(limit_ms) : absl::InfiniteFuture(),
               +1);
    QueueDecision& d = decided[job.job_id];
    d.start = true;
    d.ranks = std::move(ranks);
  };
  cb.wait = [&](const QueuedJob& job, const std::string& reason) {
    decided[job.job_id].reason = reason;
  };
  queue.Plan(table, now, cb);
  std::stable_sort(pending.begin(), pending.end(), [](const QueuedJob& a, const QueuedJob& b) {
    if ((a.restart_count > 0) != (b.restart_count > 0)) return a.restart_count > 0;
    return a.seq < b.seq;
  });
  QueuePlan plan;
  for (const QueuedJob& j : pending) {
    QueueDecision d = std::move(decided[j.job_id]);
    d.job_id = j.job_id;
    plan.decisions.push_back(std::move(d));
  }
  plan.claim = queue.claim();
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
