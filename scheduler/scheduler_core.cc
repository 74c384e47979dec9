#include "scheduler/scheduler_core.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/spawn.h"
#include "scheduler/placement.h"

namespace drover {
namespace {

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

bool IsTerminal(proto::JobState s) {
  return s == proto::SUCCEEDED || s == proto::FAILED || s == proto::CANCELLED;
}

bool Failed(const proto::ExitInfo& e) {
  return !e.error().empty() || e.exit_code() != 0 || e.signal() != 0;
}

void AddTo(proto::Resources* acc, const proto::Resources& r, int sign) {
  acc->set_cpus(acc->cpus() + sign * r.cpus());
  acc->set_memory_bytes(acc->memory_bytes() + sign * r.memory_bytes());
  acc->set_gpus(acc->gpus() + sign * r.gpus());
  for (const auto& [k, v] : r.custom()) (*acc->mutable_custom())[k] += sign * v;
}

proto::Resources Minus(const proto::Resources& total, const proto::Resources& used) {
  proto::Resources out = total;
  AddTo(&out, used, -1);
  if (out.cpus() < 1e-9) out.set_cpus(std::max(0.0, out.cpus()));
  return out;
}

// "rank 1 on node node-2 (10.0.0.2) exited with code 3" + stderr tail.
std::string DescribeFailure(const proto::ExitInfo& e, const std::string& node_ip,
                            bool with_stderr = true) {
  std::string where = absl::StrCat("rank ", e.rank(), " on node ", e.node_id(),
                                   node_ip.empty() ? "" : absl::StrCat(" (", node_ip, ")"));
  std::string what;
  if (!e.error().empty()) {
    what = e.error();
  } else if (e.signal() != 0) {
    what = absl::StrCat("was killed by ", SignalName(e.signal()));
  } else {
    what = absl::StrCat("exited with code ", e.exit_code());
  }
  std::string out = absl::StrCat(where, " ", what);
  if (with_stderr && !e.stderr_tail().empty()) {
    absl::StrAppend(&out, "; last lines of its stderr:\n", e.stderr_tail());
    if (out.back() != '\n') out.push_back('\n');
  }
  return out;
}

int ExitCodeOf(const proto::ExitInfo& e) {
  if (e.signal() != 0) return 128 + e.signal();
  if (e.exit_code() > 0) return e.exit_code();
  return 1;
}

int64_t JobNumber(const std::string& id) {
  int64_t n = 0;
  auto dash = id.rfind('-');
  if (dash != std::string::npos) (void)absl::SimpleAtoi(id.substr(dash + 1), &n);
  return n;
}

}  // namespace

SchedulerCore::SchedulerCore(SchedulerOptions options, std::unique_ptr<StateStore> store,
                             std::unique_ptr<AgentClient> agents)
    : options_(std::move(options)),
      store_(std::move(store)),
      agents_(std::move(agents)),
      outbound_(std::make_unique<ThreadPool>(4)) {}

SchedulerCore::~SchedulerCore() { Stop(); }

absl::Status SchedulerCore::Start() {
  auto loaded = store_->LoadJobs();
  if (!loaded.ok()) return loaded.status();
  absl::MutexLock lock(&mu_);
  std::sort(loaded->begin(), loaded->end(), [](const auto& a, const auto& b) {
    return JobNumber(a.job_id()) < JobNumber(b.job_id());
  });
  absl::Time now = absl::Now();
  for (auto& info : *loaded) {
    Job& job = jobs_[info.job_id()];
    job.info = std::move(info);
    job.seq = next_seq_++;
    if (!job.info.spec().idempotency_key().empty()) {
      idempotency_[job.info.spec().idempotency_key()] = job.info.job_id();
    }
    if (job.info.live_processes() == 0 && job.info.state() != proto::RUNNING) continue;
    // Reattach: the processes of the current generation may still run on their nodes.
    std::set<int> exited(job.info.exited_ranks().begin(), job.info.exited_ranks().end());
    for (const auto& p : job.info.placement()) {
      Node& node = nodes_[p.node_id()];
      if (node.info.node_id().empty()) {
        node.info.set_node_id(p.node_id());
        node.info.set_node_ip(p.node_ip());
        node.info.set_state(proto::RECONNECTING);
        node.info.set_reason("known from a running job; waiting for its agent to re-register");
        node.last_heartbeat = now;
        node.order = static_cast<int64_t>(nodes_.size());
      }
      Allocation a;
      a.node_id = p.node_id();
      a.res = job.info.spec().per_process();
      a.gpus.assign(p.gpu_ids().begin(), p.gpu_ids().end());
      AddTo(&node.used, a.res, +1);
      node.used_gpus.insert(a.gpus.begin(), a.gpus.end());
      job.allocs.push_back(std::move(a));
      if (!exited.count(p.rank())) job.live.insert(p.rank());
    }
    job.info.set_live_processes(static_cast<int>(job.live.size()));
    if (!IsTerminal(job.info.state()) && job.info.spec().time_limit_ms() > 0) {
      time_limited_.insert(job.info.job_id());
    }
  }
  DROVER_LOG(INFO) << "loaded " << jobs_.size() << " jobs from " << store_->Describe();
  monitor_ = std::thread([this] { MonitorLoop(); });
  return absl::OkStatus();
}

void SchedulerCore::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    for (auto& [id, job] : jobs_) job.changed->SignalAll();
  }
  if (monitor_.joinable()) monitor_.join();
  outbound_.reset();
}

void SchedulerCore::SetAddress(const std::string& address) {
  absl::MutexLock lock(&mu_);
  address_ = address;
}

