#include "scheduler/lease_manager.h"

#include <algorithm>
#include <thread>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/exit_text.h"
#include "common/log.h"
#include "common/rpc.h"
#include "common/status.h"
#include "proto/node_agent.grpc.pb.h"
#include "scheduler/placement.h"

namespace drover {
namespace {

// A random tag for the lease ids of one scheduler lifetime (6 of [0-9a-z]).
std::string NewLeaseTag() {
  static constexpr char kAlphabet[] = "0123456789abcdefghijklmnopqrstuvwxyz";
  absl::BitGen gen;
  std::string tag;
  for (int i = 0; i < 6; ++i) {
    tag.push_back(kAlphabet[absl::Uniform<size_t>(gen, 0, sizeof(kAlphabet) - 1)]);
  }
  return tag;
}

// How long an actor placement waits between tries when nothing fits.
constexpr absl::Duration kActorRetry = absl::Seconds(1);
// How long a lease of an earlier lifetime that ended before its node registered is
// remembered (its node registers within seconds of the scheduler's start).
constexpr absl::Duration kEndedEarlyMemory = absl::Minutes(2);

// An actor's record in the state store: "<size of info>:" ActorInfo CreateActorRequest
// (both serialized), so that a restarted scheduler knows it and can make it again.
std::string EncodeActor(const proto::ActorInfo& info, const proto::CreateActorRequest& create) {
  const std::string i = info.SerializeAsString();
  return absl::StrCat(i.size(), ":", i, create.SerializeAsString());
}

bool DecodeActor(absl::string_view record, proto::ActorInfo* info,
                 proto::CreateActorRequest* create) {
  const size_t colon = record.find(':');
  size_t n = 0;
  if (colon == absl::string_view::npos || !absl::SimpleAtoi(record.substr(0, colon), &n)) {
    return false;
  }
  absl::string_view rest = record.substr(colon + 1);
  return n <= rest.size() && info->ParseFromArray(rest.data(), static_cast<int>(n)) &&
         create->ParseFromArray(rest.data() + n, static_cast<int>(rest.size() - n)) &&
         !info->actor_id().empty() && info->actor_id() == create->creation().actor_id();
}

class GrpcWorkerClient : public WorkerClient {
 public:
  explicit GrpcWorkerClient(std::string token) : token_(std::move(token)) {}

  absl::StatusOr<proto::StartWorkerReply> StartWorker(const std::string& agent,
                                                      const proto::StartWorkerRequest& req) override {
    grpc::ClientContext ctx;
    // A new worker may fetch the program and run an actor's factory (a model load).
    PrepareContext(&ctx, token_, std::chrono::milliseconds(req.has_actor() ? 3600000 : 120000));
    proto::StartWorkerReply reply;
    DROVER_RETURN_IF_ERROR(FromGrpcStatus(stubs_.Get(agent)->StartWorker(&ctx, req, &reply)));
    return reply;
  }
  absl::Status KillWorker(const std::string& agent, const proto::KillWorkerRequest& req) override {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, token_);
    proto::KillWorkerReply reply;
    return FromGrpcStatus(stubs_.Get(agent)->KillWorker(&ctx, req, &reply));
  }
  absl::Status RevokeLease(const std::string& agent, const proto::RevokeLeaseRequest& req) override {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, token_);
    proto::RevokeLeaseReply reply;
    return FromGrpcStatus(stubs_.Get(agent)->RevokeLease(&ctx, req, &reply));
  }
  absl::Status DeleteObjects(const std::string& agent, const std::vector<std::string>& ids) override {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, token_);
    proto::DeleteObjectsRequest req;
    for (const std::string& id : ids) req.add_object_ids(id);
    proto::DeleteObjectsReply reply;
    return FromGrpcStatus(stubs_.Get(agent)->DeleteObjects(&ctx, req, &reply));
  }
  absl::Status StopJob(const std::string& agent, const std::string& job_id) override {
    auto stub = proto::NodeAgent::NewStub(MakeChannel(agent));
    grpc::ClientContext ctx;
    PrepareContext(&ctx, token_);
    proto::StopJobRequest req;
    req.set_job_id(job_id);
    req.set_generation(-1);
    proto::StopJobReply reply;
    return FromGrpcStatus(stub->StopJob(&ctx, req, &reply));
  }

 private:
  const std::string token_;
  StubCache<proto::Workers> stubs_;
};

}  // namespace

std::unique_ptr<WorkerClient> NewGrpcWorkerClient(const std::string& token) {
  return std::make_unique<GrpcWorkerClient>(token);
}

LeaseManager::LeaseManager(ResourceBook* book, std::unique_ptr<WorkerClient> workers, Clock* clock,
                           LeaseManagerOptions options)
    : book_(book),
      workers_(std::move(workers)),
      clock_(clock != nullptr ? clock : Clock::Real()),
      options_(options),
      lease_tag_(NewLeaseTag()),
      saves_actors_(book->SavesActors()),
      queue_(options.max_queued),
      starts_(std::max(1, options.start_threads)) {
  timer_ = std::thread([this] { TimerLoop(); });
}

LeaseManager::~LeaseManager() { Stop(); }

