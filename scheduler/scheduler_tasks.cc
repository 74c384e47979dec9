// SchedulerCore's side of the task layer: the resource book (the node table and what
// leases ask of jobs and nodes, under book_mu_) as a ResourceBook for worker leases,
// driver jobs, and what the lease manager is told (lease_manager.h keeps the leases and
// actors themselves).
#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "scheduler/generation.h"
#include "scheduler/lease_placement.h"
#include "scheduler/queue_policy.h"
#include "scheduler/scheduler_core.h"

namespace drover {

// Every call takes the core's book_mu_ only, never mu_ (scheduler_core.h: the lock
// order), so a grant does not wait for the core's job and node work, only for its
// changes of the book; nothing is called out under book_mu_.
class SchedulerCore::Book : public ResourceBook {
 public:
  explicit Book(SchedulerCore* core) : core_(core) {}

  absl::StatusOr<std::optional<Grant>> Reserve(const proto::Resources& shape,
                                              const proto::PlacementHint& hint,
                                              std::string* reason) override {
    absl::MutexLock lock(&core_->book_mu_);
    LeasePlacement p = PlaceLocked(shape, hint, /*explain=*/true);
    if (!p.ok) {
      if (p.never) return absl::FailedPreconditionError(p.reason);
      *reason = p.reason;
      return std::optional<Grant>();
    }
    return GrantLocked(shape, std::move(p));
  }

  std::optional<Grant> TryReserve(const proto::Resources& shape,
                                  const proto::PlacementHint& hint) override {
    absl::MutexLock lock(&core_->book_mu_);
    LeasePlacement p = PlaceLocked(shape, hint, /*explain=*/false);
    if (!p.ok) return std::nullopt;
    return GrantLocked(shape, std::move(p));
  }

  // queue_.claim() as of the last queue pass.
  const Claim& ClaimLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_->book_mu_) {
    return core_->claim_;
  }