// ---------------------------------------------------------------------------
// Nodes

absl::StatusOr<proto::RegisterNodeReply> SchedulerCore::RegisterNode(
    const proto::RegisterNodeRequest& req) {
  if (req.agent_address().empty() || req.node_ip().empty()) {
    return absl::InvalidArgumentError("RegisterNode needs agent_address and node_ip");
  }
  if (req.total().cpus() < 0 || req.total().gpus() < 0 || req.total().memory_bytes() < 0 ||
      req.gpu_ids_size() != req.total().gpus()) {
    return absl::InvalidArgumentError(
        "RegisterNode: resources must be non-negative and gpu_ids must list every GPU");
  }
  Actions actions;
  proto::RegisterNodeReply reply;
  {
    absl::MutexLock lock(&mu_);
    std::string id = req.node_id();
    if (id.empty()) {
      do {
        auto n = store_->NextId("node");
        if (!n.ok()) return n.status();
        id = absl::StrCat("node-", *n);
      } while (nodes_.count(id));
    }
    bool known = nodes_.count(id) > 0;
    Node& node = nodes_[id];
    bool reattach = known && node.info.state() == proto::RECONNECTING;
    if (!known) node.order = static_cast<int64_t>(nodes_.size());
    node.info.set_node_id(id);
    node.info.set_agent_address(req.agent_address());
    node.info.set_node_ip(req.node_ip());
    node.info.set_hostname(req.hostname());
    node.info.set_state(proto::ALIVE);
    node.info.clear_reason();
    *node.info.mutable_total() = req.total();
    node.info.mutable_gpu_names()->CopyFrom(req.gpu_names());
    node.info.mutable_warnings()->CopyFrom(req.warnings());
    node.gpu_ids.assign(req.gpu_ids().begin(), req.gpu_ids().end());
    node.last_heartbeat = absl::Now();
    DROVER_LOG(INFO) << (known ? "node re-registered: " : "node registered: ") << id << " at "
                     << req.agent_address() << " ip " << req.node_ip() << " with "
                     << DescribeResources(req.total());
    proto::HeartbeatRequest report;
    report.set_node_id(id);
    report.mutable_processes()->CopyFrom(req.processes());
    proto::HeartbeatReply ignored;
    // After a scheduler restart (reattach) or an agent restart (known, was alive), any
    // live rank the agent no longer reports is lost.
    ApplyProcessTableLocked(node, report, /*reattach=*/known || reattach, &ignored, &actions);
    ScheduleLocked(&actions);
    reply.set_node_id(id);
    reply.set_heartbeat_interval_ms(absl::ToInt64Milliseconds(options_.heartbeat_interval));
  }
  Dispatch(std::move(actions));
  return reply;
}

proto::HeartbeatReply SchedulerCore::Heartbeat(const proto::HeartbeatRequest& req) {
  proto::HeartbeatReply reply;
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    Node* node = FindNodeLocked(req.node_id());
    if (node == nullptr || node->info.state() != proto::ALIVE) {
      reply.set_known(false);
      return reply;
    }
    reply.set_known(true);
    node->last_heartbeat = absl::Now();
    ApplyProcessTableLocked(*node, req, /*reattach=*/false, &reply, &actions);
    ScheduleLocked(&actions);
  }
  Dispatch(std::move(actions));
  return reply;
}

void SchedulerCore::ApplyProcessTableLocked(Node& node, const proto::HeartbeatRequest& report,
                                            bool reattach, proto::HeartbeatReply* reply,
                                            Actions* out) {
  // (job, generation) -> all of its processes on this node have exited.
  std::map<std::pair<std::string, int>, bool> groups;
  std::set<std::pair<std::string, int>> stale_running;
  std::map<std::string, std::set<int>> reported;  // job -> ranks of its current generation
  for (const auto& p : report.processes()) {
    auto key = std::make_pair(p.job_id(), p.generation());
    auto [it, inserted] = groups.emplace(key, true);
    Job* job = FindJobLocked(p.job_id());
    if (p.running()) {
      it->second = false;
      bool current = job != nullptr && p.generation() == job->info.restart_count() &&
                     job->live.count(p.rank()) > 0;
      if (!current) stale_running.insert(key);
    } else if (job != nullptr) {
      proto::ExitInfo e = p.exit();
      e.set_rank(p.rank());
      e.set_generation(p.generation());
      e.set_node_id(node.info.node_id());
      HandleExitLocked(*job, e, out);
    }
    if (job != nullptr && p.generation() == job->info.restart_count()) {
      reported[p.job_id()].insert(p.rank());
    }
  }
  for (const auto& [key, all_exited] : groups) {
    if (all_exited) {
      auto* f = reply->add_forget();
      f->set_job_id(key.first);
      f->set_generation(key.second);
    }
  }
  for (const auto& key : stale_running) {
    Action a;
    a.kind = Action::kStop;
    a.job_id = key.first;
    a.generation = key.second;
    a.stop_address = node.info.agent_address();
    out->push_back(std::move(a));
  }
  if (!reattach) return;
  for (auto& [id, job] : jobs_) {
    std::vector<int> lost;
    for (const auto& p : job.info.placement()) {
      if (p.node_id() == node.info.node_id() && job.live.count(p.rank()) &&
          !reported[id].count(p.rank())) {
        lost.push_back(p.rank());
      }
    }
    FailRanksLocked(job, node.info.node_id(), lost,
                    "is gone: its node agent restarted and no longer has the process", out);
  }
}