void LeaseManager::Stop() {
  Answers answers;
  {
    absl::MutexLock l(&mu_);
    stopped_ = true;
    for (auto& [id, w] : waiters_) {
      auto r = requests_.find(w.request_id);
      if (r != requests_.end()) r->second.waiters.clear();
      answers.Add(std::move(w.done), absl::UnavailableError("the scheduler is stopping; ask again"));
    }
    waiters_.clear();
    deadlines_.clear();
    freed_.SignalAll();
    changed_.SignalAll();
    timer_cv_.Signal();
  }
  answers.Run();
  stop_cv_.SignalAll();
  if (timer_.joinable()) timer_.join();
  placing_.Close();
  placing_.Wait();
  // The last actor records reach the store before it stops (SaveActors runs on starts_,
  // behind worker starts); bounded, so a save stuck on the store cannot hold the exit.
  absl::MutexLock l(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(+[](bool* saving) { return !*saving; }, &saving_),
                       absl::Seconds(5));
}

void LeaseManager::StartPlacing(const std::string& actor_id) {
  placing_.Spawn([this, actor_id] { PlaceActor(actor_id); });
}

LeaseManager::Lease& LeaseManager::NewLeaseLocked(const ResourceBook::Grant& grant,
                                                  const std::string& job_id,
                                                  const std::string& owner,
                                                  const std::string& actor_id) {
  const std::string id = absl::StrCat("lease-", lease_tag_, "-", next_lease_++);
  Lease& lease = leases_[id];
  lease.id = id;
  lease.job_id = job_id;
  lease.owner = owner;
  lease.grant = grant;
  lease.actor_id = actor_id;
  jobs_with_workers_.insert(job_id);
  return lease;
}

proto::StartWorkerRequest LeaseManager::StartRequest(const Lease& lease,
                                                     const proto::PackageRef& package,
                                                     const proto::ActorCreation* actor) {
  proto::StartWorkerRequest req;
  req.set_lease_id(lease.id);
  req.set_job_id(lease.job_id);
  req.set_owner(lease.owner);
  *req.mutable_package() = package;
  *req.mutable_shape() = lease.grant.shape;
  for (int g : lease.grant.gpu_ids) req.add_gpu_ids(g);
  if (actor != nullptr) *req.mutable_actor() = *actor;
  req.set_scheduler_address(book_->SchedulerAddress());
  return req;
}

absl::StatusOr<LeaseManager::Lease> LeaseManager::StartedLocked(
    const Lease& lease, const absl::StatusOr<proto::StartWorkerReply>& started, bool actor,
    bool* retry) {
  *retry = false;
  auto it = leases_.find(lease.id);
  if (!started.ok()) {
    if (it != leases_.end()) ReleaseLocked(lease.id);
    // The node is unreachable: another one may do. Anything else is the program's
    // problem (it would fail the same way everywhere).
    *retry = started.status().code() == absl::StatusCode::kUnavailable && !actor;
    return absl::Status(started.status().code(),
                        absl::StrCat("node ", lease.grant.node_id, ": ", started.status().message()));
  }
  if (it == leases_.end()) {
    // Released while starting (the node died, the job ended): the worker goes too.
    proto::KillWorkerRequest kill;
    kill.set_worker_id(started->worker_id());
    kill.set_reason("its lease ended while it started");
    background_.Post([this, agent = lease.grant.agent_address, kill] {
      workers_->KillWorker(agent, kill).IgnoreError();
    });
    *retry = true;
    return absl::UnavailableError("the lease ended while its worker started");
  }
  it->second.worker_id = started->worker_id();
  it->second.unix_path = started->unix_path();
  it->second.tcp_address = started->tcp_address();
  it->second.started = true;
  ++leases_granted_;
  proto::TimelineEvent e = TimelineEventOf(proto::TIMELINE_LEASE_GRANTED, 0, lease.grant.node_id,
                                           {}, started->reused() ? "a warm worker" : "a new worker");
  e.set_lease_id(lease.id);
  e.set_worker_id(started->worker_id());
  e.set_actor_id(lease.actor_id);
  NoteLocked(lease.job_id, std::move(e));
  return it->second;
}

absl::StatusOr<LeaseManager::Lease> LeaseManager::Grant(
    const proto::Resources& shape, const proto::PlacementHint& hint, const std::string& job_id,
    const std::string& owner, const proto::PackageRef& package, const proto::ActorCreation* actor,
    std::string* pending_reason, bool* retry) {
  *retry = false;
  Lease lease;
  {
    absl::MutexLock l(&mu_);
    if (stopped_) return absl::UnavailableError("the scheduler is stopping");
    // Checked here, under mu_, not only when the request came: a request that waited
    // for room could otherwise be granted after its job ended (JobEnded had already
    // released the job's leases) and start a worker nobody would stop. A job that ends
    // after this check finds the lease and ends it.
    DROVER_RETURN_IF_ERROR(book_->CheckJobRunning(job_id));
    std::string reason;
    absl::StatusOr<std::optional<ResourceBook::Grant>> g = book_->Reserve(shape, hint, &reason);
    if (!g.ok()) {
      // No node could ever hold it: it waits, as a job that big would, for such a node.
      *pending_reason = absl::StrCat(g.status().message(), "; waiting for a node that has it");
      *retry = true;
      return absl::UnavailableError(*pending_reason);
    }
    if (!g->has_value()) {
      *pending_reason = reason;
      *retry = true;
      return absl::UnavailableError(reason);
    }
    lease = NewLeaseLocked(**g, job_id, owner, actor != nullptr ? actor->actor_id() : "");
  }
  absl::StatusOr<proto::StartWorkerReply> started =
      workers_->StartWorker(lease.grant.agent_address, StartRequest(lease, package, actor));
  Answers answers;
  absl::StatusOr<Lease> out;
  {
    absl::MutexLock l(&mu_);
    out = StartedLocked(lease, started, actor != nullptr, retry);
    SettleLocked(&answers);
  }
  answers.Run();
  return out;
}