  // Where a lease of `shape` goes now. Beside the pending claim, if there is one: the
  // oldest pending job that does not fit claims what it will need, and leases, like
  // later jobs, may not take it (a stream of tasks would otherwise hold a gang back
  // for ever). From the per-shape indexes: a grant costs what changed (and a look at
  // each claimed node), not a scan of the nodes.
  LeasePlacement PlaceLocked(const proto::Resources& shape, const proto::PlacementHint& hint,
                             bool explain) ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_->book_mu_) {
    NodeTable& table = core_->table_;
    const Claim& claim = ClaimLocked();
    if (claim.job_id.empty()) return placer_.Place(shape, hint, table, explain);
    const LeasePlacer::Overrides& left = claimed_.Set(table, claim.resources, claim.gpus);
    LeasePlacement p = placer_.Place(shape, hint, table, explain, &left);
    if (!p.ok && !p.never) {
      p.reason = absl::StrCat(p.reason, " beside what pending job ", claim.job_id,
                              " claims (it goes first)");
    }
    return p;
  }

  std::map<std::string, proto::Resources> ClaimShortfall(std::string* job_id) override {
    absl::MutexLock lock(&core_->book_mu_);
    const Claim& claim = ClaimLocked();
    std::map<std::string, proto::Resources> out;
    if (claim.job_id.empty()) return out;
    *job_id = claim.job_id;
    NodeTable& table = core_->table_;
    for (const auto& [node_id, want] : claim.resources) {
      const NodeUse* n = table.Find(node_id);
      if (n == nullptr || !table.Alive(node_id)) continue;
      const NodeCapacity free = CapacityOf(*n, /*free=*/true);
      proto::Resources lack;
      lack.set_cpus(std::max(0.0, want.cpus() - free.available.cpus()));
      lack.set_memory_bytes(std::max<int64_t>(0, want.memory_bytes() - free.available.memory_bytes()));
      int gpus = 0;
      if (auto g = claim.gpus.find(node_id); g != claim.gpus.end()) {
        for (int id : g->second) gpus += n->used_gpus.count(id) > 0 ? 1 : 0;
      }
      lack.set_gpus(gpus);
      bool any = lack.cpus() > 1e-9 || lack.memory_bytes() > 0 || gpus > 0;
      for (const auto& [k, v] : want.custom()) {
        auto f = free.available.custom().find(k);
        const double short_by = v - (f == free.available.custom().end() ? 0.0 : f->second);
        if (short_by > 1e-9) {
          (*lack.mutable_custom())[k] = short_by;
          any = true;
        }
      }
      if (any) out[node_id] = std::move(lack);
    }
    return out;
  }

  // Takes `p` (placed, so on an ALIVE node) on the table.
  Grant GrantLocked(const proto::Resources& shape, LeasePlacement p)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_->book_mu_) {
    core_->table_.Use(p.node_id, shape, p.gpu_ids, +1);
    Grant g;
    g.node_id = p.node_id;
    g.agent_address = core_->agent_addresses_[p.node_id];
    g.shape = shape;
    g.gpu_ids = std::move(p.gpu_ids);
    return g;
  }

  std::optional<Grant> Adopt(const std::string& node_id, const proto::Resources& shape,
                             const std::vector<int>& gpu_ids) override {
    // Called while the node registers (under the core's mu_, which no death can then
    // interleave with), before it is ALIVE: known is enough.
    absl::MutexLock lock(&core_->book_mu_);
    auto agent = core_->agent_addresses_.find(node_id);
    if (agent == core_->agent_addresses_.end() || core_->table_.Find(node_id) == nullptr) {
      return std::nullopt;
    }
    core_->table_.Use(node_id, shape, gpu_ids, +1);
    Grant g;
    g.node_id = node_id;
    g.agent_address = agent->second;
    g.shape = shape;
    g.gpu_ids = gpu_ids;
    return g;
  }

  std::string Explain(const proto::Resources& shape, const proto::PlacementHint& hint) override {
    absl::MutexLock lock(&core_->book_mu_);
    LeasePlacement p = PlaceLocked(shape, hint, /*explain=*/true);
    if (p.ok) return "waiting for its turn in the queue of lease requests";
    return p.never ? absl::StrCat(p.reason, "; waiting for a node that has it") : p.reason;
  }

  void Release(const Grant& g) override {
    {
      absl::MutexLock lock(&core_->book_mu_);
      core_->table_.Use(g.node_id, g.shape, g.gpu_ids, -1);
    }
    // Pending jobs may fit now. The caller holds the lease manager's lock, which is never
    // held while mu_ is taken: the queue pass (and its launches, and the notes for the
    // lease manager) runs from the outbound pool, batched with the other reports waiting
    // (RunBatched).
    SchedulerCore* core = core_;
    core_->outbound_->Post([core] { core->RunBatched([](Actions*) {}); });
  }

  absl::Status CheckJobRunning(const std::string& job_id) override {
    absl::MutexLock lock(&core_->book_mu_);
    auto it = core_->job_ends_.find(job_id);
    if (it == core_->job_ends_.end()) return absl::NotFoundError(
          absl::StrCat("no job ", job_id, " has started on this cluster (`drover jobs` lists them)"));
    const JobEnd& end = it->second;
    if (IsTerminal(end.state)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", job_id, " has ended (", proto::JobState_Name(end.state), ": ", end.reason,
          "); its processes cannot start tasks or actors"));
    }
    return absl::OkStatus();
  }

  std::vector<std::string> AliveAgents() override {
    absl::MutexLock lock(&core_->book_mu_);
    std::vector<std::string> out;
    for (const auto& [id, agent] : core_->agent_addresses_) {
      if (core_->table_.Alive(id)) out.push_back(agent);
    }
    return out;
  }

  std::string SchedulerAddress() override {
    absl::MutexLock lock(&core_->book_mu_);
    return core_->address_;
  }

  bool SavesActors() override { return core_->store_->KeepsRecords(); }
  // The persister queues (or, in memory, writes through): never waits on Redis.
  void SaveActor(const std::string& actor_id, int64_t version, std::string record) override {
    core_->persister_.PutActor(actor_id, version, std::move(record));
  }
  absl::StatusOr<std::vector<std::string>> SavedActors() override {
    return core_->store_->LoadActors();
  }

 private:
  SchedulerCore* const core_;
  LeasePlacer placer_ ABSL_GUARDED_BY(core_->book_mu_);
  ClaimedView claimed_ ABSL_GUARDED_BY(core_->book_mu_);
};

std::unique_ptr<ResourceBook> SchedulerCore::MakeBook(SchedulerCore* core) {
  return std::make_unique<Book>(core);
}

void SchedulerCore::SetLeaseManager(LeaseManager* leases) { leases_.store(leases); }

void SchedulerCore::AdoptLeasesLocked(const std::string& node_id,
                                      const proto::RegisterNodeRequest& req) {
  RequireNoBookScopeLocked("the lease manager's adoption");
  LeaseManager* leases = leases_.load();
  // Also with no leases: actors the node ran before a restart and no longer holds end.
  if (leases == nullptr) return;
  leases->Adopt(node_id, req.agent_address(),
                std::vector<proto::HeldLease>(req.leases().begin(), req.leases().end()));
}