void SchedulerCore::ReportExit(const proto::ReportExitRequest& req) {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    Job* job = FindJobLocked(req.job_id());
    if (job == nullptr) return;
    proto::ExitInfo e = req.exit();
    e.set_node_id(req.node_id());
    HandleExitLocked(*job, e, &actions);
    ScheduleLocked(&actions);
  }
  Dispatch(std::move(actions));
}

void SchedulerCore::DeclareDeadLocked(Node& node, const std::string& reason, Actions* out) {
  DROVER_LOG(WARNING) << "node " << node.info.node_id() << " declared dead: " << reason;
  node.info.set_state(proto::DEAD);
  node.info.set_reason(reason);
  // Its object store is unreachable: nobody should try to pull from it.
  objects_.RemoveNode(node.info.node_id());
  for (auto& [id, job] : jobs_) {
    std::vector<int> lost;
    for (const auto& p : job.info.placement()) {
      if (p.node_id() == node.info.node_id() && job.live.count(p.rank())) lost.push_back(p.rank());
    }
    FailRanksLocked(job, node.info.node_id(), lost,
                    absl::StrCat("was lost: its node was declared dead (", reason, ")"), out);
  }
}

void SchedulerCore::MonitorLoop() {
  const absl::Duration tick =
      std::min(absl::Milliseconds(200), options_.node_timeout / 4);
  for (;;) {
    Actions actions;
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), tick)) return;
      absl::Time now = absl::Now();
      for (auto it = deferred_stops_.begin(); it != deferred_stops_.end();) {
        if (it->second > now) {
          ++it;
          continue;
        }
        Job* job = FindJobLocked(it->first);
        if (job != nullptr && !job->live.empty()) StopJobLocked(*job, &actions);
        it = deferred_stops_.erase(it);
      }
      for (auto& [id, node] : nodes_) {
        if (node.info.state() == proto::DEAD) continue;
        absl::Duration silent = now - node.last_heartbeat;
        if (silent > options_.node_timeout) {
          DeclareDeadLocked(
              node,
              absl::StrCat("no heartbeat from ", id, " (", node.info.node_ip(), ") for ",
                           absl::FormatDuration(absl::Trunc(silent, absl::Milliseconds(100))),
                           "; the node timeout is ",
                           absl::FormatDuration(options_.node_timeout)),
              &actions);
        }
      }
      for (auto it = time_limited_.begin(); it != time_limited_.end();) {
        Job* job = FindJobLocked(*it);
        if (job == nullptr || IsTerminal(job->info.state())) {
          it = time_limited_.erase(it);
          continue;
        }
        // The running generation's deadline; none while it waits to be placed again.
        const absl::Time deadline = absl::FromUnixMillis(job->info.generation_start_ms()) +
                                    absl::Milliseconds(job->info.spec().time_limit_ms());
        if (deadline > now || job->info.state() != proto::RUNNING || job->info.restarting()) {
          ++it;
          continue;
        }
        TimeOutLocked(*job, &actions);
        it = time_limited_.erase(it);
      }
      std::set<std::string> retry;
      retry.swap(dirty_);
      for (const auto& id : retry) {
        if (Job* job = FindJobLocked(id)) PersistLocked(*job);
      }
      ScheduleLocked(&actions);
    }
    Dispatch(std::move(actions));
  }
}

// ---------------------------------------------------------------------------
// Jobs

absl::StatusOr<proto::JobInfo> SchedulerCore::SubmitJob(const proto::JobSpec& spec) {
  std::string invalid = ValidateJobSpec(spec);
  if (!invalid.empty()) return absl::InvalidArgumentError(invalid);
  Actions actions;
  proto::JobInfo result;
  {
    absl::MutexLock lock(&mu_);
    if (!spec.idempotency_key().empty()) {
      auto it = idempotency_.find(spec.idempotency_key());
      if (it != idempotency_.end()) return jobs_[it->second].info;
    }
    // Reject at once what could never fit on the nodes that exist.
    auto totals = CapacitiesLocked(/*free=*/false);
    if (!totals.empty()) {
      PlacementResult never = PlaceGang(spec, totals);
      if (!never.ok) {
        return absl::FailedPreconditionError(absl::StrCat(
            "this job can never run on this cluster: ", never.reason,
            " (counting every alive node's total, not just what is free); ask for less, "
            "or add nodes that have it"));
      }
    }
    auto n = store_->NextId("job");
    if (!n.ok()) return n.status();
    std::string id = absl::StrCat("job-", *n);
    Job& job = jobs_[id];
    job.seq = next_seq_++;
    job.info.set_job_id(id);
    *job.info.mutable_spec() = spec;
    if (job.info.spec().name().empty()) job.info.mutable_spec()->set_name(spec.command(0));
    job.info.set_state(proto::PENDING);
    job.info.set_reason("waiting to be placed");
    job.info.set_submit_time_ms(NowMs());
    if (!spec.idempotency_key().empty()) idempotency_[spec.idempotency_key()] = id;
    DROVER_LOG(INFO) << "submitted " << id << ": " << spec.nproc() << " x "
                     << absl::StrJoin(spec.command(), " ");
    ChangedLocked(job);
    ScheduleLocked(&actions);
    result = job.info;
  }
  Dispatch(std::move(actions));
  return result;
}