void LeaseManager::NoteLocked(const std::string& job_id, proto::TimelineEvent e) {
  if (timeline_ != nullptr) timeline_->Record(job_id, std::move(e));
}

void LeaseManager::ReleaseLocked(const std::string& lease_id, const std::string& why) {
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return;
  if (it->second.started) {
    ++leases_ended_;
    proto::TimelineEvent e = TimelineEventOf(proto::TIMELINE_LEASE_RETURNED, 0,
                                             it->second.grant.node_id, {}, why);
    e.set_lease_id(lease_id);
    e.set_worker_id(it->second.worker_id);
    e.set_actor_id(it->second.actor_id);
    NoteLocked(it->second.job_id, std::move(e));
  }
  book_->Release(it->second.grant);
  leases_.erase(it);
  pass_needed_ = true;
  ++room_version_;
  if (actors_waiting_ > 0) freed_.SignalAll();
}

void LeaseManager::ReturnLease(const std::string& lease_id, const std::string& reason) {
  Answers answers;
  {
    absl::MutexLock l(&mu_);
    auto it = leases_.find(lease_id);
    if (it == leases_.end()) {
      NoteEndedEarlyLocked(lease_id);
      return;
    }
    if (!it->second.actor_id.empty()) return;  // actors' end with them
    DROVER_LOG(DEBUG) << "lease " << lease_id << " returned: " << reason;
    ReleaseLocked(lease_id, reason);
    SettleLocked(&answers);
  }
  answers.Run();
}

void LeaseManager::ResourcesFreed() {
  Answers answers;
  {
    absl::MutexLock l(&mu_);
    pass_needed_ = true;
    ++room_version_;
    if (actors_waiting_ > 0) freed_.SignalAll();
    SettleLocked(&answers);
  }
  answers.Run();
}

void LeaseManager::Adopt(const std::string& node_id, const std::string& agent_address,
                         const std::vector<proto::HeldLease>& held) {
  std::vector<proto::KillWorkerRequest> kills;
  {
    absl::MutexLock l(&mu_);
    if (stopped_) return;
    std::set<std::string> adopted_actors;
    for (const proto::HeldLease& h : held) {
      if (h.lease_id().empty()) {
        // A worker with no lease (idle in the warm pool, or starting): the lease it
        // served may be older than this scheduler. Its job's end must reach its node
        // (JobEnded stops workers only of jobs known to have some); a job that ended
        // while the scheduler was away loses it now.
        if (h.job_id().empty() || h.worker_id().empty()) continue;
        if (absl::Status running = book_->CheckJobRunning(h.job_id()); running.ok()) {
          jobs_with_workers_.insert(h.job_id());
        } else {
          proto::KillWorkerRequest kill;
          kill.set_worker_id(h.worker_id());
          kill.set_reason(absl::StrCat("it outlived its job: ", running.message()));
          kills.push_back(std::move(kill));
        }
        continue;
      }
      if (leases_.count(h.lease_id()) > 0) continue;  // known
      if (ended_early_.count(h.lease_id()) > 0) continue;  // returned before it was adopted
      absl::Status running = book_->CheckJobRunning(h.job_id());
      Actor* actor = nullptr;
      if (running.ok() && !h.actor_id().empty()) {
        auto a = actors_.find(h.actor_id());
        if (a != actors_.end()) {
          actor = &a->second;
          // A recorded actor is adopted only on the worker its record names; any other
          // worker of it (a start the old scheduler never recorded, an incarnation it
          // replaced, a dead one's) would be a second copy.
          if (!actor->awaiting_adoption || actor->info.worker_id() != h.worker_id()) {
            running = absl::FailedPreconditionError(absl::StrCat(
                "actor ", h.actor_id(), " is ", proto::ActorState_Name(actor->info.state()),
                actor->info.worker_id().empty() ? std::string()
                                                : absl::StrCat(" on worker ", actor->info.worker_id())));
          }
        }
      }
      if (!running.ok()) {
        proto::KillWorkerRequest kill;
        kill.set_worker_id(h.worker_id());
        kill.set_reason(absl::StrCat("its lease ", h.lease_id(), " outlived the scheduler, and ",
                                     running.message()));
        kills.push_back(std::move(kill));
        continue;
      }
      std::optional<ResourceBook::Grant> g = book_->Adopt(
          node_id, h.shape(), std::vector<int>(h.gpu_ids().begin(), h.gpu_ids().end()));
      if (!g.has_value()) {
        // Its node is unknown to the book: the actor is lost below and made again
        // elsewhere, so this worker must not serve it on.
        if (actor != nullptr) {
          proto::KillWorkerRequest kill;
          kill.set_worker_id(h.worker_id());
          kill.set_reason(absl::StrCat("its actor ", h.actor_id(), " could not be adopted on node ",
                                       node_id, ", which the scheduler does not know"));
          kills.push_back(std::move(kill));
        }
        continue;
      }
      Lease& lease = leases_[h.lease_id()];
      lease.id = h.lease_id();
      lease.job_id = h.job_id();
      lease.owner = h.owner();
      lease.grant = *std::move(g);
      lease.grant.agent_address = agent_address;
      lease.worker_id = h.worker_id();
      lease.actor_id = h.actor_id();
      lease.started = true;
      jobs_with_workers_.insert(h.job_id());
      ++room_version_;
      DROVER_LOG(INFO) << "lease " << h.lease_id() << " of " << h.owner() << " on node " << node_id
                       << " adopted (it outlived the scheduler)";
      if (actor != nullptr) {
        actor->awaiting_adoption = false;
        actor->lease_id = h.lease_id();
        actor->info.set_agent_address(agent_address);
        adopted_actors.insert(h.actor_id());
        DROVER_LOG(INFO) << "actor " << h.actor_id() << " stays ALIVE on worker " << h.worker_id();
      }
    }
    LoseUnadoptedLocked(node_id, adopted_actors,
                        absl::StrCat("was gone when node ", node_id,
                                     " registered again after the scheduler restarted"));
  }
  for (proto::KillWorkerRequest& kill : kills) {
    background_.Post([this, agent_address, kill = std::move(kill)] {
      workers_->KillWorker(agent_address, kill).IgnoreError();
    });
  }
}