void SchedulerCore::TakeNotesLocked(LeaseNotes* notes) {
  for (std::string& job : ended_jobs_) {
    // Its objects, to be deleted from the stores that hold them.
    notes->ended.emplace_back(job, objects_.ByAgent(job + "."));
  }
  ended_jobs_.clear();
  for (auto& dead : dead_nodes_) notes->dead.push_back(std::move(dead));
  dead_nodes_.clear();
  notes->freed = notes->freed || freed_;
  freed_ = false;
  notes->claim = notes->claim || claim_changed_;
  claim_changed_ = false;
  notes_pending_ = false;
}

void SchedulerCore::NotifyLeases(LeaseNotes notes) {
  if (notes_pending_) {
    absl::MutexLock lock(&mu_);
    TakeNotesLocked(&notes);
  }
  LeaseManager* leases = leases_.load();
  if (leases == nullptr) return;
  for (const auto& [node, reason] : notes.dead) leases->NodeDead(node, reason);
  for (auto& [job, objects] : notes.ended) leases->JobEnded(job, std::move(objects));
  if (notes.freed) leases->ResourcesFreed();
  if (notes.claim) leases->ClaimChanged();
}

absl::StatusOr<std::string> SchedulerCore::RegisterDriver(const proto::RegisterDriverRequest& req) {
  if (req.request_id().empty()) return absl::InvalidArgumentError("RegisterDriver needs a request id");
  auto fill = [&](Job& job, Actions*) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    proto::JobSpec* spec = job.info.mutable_spec();
    spec->set_name(req.name().empty() ? "driver" : req.name());
    spec->add_command(req.name());
    job.info.set_driver(true);
    job.info.set_state(proto::RUNNING);
    job.info.set_start_time_ms(job.info.submit_time_ms());
    job.info.set_reason(absl::StrCat("driver pid ", req.pid(), " on ",
                                     req.hostname().empty() ? "?" : req.hostname(),
                                     ": its tasks and actors run on leased workers"));
    DROVER_LOG(INFO) << "driver " << job.info.job_id() << " registered: " << job.info.reason();
    // Its session ends it; until one opens, a deadline does.
    driver_reconnects_[job.info.job_id()] = {clock_->Now() + options_.driver_reconnect, false};
    ChangedLocked(job);
  };
  absl::StatusOr<proto::JobInfo> info =
      CreateJob(absl::StrCat("driver:", req.request_id()), [] { return absl::OkStatus(); }, fill);
  if (!info.ok()) return info.status();
  return info->job_id();
}

absl::Status SchedulerCore::CheckDriver(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  Job* job = FindJobLocked(job_id);
  if (job == nullptr || !job->info.driver()) {
    return absl::NotFoundError(absl::StrCat("no driver job ", job_id));
  }
  if (IsTerminal(job->info.state())) {
    return absl::FailedPreconditionError(absl::StrCat("driver job ", job_id, " has ended"));
  }
  return absl::OkStatus();
}

void SchedulerCore::DriverAttached(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  auto it = driver_reconnects_.find(job_id);
  if (it == driver_reconnects_.end()) return;
  if (it->second.after_restart) {
    DROVER_LOG(INFO) << "the driver of " << job_id << " reconnected after the scheduler restarted";
  }
  driver_reconnects_.erase(it);
}

void SchedulerCore::ExpireDriverReconnectsLocked(absl::Time now) {
  for (auto it = driver_reconnects_.begin(); it != driver_reconnects_.end();) {
    if (it->second.deadline > now) {
      ++it;
      continue;
    }
    Job* job = FindJobLocked(it->first);
    if (job != nullptr && job->info.driver() && !IsTerminal(job->info.state())) {
      FinishLocked(*job, proto::FAILED,
                   it->second.after_restart
                       ? absl::StrCat("its driver did not reconnect within ",
                                      absl::FormatDuration(options_.driver_reconnect),
                                      " after the scheduler restarted")
                       : absl::StrCat("its driver registered but did not open its session "
                                      "within ",
                                      absl::FormatDuration(options_.driver_reconnect),
                                      " (it exited, or lost the scheduler, before it did)"),
                   1);
      ChangedLocked(*job);
    }
    it = driver_reconnects_.erase(it);
  }
}

void SchedulerCore::EndDriver(const std::string& job_id, const std::string& reason) {
  {
    absl::MutexLock lock(&mu_);
    Job* job = FindJobLocked(job_id);
    if (job == nullptr || !job->info.driver() || IsTerminal(job->info.state())) return;
    FinishLocked(*job, proto::SUCCEEDED, reason, 0);
    ChangedLocked(*job);
  }
  Dispatch({});
}

}  // namespace drover