void SchedulerCore::ScheduleLocked(Actions* out) {
  std::vector<Job*> pending;
  for (auto& [id, job] : jobs_) {
    if (job.info.state() == proto::PENDING) pending.push_back(&job);
  }
  std::sort(pending.begin(), pending.end(), [](const Job* a, const Job* b) {
    // Restarting gangs first: they held resources a moment ago.
    if ((a->info.restart_count() > 0) != (b->info.restart_count() > 0)) {
      return a->info.restart_count() > 0;
    }
    return a->seq < b->seq;
  });
  const absl::Time now = absl::Now();
  Reservation held;
  for (Job* job : pending) {
    const bool claimed = !held.job_id.empty();
    // Backfill: a job sure to end (its time limit is enforced) before the claiming job
    // could start anyway may use the claimed resources meanwhile.
    const int64_t limit_ms = job->info.spec().time_limit_ms();
    const bool borrows = claimed && limit_ms > 0 &&
                         now + absl::Milliseconds(limit_ms) <= held.earliest_start;
    if (TryPlaceLocked(*job, out, claimed && !borrows ? &held : nullptr)) continue;
    if (claimed) continue;
    PlacementResult plan = PlaceGang(job->info.spec(), CapacitiesLocked(/*free=*/false));
    if (!plan.ok) continue;  // cannot run on today's nodes even when empty: no claim
    held.job_id = job->info.job_id();
    const proto::Resources& per = job->info.spec().per_process();
    for (const auto& p : plan.ranks) {
      AddTo(&held.resources[p.node_id()], per, +1);
      held.gpus[p.node_id()].insert(p.gpu_ids().begin(), p.gpu_ids().end());
    }
    held.earliest_start = EarliestStartLocked(held, now);
  }
}

absl::Time SchedulerCore::EarliestStartLocked(const Reservation& held, absl::Time now) {
  absl::Time latest = now;
  for (const auto& [id, j] : jobs_) {
    if (j.allocs.empty() || IsTerminal(j.info.state())) continue;  // ending: being stopped
    const bool there = std::any_of(j.allocs.begin(), j.allocs.end(), [&](const Allocation& a) {
      return held.resources.count(a.node_id) > 0;
    });
    if (!there) continue;
    const int64_t limit_ms = j.info.spec().time_limit_ms();
    if (limit_ms <= 0 || j.info.state() != proto::RUNNING || j.info.restarting()) {
      return absl::InfiniteFuture();
    }
    latest = std::max(latest, absl::FromUnixMillis(j.info.generation_start_ms()) +
                                  absl::Milliseconds(limit_ms));
  }
  return latest;
}

std::vector<NodeCapacity> SchedulerCore::CapacitiesLocked(bool free, const Reservation* held) {
  std::vector<const Node*> alive;
  for (const auto& [id, n] : nodes_) {
    if (n.info.state() == proto::ALIVE) alive.push_back(&n);
  }
  std::sort(alive.begin(), alive.end(),
            [](const Node* a, const Node* b) { return a->order < b->order; });
  std::vector<NodeCapacity> caps;
  for (const Node* n : alive) {
    NodeCapacity c;
    c.node_id = n->info.node_id();
    c.node_ip = n->info.node_ip();
    c.available = free ? Minus(n->info.total(), n->used) : n->info.total();
    const std::set<int>* held_gpus = nullptr;
    if (free && held != nullptr) {
      if (auto it = held->resources.find(c.node_id); it != held->resources.end()) {
        c.available = Minus(c.available, it->second);
        // Nothing below zero: a claim on what running jobs still hold leaves nothing.
        c.available.set_memory_bytes(std::max<int64_t>(0, c.available.memory_bytes()));
        for (auto& [k, v] : *c.available.mutable_custom()) v = std::max(0.0, v);
      }
      if (auto it = held->gpus.find(c.node_id); it != held->gpus.end()) held_gpus = &it->second;
    }
    for (int g : n->gpu_ids) {
      if (free && (n->used_gpus.count(g) || (held_gpus && held_gpus->count(g)))) continue;
      c.gpu_ids.push_back(g);
    }
    c.available.set_gpus(static_cast<int>(c.gpu_ids.size()));
    caps.push_back(std::move(c));
  }
  return caps;
}