void LeaseManager::ClaimChanged() {
  absl::MutexLock l(&mu_);
  ++room_version_;  // waiting requests' reasons name the claim now
  ReclaimLocked();
}

namespace {

// `need` less what `shape` gives back, nothing below zero.
void Deduct(proto::Resources* need, const proto::Resources& shape) {
  need->set_cpus(std::max(0.0, need->cpus() - shape.cpus()));
  need->set_memory_bytes(std::max<int64_t>(0, need->memory_bytes() - shape.memory_bytes()));
  need->set_gpus(std::max(0, need->gpus() - shape.gpus()));
  for (auto& [k, v] : *need->mutable_custom()) {
    auto it = shape.custom().find(k);
    if (it != shape.custom().end()) v = std::max(0.0, v - it->second);
  }
}

bool Met(const proto::Resources& need) {
  if (need.cpus() > 1e-9 || need.memory_bytes() > 0 || need.gpus() > 0) return false;
  for (const auto& [k, v] : need.custom()) {
    if (v > 1e-9) return false;
  }
  return true;
}

// Whether giving back `shape` helps with `need`.
bool Helps(const proto::Resources& need, const proto::Resources& shape) {
  if ((need.cpus() > 1e-9 && shape.cpus() > 0) || (need.memory_bytes() > 0 && shape.memory_bytes() > 0) ||
      (need.gpus() > 0 && shape.gpus() > 0)) {
    return true;
  }
  for (const auto& [k, v] : need.custom()) {
    auto it = shape.custom().find(k);
    if (v > 1e-9 && it != shape.custom().end() && it->second > 0) return true;
  }
  return false;
}

}  // namespace

void LeaseManager::ReclaimLocked() {
  next_reclaim_ = clock_->Now() + absl::Seconds(1);
  std::string claimant;
  std::map<std::string, proto::Resources> need = book_->ClaimShortfall(&claimant);
  if (need.empty()) return;
  // Per claimed node: leases asked back already count as given; then task leases that
  // help, until the claim has what it lacks there.
  std::map<std::string, std::vector<Lease*>> candidates;
  for (auto& [id, lease] : leases_) {
    auto n = need.find(lease.grant.node_id);
    if (n == need.end() || !lease.actor_id.empty() || !lease.started) continue;
    if (lease.revoked) {
      Deduct(&n->second, lease.grant.shape);
    } else {
      candidates[lease.grant.node_id].push_back(&lease);
    }
  }
  for (auto& [node, leases] : candidates) {
    proto::Resources& lacking = need[node];
    for (Lease* lease : leases) {
      if (Met(lacking)) break;
      if (!Helps(lacking, lease->grant.shape)) continue;
      Deduct(&lacking, lease->grant.shape);
      lease->revoked = true;
      ++leases_revoked_;
      proto::RevokeLeaseRequest req;
      req.set_lease_id(lease->id);
      req.set_reason(absl::StrCat("pending job ", claimant, " claims resources on node ", node,
                                  " and goes first"));
      DROVER_LOG(INFO) << "revoking lease " << lease->id << " of " << lease->owner << ": "
                       << req.reason();
      background_.Post([this, agent = lease->grant.agent_address, req] {
        absl::Status s = workers_->RevokeLease(agent, req);
        if (!s.ok()) DROVER_LOG(WARNING) << "RevokeLease " << req.lease_id() << ": " << s;
      });
    }
  }
}

void LeaseManager::WorkerExited(const proto::ReportWorkerExitRequest& req) {
  Answers answers;
  {
    absl::MutexLock l(&mu_);
    WorkerExitedLocked(req);
    SettleLocked(&answers);
  }
  answers.Run();
}