bool SchedulerCore::TryPlaceLocked(Job& job, Actions* out, const Reservation* held) {
  PlacementResult r = PlaceGang(job.info.spec(), CapacitiesLocked(/*free=*/true, held));
  if (!r.ok) {
    std::string why = r.reason;
    if (held != nullptr && PlaceGang(job.info.spec(), CapacitiesLocked(/*free=*/true)).ok) {
      why = absl::StrCat("waiting behind ", held->job_id,
                         " (submitted earlier): the free resources it will need are kept for it");
      // An absolute time, so the reason (and the job's version) does not change every tick.
      if (held->earliest_start != absl::InfiniteFuture() &&
          held->earliest_start - absl::Now() >= absl::Seconds(1)) {
        absl::StrAppend(&why, "; a --time-limit ending before ",
                        absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", held->earliest_start,
                                         absl::UTCTimeZone()),
                        " would let it start now");
      }
    }
    std::string reason = job.info.restart_count() > 0
                             ? absl::StrCat("restart ", job.info.restart_count(), " of ",
                                            job.info.spec().max_restarts(), " waiting: ", why)
                             : why;
    if (job.info.reason() != reason) {
      job.info.set_reason(reason);
      ChangedLocked(job);
    }
    return false;
  }
  const auto& per = job.info.spec().per_process();
  job.info.clear_placement();
  job.info.clear_exited_ranks();
  job.info.clear_succeeded_ranks();
  job.live.clear();
  job.allocs.clear();
  std::map<std::string, proto::StartProcessesRequest> by_node;
  std::vector<std::string> node_order;
  for (auto& p : r.ranks) {
    Node& node = nodes_[p.node_id()];
    Allocation a{p.node_id(), per, std::vector<int>(p.gpu_ids().begin(), p.gpu_ids().end())};
    AddTo(&node.used, a.res, +1);
    node.used_gpus.insert(a.gpus.begin(), a.gpus.end());
    job.allocs.push_back(std::move(a));
    job.live.insert(p.rank());
    auto [it, inserted] = by_node.emplace(p.node_id(), proto::StartProcessesRequest());
    if (inserted) node_order.push_back(p.node_id());
    auto* proc = it->second.add_processes();
    proc->set_rank(p.rank());
    proc->set_local_rank(p.local_rank());
    proc->mutable_gpu_ids()->CopyFrom(p.gpu_ids());
    it->second.set_group_rank(p.group_rank());
    *job.info.add_placement() = std::move(p);
  }
  const auto& spec = job.info.spec();
  job.info.set_state(proto::RUNNING);
  job.info.set_master_addr(job.info.placement(0).node_ip());
  job.info.set_master_port(0);
  job.info.set_live_processes(static_cast<int>(job.live.size()));
  job.info.clear_root_cause();
  if (job.info.start_time_ms() == 0) job.info.set_start_time_ms(NowMs());
  job.info.set_generation_start_ms(NowMs());
  if (spec.time_limit_ms() > 0) time_limited_.insert(job.info.job_id());
  job.info.set_reason(absl::StrCat("running ", spec.nproc(), " processes on ", node_order.size(),
                                   node_order.size() == 1 ? " node" : " nodes",
                                   job.info.restart_count() > 0
                                       ? absl::StrCat(" (restart ", job.info.restart_count(),
                                                      " of ", spec.max_restarts(), ")")
                                       : ""));
  Action a;
  a.kind = Action::kLaunch;
  a.job_id = job.info.job_id();
  a.generation = job.info.restart_count();
  for (const auto& node_id : node_order) {
    const auto& used = job.info.nodes_used();
    if (std::find(used.begin(), used.end(), node_id) == used.end()) {
      job.info.add_nodes_used(node_id);
    }
    auto& req = by_node[node_id];
    req.set_job_id(job.info.job_id());
    req.set_generation(job.info.restart_count());
    req.mutable_command()->CopyFrom(spec.command());
    req.mutable_env()->insert(spec.env().begin(), spec.env().end());
    req.set_cwd(spec.cwd());
    req.set_world_size(spec.nproc());
    req.set_local_world_size(req.processes_size());
    req.set_master_addr(job.info.master_addr());
    req.set_max_restarts(spec.max_restarts());
    req.set_scheduler_address(address_);
    a.starts.emplace_back(nodes_[node_id].info.agent_address(), std::move(req));
    a.node_ids.push_back(node_id);
  }
  DROVER_LOG(INFO) << "placed " << job.info.job_id() << " generation " << a.generation << " on "
                   << absl::StrJoin(node_order, ",");
  ChangedLocked(job);
  out->push_back(std::move(a));
  return true;
}

void SchedulerCore::RunLaunch(const Action& a) {
  int master_port = 0;
  for (size_t i = 0; i < a.starts.size(); ++i) {
    proto::StartProcessesRequest req = a.starts[i].second;
    req.set_master_port(master_port);  // 0 for the first (master) node: it picks one
    auto port = agents_->StartProcesses(a.starts[i].first, req);
    Actions more;
    bool proceed = port.ok();
    {
      absl::MutexLock lock(&mu_);
      Job* job = FindJobLocked(a.job_id);
      if (job == nullptr || job->info.restart_count() != a.generation) return;
      if (!port.ok()) {
        std::vector<int> ranks;
        for (const auto& p : req.processes()) ranks.push_back(p.rank());
        FailRanksLocked(*job, a.node_ids[i], ranks,
                        absl::StrCat("could not be started: ", port.status().message()), &more);
        ScheduleLocked(&more);
      } else if (i == 0) {
        master_port = *port;
        job->info.set_master_port(master_port);
        ChangedLocked(*job);
      }
    }
    Dispatch(std::move(more));
    if (!proceed) return;
  }
}

void SchedulerCore::Dispatch(Actions actions) {
  for (auto& a : actions) {
    outbound_->Post([this, a = std::move(a)] {
      if (a.kind == Action::kLaunch) {
        RunLaunch(a);
        return;
      }
      proto::StopJobRequest stop;
      stop.set_job_id(a.job_id);
      stop.set_generation(a.generation);
      stop.set_grace_ms(absl::ToInt64Milliseconds(options_.kill_grace));
      absl::Status s = agents_->StopJob(a.stop_address, stop);
      if (!s.ok()) DROVER_LOG(WARNING) << "stop " << a.job_id << ": " << s;
    });
  }
}

void SchedulerCore::StopJobLocked(Job& job, Actions* out) {
  std::set<std::string> nodes;
  for (const auto& p : job.info.placement()) {
    if (job.live.count(p.rank())) nodes.insert(p.node_id());
  }
  for (const auto& id : nodes) {
    Node* node = FindNodeLocked(id);
    if (node == nullptr || node->info.agent_address().empty()) continue;
    Action a;
    a.kind = Action::kStop;
    a.job_id = job.info.job_id();
    a.generation = job.info.restart_count();
    a.stop_address = node->info.agent_address();
    out->push_back(std::move(a));
  }
}

void SchedulerCore::StopAfterFailureLocked(Job& job, Actions* out) {
  bool watched = false;
  for (int r : job.live) watched = watched || job.watchers.count(r) > 0;
  if (!watched || options_.abort_notice <= absl::ZeroDuration()) {
    StopJobLocked(job, out);
    return;
  }
  deferred_stops_.emplace(job.info.job_id(), absl::Now() + options_.abort_notice);
}

void SchedulerCore::ReleaseLocked(Job& job) {
  for (const auto& a : job.allocs) {
    auto it = nodes_.find(a.node_id);
    if (it == nodes_.end()) continue;
    AddTo(&it->second.used, a.res, -1);
    for (int g : a.gpus) it->second.used_gpus.erase(g);
  }
  job.allocs.clear();
}

void SchedulerCore::FinishLocked(Job& job, proto::JobState state, const std::string& reason,
                                 int exit_code) {
  kv_.DropJob(job.info.job_id());
  job.info.set_state(state);
  job.info.set_reason(reason);
  job.info.set_exit_code(exit_code);
  job.info.set_end_time_ms(NowMs());
  DROVER_LOG(INFO) << job.info.job_id() << " " << proto::JobState_Name(state) << ": " << reason;
}

void SchedulerCore::FailRanksLocked(Job& job, const std::string& node_id,
                                    const std::vector<int>& ranks, const std::string& error,
                                    Actions* out) {
  for (int rank : ranks) {
    proto::ExitInfo e;
    e.set_rank(rank);
    e.set_node_id(node_id);
    e.set_exit_code(-1);
    e.set_generation(job.info.restart_count());
    e.set_error(error);
    HandleExitLocked(job, e, out);
  }
}

void SchedulerCore::HandleExitLocked(Job& job, const proto::ExitInfo& exit, Actions* out) {
  if (exit.generation() != job.info.restart_count()) return;  // an older generation
  if (!job.live.count(exit.rank())) return;                  // already recorded
  job.live.erase(exit.rank());
  job.info.add_exited_ranks(exit.rank());
  job.info.set_live_processes(static_cast<int>(job.live.size()));
  const bool failed = Failed(exit);
  if (!failed) job.info.add_succeeded_ranks(exit.rank());

  if (job.info.state() == proto::RUNNING && !job.info.restarting()) {
    if (failed) {
      std::string node_ip;
      if (Node* n = FindNodeLocked(exit.node_id())) node_ip = n->info.node_ip();
      *job.info.mutable_root_cause() = exit;
      std::string cause = DescribeFailure(exit, node_ip);
      const auto& spec = job.info.spec();
      if (job.info.restart_count() < spec.max_restarts()) {
        job.info.set_restarting(true);
        job.info.set_reason(absl::StrCat("restarting the gang (", job.info.restart_count() + 1,
                                         " of ", spec.max_restarts(), ") because ", cause));
        DROVER_LOG(INFO) << job.info.job_id() << " " << job.info.reason();
      } else {
        FinishLocked(job, proto::FAILED, cause, ExitCodeOf(exit));
      }
      StopAfterFailureLocked(job, out);
    } else if (job.info.succeeded_ranks_size() == job.info.spec().nproc()) {
      FinishLocked(job, proto::SUCCEEDED,
                   absl::StrCat("all ", job.info.spec().nproc(), " processes exited with code 0"),
                   0);
    }
  }
  if (job.live.empty()) {
    ReleaseLocked(job);
    job.watchers.clear();
    deferred_stops_.erase(job.info.job_id());
    if (job.info.restarting()) {
      job.info.set_restarting(false);
      job.info.set_restart_count(job.info.restart_count() + 1);
      kv_.DropOlderThan(job.info.job_id(), job.info.restart_count());
      job.info.set_state(proto::PENDING);
      job.info.clear_placement();
      TryPlaceLocked(job, out);
    }
  }
  ChangedLocked(job);
}

absl::StatusOr<proto::JobInfo> SchedulerCore::GetJob(const std::string& job_id,
                                                     int64_t after_version,
                                                     absl::Duration wait) {
  absl::MutexLock lock(&mu_);
  Job* job = FindJobLocked(job_id);
  if (job == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("no job '", job_id, "' on this cluster; `drover jobs` lists them"));
  }
  if (after_version > 0 && job->info.version() <= after_version) {
    AwaitJobLocked(*job, absl::Now() + std::min(wait, absl::Seconds(30)),
                   [job, after_version, this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                     return job->info.version() > after_version || stopping_;
                   });
  }
  return job->info;
}

std::vector<proto::JobInfo> SchedulerCore::ListJobs(const proto::ListJobsRequest& req) {
  absl::MutexLock lock(&mu_);
  std::set<int> states(req.states().begin(), req.states().end());
  std::vector<const Job*> all;
  for (const auto& [id, job] : jobs_) {
    if (states.empty() || states.count(job.info.state())) all.push_back(&job);
  }
  std::sort(all.begin(), all.end(), [](const Job* a, const Job* b) { return a->seq > b->seq; });
  std::vector<proto::JobInfo> out;
  for (const Job* j : all) {
    if (req.limit() > 0 && static_cast<int>(out.size()) >= req.limit()) break;
    out.push_back(j->info);
  }
  return out;
}

void SchedulerCore::EndLocked(Job& job, proto::JobState state, const std::string& reason,
                              int exit_code, Actions* out) {
  FinishLocked(job, state, reason, exit_code);
  job.info.set_restarting(false);
  StopJobLocked(job, out);
  if (job.live.empty()) ReleaseLocked(job);
  ChangedLocked(job);
}

void SchedulerCore::TimeOutLocked(Job& job, Actions* out) {
  const absl::Duration limit = absl::Milliseconds(job.info.spec().time_limit_ms());
  EndLocked(job, proto::FAILED,
            absl::StrCat("generation ", job.info.restart_count(),
                         " ran longer than the job's time limit of ",
                         absl::FormatDuration(limit), " (--time-limit); stopped"),
            124, out);
}