void LeaseManager::WorkerExitedLocked(const proto::ReportWorkerExitRequest& req) {
  auto it = leases_.find(req.lease_id());
  const bool known = it != leases_.end();
  std::string actor_id = req.actor_id();
  if (known) {
    if (actor_id.empty()) actor_id = it->second.actor_id;
    proto::TimelineEvent e = TimelineEventOf(proto::TIMELINE_WORKER_EXITED, 0, req.node_id(), {},
                                             DescribeExit(req.exit(), /*with_stderr=*/false));
    e.set_worker_id(req.worker_id());
    e.set_lease_id(req.lease_id());
    e.set_actor_id(actor_id);
    *e.mutable_exit() = req.exit();
    NoteLocked(it->second.job_id, std::move(e));
    ReleaseLocked(req.lease_id(), "its worker exited");
  }
  if (!known) NoteEndedEarlyLocked(req.lease_id());
  if (actor_id.empty()) return;
  auto a = actors_.find(actor_id);
  if (a == actors_.end()) return;
  // A recovered actor whose worker's exit overtook its node's registration.
  const bool unadopted = a->second.awaiting_adoption && !req.worker_id().empty() &&
                         a->second.info.worker_id() == req.worker_id();
  if (!unadopted && a->second.lease_id != req.lease_id()) return;  // an older incarnation
  a->second.awaiting_adoption = false;
  a->second.lease_id.clear();
  ActorLost(a->second,
            absl::StrCat("its worker ", req.worker_id(), " on node ", req.node_id(), " ",
                         DescribeExit(req.exit(), /*with_stderr=*/false)),
            &req.exit());
}

void LeaseManager::NodeDead(const std::string& node_id, const std::string& reason) {
  Answers answers;
  {
    absl::MutexLock l(&mu_);
    NodeDeadLocked(node_id, reason);
    SettleLocked(&answers);
  }
  answers.Run();
}

void LeaseManager::NodeDeadLocked(const std::string& node_id, const std::string& reason) {
  std::vector<std::string> lost;
  for (const auto& [id, lease] : leases_) {
    if (lease.grant.node_id == node_id) lost.push_back(id);
  }
  for (const std::string& id : lost) {
    std::string actor_id = leases_[id].actor_id;
    ReleaseLocked(id, absl::StrCat("its node ", node_id, " was lost"));
    auto a = actors_.find(actor_id);
    if (a != actors_.end() && a->second.lease_id == id) {
      a->second.lease_id.clear();
      ActorLost(a->second, absl::StrCat("its node ", node_id, " was lost (", reason, ")"), nullptr);
    }
  }
  LoseUnadoptedLocked(node_id, {}, absl::StrCat("was lost with its node ", node_id, " (", reason, ")"));
}

void LeaseManager::LoseUnadoptedLocked(const std::string& node_id,
                                       const std::set<std::string>& keep, const std::string& why) {
  for (auto& [id, a] : actors_) {
    if (!a.awaiting_adoption || keep.count(id) > 0) continue;
    if (!node_id.empty() && a.info.node_id() != node_id) continue;
    a.awaiting_adoption = false;
    DROVER_LOG(INFO) << "actor " << id << ": its worker " << a.info.worker_id() << " " << why;
    ActorLost(a, absl::StrCat("its worker ", a.info.worker_id(), " on node ", a.info.node_id(), " ", why),
              nullptr);
  }
}