absl::StatusOr<proto::JobInfo> SchedulerCore::CancelJob(const std::string& job_id) {
  Actions actions;
  proto::JobInfo result;
  {
    absl::MutexLock lock(&mu_);
    Job* job = FindJobLocked(job_id);
    if (job == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("no job '", job_id, "' on this cluster; `drover jobs` lists them"));
    }
    if (!IsTerminal(job->info.state())) {
      EndLocked(*job, proto::CANCELLED, "cancelled by user", 130, &actions);
      ScheduleLocked(&actions);
    } else if (!job->live.empty()) {
      StopJobLocked(*job, &actions);  // retry: make sure nothing survives
    }
    result = job->info;
  }
  Dispatch(std::move(actions));
  return result;
}

proto::GetClusterStatusReply SchedulerCore::ClusterStatus() {
  absl::MutexLock lock(&mu_);
  proto::GetClusterStatusReply reply;
  std::vector<const Node*> nodes;
  for (const auto& [id, n] : nodes_) nodes.push_back(&n);
  std::sort(nodes.begin(), nodes.end(),
            [](const Node* a, const Node* b) { return a->order < b->order; });
  for (const Node* n : nodes) *reply.add_nodes() = NodeViewLocked(*n);
  for (int s = proto::JobState_MIN; s <= proto::JobState_MAX; ++s) {
    (*reply.mutable_job_counts())[proto::JobState_Name(static_cast<proto::JobState>(s))] = 0;
  }
  for (const auto& [id, j] : jobs_) {
    (*reply.mutable_job_counts())[proto::JobState_Name(j.info.state())]++;
  }
  reply.set_state_backend(store_->Describe());
  reply.set_address(address_);
  return reply;
}

proto::NodeInfo SchedulerCore::NodeViewLocked(const Node& n) {
  proto::NodeInfo info = n.info;
  *info.mutable_free() = Minus(n.info.total(), n.used);
  info.clear_free_gpu_ids();
  for (int g : n.gpu_ids) {
    if (!n.used_gpus.count(g)) info.add_free_gpu_ids(g);
  }
  info.set_last_heartbeat_ms(absl::ToUnixMillis(n.last_heartbeat));
  return info;
}

SchedulerCore::Node* SchedulerCore::FindNodeLocked(const std::string& id) {
  auto it = nodes_.find(id);
  return it == nodes_.end() ? nullptr : &it->second;
}

SchedulerCore::Job* SchedulerCore::FindJobLocked(const std::string& id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

void SchedulerCore::ChangedLocked(Job& job) {
  job.info.set_version(job.info.version() + 1);
  job.changed->SignalAll();
  PersistLocked(job);
}

void SchedulerCore::SignalJobLocked(const std::string& job_id) {
  if (Job* job = FindJobLocked(job_id)) job->changed->SignalAll();
}

void SchedulerCore::PersistLocked(const Job& job) {
  absl::Status s = store_->PutJob(job.info);
  if (!s.ok()) {
    DROVER_LOG(WARNING) << "could not persist " << job.info.job_id() << " (will retry): " << s;
    dirty_.insert(job.info.job_id());
  }
}

// ---------------------------------------------------------------------------
// Object directory

absl::Status SchedulerCore::AddObjectLocations(const proto::AddObjectLocationsRequest& req) {
  absl::MutexLock lock(&mu_);
  Node* node = FindNodeLocked(req.node_id());
  if (node == nullptr || node->info.state() != proto::ALIVE) {
    return absl::FailedPreconditionError(absl::StrCat(
        "AddObjectLocations: node ", req.node_id(),
        node == nullptr ? " is not registered" : " is not ALIVE",
        "; the agent must register again before reporting objects"));
  }
  for (const auto& o : req.objects()) objects_.Add(req.node_id(), o.object_id(), o.size());
  return absl::OkStatus();
}

void SchedulerCore::RemoveObjectLocations(const proto::RemoveObjectLocationsRequest& req) {
  absl::MutexLock lock(&mu_);
  for (const auto& id : req.object_ids()) objects_.Remove(req.node_id(), id);
}

proto::GetObjectLocationsReply SchedulerCore::GetObjectLocations(const std::string& object_id) {
  proto::GetObjectLocationsReply reply;
  absl::MutexLock lock(&mu_);
  for (const auto& h : objects_.Holders(object_id)) {
    Node* node = FindNodeLocked(h.node_id);
    if (node == nullptr || node->info.state() != proto::ALIVE) continue;
    auto* loc = reply.add_locations();
    loc->set_node_id(h.node_id);
    loc->set_agent_address(node->info.agent_address());
    loc->set_size(h.size);
  }
  return reply;
}

// ---------------------------------------------------------------------------
// Rendezvous KV

absl::Status SchedulerCore::CheckKvScopeLocked(const proto::KvScope& scope) {
  Job* job = FindJobLocked(scope.job_id());
  if (job == nullptr) {
    return absl::NotFoundError(absl::StrCat("KV: no job '", scope.job_id(), "'"));
  }
  if (IsTerminal(job->info.state()) || job->info.restart_count() != scope.generation()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "KV: job ", scope.job_id(), " is not running generation ", scope.generation(),
        " (state ", proto::JobState_Name(job->info.state()), ", generation ",
        job->info.restart_count(), "); a restarted process must use its own "
        "TORCHELASTIC_RESTART_COUNT"));
  }
  return absl::OkStatus();
}

absl::Status SchedulerCore::KvSet(const proto::KvSetRequest& req) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckKvScopeLocked(req.scope()); !s.ok()) return s;
  absl::Status s =
      kv_.Set({req.scope().job_id(), req.scope().generation()}, req.key(), req.value());
  if (s.ok()) SignalJobLocked(req.scope().job_id());
  return s;
}

absl::StatusOr<proto::KvGetReply> SchedulerCore::KvGet(const proto::KvGetRequest& req,
                                                       absl::Duration wait) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckKvScopeLocked(req.scope()); !s.ok()) return s;
  const JobKv::Scope scope{req.scope().job_id(), req.scope().generation()};
  proto::KvGetReply reply;
  std::optional<std::string> value = kv_.Get(scope, req.key());
  if (!value && wait > absl::ZeroDuration()) {
    bool scope_ended = false;
    auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (stopping_ || !CheckKvScopeLocked(req.scope()).ok()) {
        scope_ended = true;
        return true;
      }
      value = kv_.Get(scope, req.key());
      return value.has_value();
    };
    // The scope was checked above: its job exists.
    AwaitJobLocked(*FindJobLocked(scope.first),
                   absl::Now() + std::min(wait, absl::Minutes(5)), ready);
    if (scope_ended) {
      return absl::AbortedError(absl::StrCat("KV: job ", scope.first, " generation ",
                                             scope.second, " ended while waiting for '",
                                             req.key(), "'"));
    }
    if (!value) {
      return absl::DeadlineExceededError(absl::StrCat(
          "KV: key '", req.key(), "' of job ", scope.first, " did not appear within ",
          absl::FormatDuration(wait), "; did every rank reach the rendezvous?"));
    }
  }
  reply.set_found(value.has_value());
  if (value) reply.set_value(*value);
  return reply;
}

absl::StatusOr<proto::KvCompareAndSetReply> SchedulerCore::KvCompareAndSet(
    const proto::KvCompareAndSetRequest& req) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckKvScopeLocked(req.scope()); !s.ok()) return s;
  std::optional<std::string> expected;
  if (!req.expect_absent()) expected = req.expected();
  std::optional<std::string> current;
  auto swapped = kv_.CompareAndSet({req.scope().job_id(), req.scope().generation()}, req.key(),
                                   expected, req.desired(), &current);
  if (!swapped.ok()) return swapped.status();
  if (*swapped) SignalJobLocked(req.scope().job_id());
  proto::KvCompareAndSetReply reply;
  reply.set_swapped(*swapped);
  reply.set_found(current.has_value());
  if (current) reply.set_current(*current);
  return reply;
}

absl::StatusOr<proto::KvAddReply> SchedulerCore::KvAdd(const proto::KvAddRequest& req) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckKvScopeLocked(req.scope()); !s.ok()) return s;
  auto sum = kv_.Add({req.scope().job_id(), req.scope().generation()}, req.key(), req.delta(),
                     req.request_id());
  if (!sum.ok()) return sum.status();
  SignalJobLocked(req.scope().job_id());
  proto::KvAddReply reply;
  reply.set_value(*sum);
  return reply;
}

// ---------------------------------------------------------------------------
// Generation watch

std::optional<proto::WatchGenerationReply> SchedulerCore::GenerationEndLocked(const Job& job,
                                                                              int generation) {
  proto::WatchGenerationReply reply;
  const auto& cause = job.info.root_cause();
  if (job.info.has_root_cause() && cause.generation() == generation &&
      (job.info.restarting() || job.info.state() == proto::FAILED ||
       job.info.restart_count() > generation)) {
    reply.set_ended(true);
    *reply.mutable_failure() = cause;
    std::string node_ip;
    if (auto it = nodes_.find(cause.node_id()); it != nodes_.end()) {
      node_ip = it->second.info.node_ip();
    }
    reply.set_description(DescribeFailure(cause, node_ip, /*with_stderr=*/false));
    return reply;
  }
  if (IsTerminal(job.info.state())) {
    reply.set_ended(true);
    reply.set_description(absl::StrCat("job ", job.info.job_id(), " ended (",
                                       proto::JobState_Name(job.info.state()), ": ",
                                       job.info.reason(), ")"));
    return reply;
  }
  if (job.info.restart_count() != generation) {
    reply.set_ended(true);
    reply.set_description(absl::StrCat("job ", job.info.job_id(), " moved on to generation ",
                                       job.info.restart_count()));
    return reply;
  }
  return std::nullopt;
}

absl::StatusOr<proto::WatchGenerationReply> SchedulerCore::WatchGeneration(
    const proto::WatchGenerationRequest& req, absl::Duration wait) {
  absl::MutexLock lock(&mu_);
  const std::string& job_id = req.scope().job_id();
  const int generation = req.scope().generation();
  Job* job = FindJobLocked(job_id);
  if (job == nullptr) {
    return absl::NotFoundError(absl::StrCat("WatchGeneration: no job '", job_id, "'"));
  }
  if (generation > job->info.restart_count()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WatchGeneration: job ", job_id, " has not reached generation ", generation,
        " (it runs generation ", job->info.restart_count(), ")"));
  }
  if (generation == job->info.restart_count() && job->live.count(req.rank())) {
    job->watchers.insert(req.rank());
  }
  std::optional<proto::WatchGenerationReply> reply;
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (stopping_) return true;
    Job* j = FindJobLocked(job_id);
    if (j == nullptr) return true;
    reply = GenerationEndLocked(*j, generation);
    return reply.has_value();
  };
  if (wait > absl::ZeroDuration()) {
    AwaitJobLocked(*job, absl::Now() + std::min(wait, absl::Seconds(60)), done);
  } else {
    done();
  }
  if (!reply) return proto::WatchGenerationReply();  // still running
  return *reply;
}

}  // namespace drover