void LeaseManager::NoteEndedEarlyLocked(const std::string& lease_id) {
  // Only leases of an earlier lifetime can still be adopted.
  if (lease_id.empty() || absl::StartsWith(lease_id, absl::StrCat("lease-", lease_tag_, "-"))) return;
  const absl::Time now = clock_->Now();
  // Oldest first (each is kept the same time): forgetting costs what expired.
  while (!ended_early_order_.empty() && ended_early_order_.front().first < now) {
    ended_early_.erase(ended_early_order_.front().second);
    ended_early_order_.pop_front();
  }
  // Bounded: a client sending returns of made-up ids costs at most this.
  if (ended_early_.size() >= 100'000) return;
  if (ended_early_.insert(lease_id).second) {
    ended_early_order_.emplace_back(now + kEndedEarlyMemory, lease_id);
  }
}

absl::Status LeaseManager::Recover() {
  DROVER_ASSIGN_OR_RETURN(std::vector<std::string> records, book_->SavedActors());
  if (records.empty()) return absl::OkStatus();
  int alive = 0, placed = 0, dead = 0;
  {
    absl::MutexLock l(&mu_);
    for (const std::string& record : records) {
      proto::ActorInfo info;
      proto::CreateActorRequest create;
      if (!DecodeActor(record, &info, &create)) {
        DROVER_LOG(WARNING) << "skipping a corrupt actor record (" << record.size() << " bytes)";
        continue;
      }
      const std::string id = info.actor_id();
      if (actors_.count(id) > 0) continue;
      Actor& a = actors_[id];
      a.info = std::move(info);
      a.create = std::move(create);
      a.told_state = a.info.state();
      if (a.info.state() == proto::ACTOR_DEAD) {
        a.killed = true;
        ++dead;
        continue;
      }
      if (absl::Status running = book_->CheckJobRunning(a.info.job_id()); !running.ok()) {
        a.killed = true;
        a.info.set_state(proto::ACTOR_DEAD);
        a.info.set_reason(absl::StrCat("its job ", a.info.job_id(),
                                       " ended while the scheduler was away"));
        ChangedLocked(a);
        ++dead;
        continue;
      }
      if (!a.info.name().empty()) names_[a.info.name()] = id;
      jobs_with_workers_.insert(a.info.job_id());
      if (a.info.state() == proto::ACTOR_ALIVE) {
        a.awaiting_adoption = true;
        ++alive;
      } else {
        StartPlacing(id);
        ++placed;
      }
    }
    if (alive > 0) {
      const absl::Time until = clock_->Now() + kAdoptionWait;
      placing_.Spawn([this, until] {
        absl::MutexLock l(&mu_);
        while (!stopped_ && clock_->Now() < until) clock_->WaitWithDeadline(&changed_, &mu_, until);
        if (stopped_) return;
        LoseUnadoptedLocked("", {}, absl::StrCat("did not come back: its node did not register within ",
                                                 absl::FormatDuration(kAdoptionWait),
                                                 " after the scheduler restarted"));
      });
    }
  }
  DROVER_LOG(INFO) << "recovered " << records.size() << " actor record(s): " << alive
                   << " alive (waiting for their nodes), " << placed << " to place, " << dead
                   << " dead";
  return absl::OkStatus();
}

void LeaseManager::JobEnded(const std::string& job_id,
                            std::map<std::string, std::vector<std::string>> objects) {
  bool had_workers = false;
  Answers answers;
  {
    absl::MutexLock l(&mu_);
    had_workers = jobs_with_workers_.erase(job_id) > 0;
    // Its queued requests are dropped, their callers told why.
    std::vector<std::string> dropped = queue_.RemoveJob(job_id);
    if (!dropped.empty()) {
      absl::Status why = book_->CheckJobRunning(job_id);
      if (why.ok()) why = absl::FailedPreconditionError(absl::StrCat("job ", job_id, " has ended"));
      for (const std::string& id : dropped) {
        auto r = requests_.find(id);
        if (r != requests_.end()) r->second.queued = nullptr;
        DropLocked(id, absl::FailedPreconditionError(absl::StrCat(
                           why.message(), "; its queued lease request ", id, " was dropped")),
                   &answers);
      }
    }
    for (auto& [id, a] : actors_) {
      if (a.info.job_id() != job_id || a.info.state() == proto::ACTOR_DEAD) continue;
      a.killed = true;
      a.awaiting_adoption = false;
      a.info.set_state(proto::ACTOR_DEAD);
      a.info.set_reason(absl::StrCat("its job ", job_id, " ended"));
      names_.erase(a.info.name());
      ChangedLocked(a);
    }
    std::vector<std::string> ended;
    for (const auto& [id, lease] : leases_) {
      if (lease.job_id == job_id) ended.push_back(id);
    }
    for (const std::string& id : ended) ReleaseLocked(id, "its job ended");
    SettleLocked(&answers);
  }
  answers.Run();
  // Every node: the job's workers (leased, idle in the warm pool, actors) stop there,
  // and the objects its processes made go from the stores.
  if (had_workers) {
    for (const std::string& agent : book_->AliveAgents()) {
      background_.Post([this, agent, job_id] { workers_->StopJob(agent, job_id).IgnoreError(); });
    }
  }
  for (auto& [agent, ids] : objects) {
    background_.Post([this, agent = agent, ids = std::move(ids)] {
      workers_->DeleteObjects(agent, ids).IgnoreError();
    });
  }
}

void LeaseManager::SaveActors() {
  for (;;) {
    std::vector<std::pair<proto::ActorInfo, proto::CreateActorRequest>> records;
    {
      absl::MutexLock lock(&mu_);
      if (unsaved_.empty()) {
        saving_ = false;
        return;
      }
      records.reserve(unsaved_.size());
      for (const std::string& id : unsaved_) {
        auto it = actors_.find(id);
        if (it != actors_.end()) records.emplace_back(it->second.info, it->second.create);
      }
      unsaved_.clear();
    }
    // One saver at a time (saving_), each record as it is now: a later change is saved
    // by the next round, never overtaken by an older one.
    for (const auto& [info, create] : records) {
      book_->SaveActor(info.actor_id(), info.version(), EncodeActor(info, create));
    }
  }
}

LeaseManager::Actor* LeaseManager::FindActorLocked(const std::string& id, const std::string& name) {
  if (!id.empty()) {
    auto it = actors_.find(id);
    return it == actors_.end() ? nullptr : &it->second;
  }
  auto n = names_.find(name);
  if (n == names_.end()) return nullptr;
  auto it = actors_.find(n->second);
  return it == actors_.end() ? nullptr : &it->second;
}

void LeaseManager::ChangedLocked(Actor& a) {
  a.info.set_version(a.info.version() + 1);
  changed_.SignalAll();
  if (saves_actors_) {
    unsaved_.insert(a.info.actor_id());
    if (!saving_) {
      saving_ = true;
      starts_.Post([this] { SaveActors(); });
    }
  }
  if (a.told_state == a.info.state()) return;  // only its pending reason changed
  a.told_state = a.info.state();
  proto::TimelineEvent e = TimelineEventOf(
      proto::TIMELINE_ACTOR, 0, a.info.node_id(), {},
      a.info.state() == proto::ACTOR_ALIVE ? a.info.class_name() : a.info.reason());
  e.set_actor_id(a.info.actor_id());
  e.set_worker_id(a.info.worker_id());
  e.set_state(proto::ActorState_Name(a.info.state()));
  NoteLocked(a.info.job_id(), std::move(e));
}

absl::StatusOr<proto::ActorInfo> LeaseManager::CreateActor(const proto::CreateActorRequest& req) {
  const proto::ActorCreation& c = req.creation();
  if (c.actor_id().empty() || c.factory().empty()) {
    return absl::InvalidArgumentError("CreateActor needs an actor id and a factory");
  }
  if (req.package().hash().empty()) {
    return absl::InvalidArgumentError("CreateActor needs the program's package (hash)");
  }
  DROVER_RETURN_IF_ERROR(ValidateLeaseShape(req.shape()));
  if (req.max_restarts() < 0) return absl::InvalidArgumentError("max_restarts must not be negative");
  DROVER_RETURN_IF_ERROR(book_->CheckJobRunning(req.job_id()));
  {
    absl::MutexLock l(&mu_);
    if (auto it = actors_.find(c.actor_id()); it != actors_.end()) return it->second.info;  // a retry
    if (!c.name().empty()) {
      if (auto n = names_.find(c.name()); n != names_.end()) {
        return absl::AlreadyExistsError(absl::StrCat("an actor named '", c.name(),
                                                     "' exists already (", n->second,
                                                     "): pick another name or GetActor it"));
      }
      names_[c.name()] = c.actor_id();
    }
    Actor& a = actors_[c.actor_id()];
    a.create = req;
    a.info.set_actor_id(c.actor_id());
    a.info.set_name(c.name());
    a.info.set_job_id(req.job_id());
    a.info.set_class_name(c.class_name());
    a.info.set_state(proto::ACTOR_PENDING);
    a.info.set_max_restarts(req.max_restarts());
    a.info.set_pending_reason("waiting for a worker");
    jobs_with_workers_.insert(req.job_id());
    ChangedLocked(a);
  }
  absl::MutexLock l(&mu_);
  StartPlacing(c.actor_id());
  return actors_[c.actor_id()].info;
}

void LeaseManager::PlaceActor(const std::string& actor_id) {
  for (;;) {
    proto::CreateActorRequest create;
    {
      absl::MutexLock l(&mu_);
      auto it = actors_.find(actor_id);
      if (stopped_ || it == actors_.end() || it->second.killed ||
          it->second.info.state() == proto::ACTOR_DEAD) {
        return;
      }
      create = it->second.create;
    }
    std::string pending_reason;
    bool retry = false;
    absl::StatusOr<Lease> lease = Grant(create.shape(), create.hint(), create.job_id(), create.owner(),
                                        create.package(), &create.creation(), &pending_reason, &retry);
    absl::MutexLock l(&mu_);
    auto it = actors_.find(actor_id);
    if (it == actors_.end()) return;
    Actor& a = it->second;
    if (lease.ok()) {
      if (a.killed || a.info.state() == proto::ACTOR_DEAD) {
        const std::string agent = lease->grant.agent_address;
        proto::KillWorkerRequest kill;
        kill.set_worker_id(lease->worker_id);
        kill.set_reason("its actor was killed while it was created");
        ReleaseLocked(lease->id);
        timer_cv_.Signal();  // the timer's thread runs the grant pass
        background_.Post([this, agent, kill] { workers_->KillWorker(agent, kill).IgnoreError(); });
        return;
      }
      a.lease_id = lease->id;
      a.info.set_state(proto::ACTOR_ALIVE);
      a.info.set_node_id(lease->grant.node_id);
      a.info.set_worker_id(lease->worker_id);
      a.info.set_unix_path(lease->unix_path);
      a.info.set_tcp_address(lease->tcp_address);
      a.info.set_agent_address(lease->grant.agent_address);
      a.info.clear_pending_reason();
      ChangedLocked(a);
      return;
    }
    if (!retry) {
      // The factory failed or the program cannot start: no point in trying elsewhere.
      a.info.set_state(proto::ACTOR_DEAD);
      a.info.set_reason(absl::StrCat("it could not be created: ", lease.status().message()));
      a.info.set_pending_reason("");
      names_.erase(a.info.name());
      ChangedLocked(a);
      return;
    }
    if (a.info.pending_reason() != pending_reason) {
      a.info.set_pending_reason(pending_reason);
      ChangedLocked(a);
    }
    ++actors_waiting_;
    clock_->WaitWithDeadline(&freed_, &mu_, clock_->Now() + kActorRetry);
    --actors_waiting_;
  }
}

void LeaseManager::ActorLost(Actor& a, const std::string& why, const proto::ExitInfo* exit) {
  if (exit != nullptr) *a.info.mutable_last_exit() = *exit;
  // The stderr tail goes last, after what happens next.
  std::string tail;
  if (exit != nullptr && !exit->stderr_tail().empty()) {
    tail = absl::StrCat("; last lines of its stderr:\n", exit->stderr_tail());
  }
  if (a.killed || a.info.state() == proto::ACTOR_DEAD) {
    a.info.set_state(proto::ACTOR_DEAD);
    ChangedLocked(a);
    return;
  }
  if (a.info.restarts() < a.info.max_restarts()) {
    a.info.set_restarts(a.info.restarts() + 1);
    a.info.set_state(proto::ACTOR_RESTARTING);
    a.info.set_reason(absl::StrCat(why, "; restarting (restart ", a.info.restarts(), " of ",
                                   a.info.max_restarts(), ")", tail));
    a.info.clear_node_id();
    a.info.clear_worker_id();
    a.info.clear_unix_path();
    a.info.clear_tcp_address();
    ChangedLocked(a);
    StartPlacing(a.info.actor_id());
    return;
  }
  a.info.set_state(proto::ACTOR_DEAD);
  a.info.set_reason(a.info.max_restarts() == 0
                        ? absl::StrCat(why, tail)
                        : absl::StrCat(why, "; no restarts left (max_restarts ", a.info.max_restarts(),
                                       ")", tail));
  names_.erase(a.info.name());
  ChangedLocked(a);
}

absl::StatusOr<proto::ActorInfo> LeaseManager::GetActor(const proto::GetActorRequest& req) {
  if (req.actor_id().empty() && req.name().empty()) {
    return absl::InvalidArgumentError("GetActor needs an actor id or a name");
  }
  const absl::Time deadline =
      clock_->Now() + absl::Milliseconds(std::clamp<int64_t>(req.wait_ms(), 0, kMaxWaitMs));
  absl::MutexLock l(&mu_);
  for (;;) {
    Actor* a = FindActorLocked(req.actor_id(), req.name());
    if (a != nullptr && (req.after_version() <= 0 || a->info.version() > req.after_version())) {
      return a->info;
    }
    if (stopped_ || clock_->WaitWithDeadline(&changed_, &mu_, deadline)) {
      a = FindActorLocked(req.actor_id(), req.name());
      if (a != nullptr) return a->info;
      return absl::NotFoundError(req.actor_id().empty()
                                     ? absl::StrCat("no live actor is named '", req.name(), "'")
                                     : absl::StrCat("no actor ", req.actor_id()));
    }
  }
}

absl::Status LeaseManager::KillActor(const std::string& actor_id, const std::string& reason) {
  std::string agent;
  proto::KillWorkerRequest kill;
  {
    absl::MutexLock l(&mu_);
    auto it = actors_.find(actor_id);
    if (it == actors_.end()) return absl::NotFoundError(absl::StrCat("no actor ", actor_id));
    Actor& a = it->second;
    if (a.info.state() == proto::ACTOR_DEAD) return absl::OkStatus();
    a.killed = true;
    a.info.set_state(proto::ACTOR_DEAD);
    a.info.set_reason(reason.empty() ? "killed" : reason);
    names_.erase(a.info.name());
    ChangedLocked(a);
    if (auto l2 = leases_.find(a.lease_id); l2 != leases_.end()) {
      agent = l2->second.grant.agent_address;
      kill.set_worker_id(l2->second.worker_id);
      kill.set_reason(a.info.reason());
    } else if (a.awaiting_adoption) {
      // Recovered, its node not registered again yet: its record knows the worker.
      a.awaiting_adoption = false;
      agent = a.info.agent_address();
      kill.set_worker_id(a.info.worker_id());
      kill.set_reason(a.info.reason());
    }
  }
  if (!agent.empty()) return workers_->KillWorker(agent, kill);
  return absl::OkStatus();
}

LeaseManager::Counts LeaseManager::counts() {
  absl::MutexLock l(&mu_);
  Counts c;
  c.leases = static_cast<int>(leases_.size());
  c.pending_requests = static_cast<int>(queue_.size() + retries_.size()) + starting_;
  c.waiting_calls = static_cast<int>(waiters_.size());
  c.leases_granted = leases_granted_;
  c.leases_ended = leases_ended_;
  c.leases_revoked = leases_revoked_;
  for (const auto& [id, a] : actors_) {
    if (a.info.state() == proto::ACTOR_ALIVE) ++c.actors_alive;
    if (a.info.state() == proto::ACTOR_PENDING || a.info.state() == proto::ACTOR_RESTARTING) {
      ++c.actors_pending;
    }
    if (a.info.state() == proto::ACTOR_RESTARTING) ++c.actors_restarting;
    if (a.info.state() == proto::ACTOR_DEAD) ++c.actors_dead;
  }
  return c;
}

std::vector<LeaseManager::LeaseView> LeaseManager::Leases(size_t limit) {
  absl::MutexLock l(&mu_);
  std::vector<LeaseView> out;
  for (auto it = leases_.rbegin(); it != leases_.rend() && (limit == 0 || out.size() < limit);
       ++it) {
    const Lease& lease = it->second;
    out.push_back({lease.id, lease.job_id, lease.owner, lease.grant.node_id, lease.worker_id,
                   lease.actor_id});
  }
  return out;
}

std::vector<proto::ActorInfo> LeaseManager::Actors(size_t limit) {
  absl::MutexLock l(&mu_);
  std::vector<proto::ActorInfo> out;
  for (auto it = actors_.rbegin(); it != actors_.rend() && (limit == 0 || out.size() < limit);
       ++it) {
    out.push_back(it->second.info);
  }
  return out;
}

}  // namespace drover
