#include "scheduler/scheduler_core.h"

#include <algorithm>

#include "absl/random/random.h"
#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "scheduler/generation.h"
#include "scheduler/placement.h"

namespace drover {
namespace {

// A short random tag for the job ids of one scheduler lifetime: 4 characters of an
// alphabet without look-alikes (no 0/o, 1/l/i), ~920,000 values.
std::string NewJobTag() {
  static constexpr char kAlphabet[] = "23456789abcdefghjkmnpqrstuvwxyz";
  absl::BitGen gen;
  std::string tag;
  for (int i = 0; i < 4; ++i) {
    tag.push_back(kAlphabet[absl::Uniform<size_t>(gen, 0, sizeof(kAlphabet) - 1)]);
  }
  return tag;
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
      clock_(options_.clock),
      store_(std::move(store)),
      agents_(std::move(agents)),
      persister_(store_.get(), clock_, options_.test_store_delay),
      job_tag_(NewJobTag()),
      objects_(clock_),
      kv_(clock_),
      sessions_(options_.session_grace),
      book_(MakeBook(this)),
      outbound_(std::make_unique<ThreadPool>(4)) {}

SchedulerCore::~SchedulerCore() { Stop(); }

absl::Status SchedulerCore::Start() {
  DROVER_ASSIGN_OR_RETURN(std::vector<proto::JobInfo> loaded, store_->LoadJobs());
  DROVER_RETURN_IF_ERROR(persister_.Start({"job", "node"}));
  absl::MutexLock lock(&mu_);
  BookScope book(this);  // nobody leases yet: one scope for the whole load
  std::sort(loaded.begin(), loaded.end(), [](const auto& a, const auto& b) {
    return JobNumber(a.job_id()) < JobNumber(b.job_id());
  });
  absl::Time now = clock_->Now();
  for (auto& info : loaded) {
    Job& job = jobs_[info.job_id()];
    job.info = std::move(info);
    job.seq = next_seq_++;
    by_seq_.push_back(&job);
    if (!job.info.spec().idempotency_key().empty()) {
      idempotency_[job.info.spec().idempotency_key()] = &job;
    }
    if (job.info.driver() && !IsTerminal(job.info.state())) {
      // Its driver (and its connections to its leased workers and actors) may well
      // have outlived the scheduler: it opens its session again, or the job fails.
      driver_reconnects_[job.info.job_id()] = {now + options_.driver_reconnect, true};
      IndexLocked(job);
      continue;
    }
    if (job.info.live_processes() == 0 && job.info.state() != proto::RUNNING) {
      IndexLocked(job);
      continue;
    }
    // Reattach: the processes of the current generation may still run on their nodes.
    std::set<int> exited(job.info.exited_ranks().begin(), job.info.exited_ranks().end());
    for (const auto& p : job.info.placement()) {
      Node& node = nodes_[p.node_id()];
      if (node.info.node_id().empty()) {
        node.info.set_node_id(p.node_id());
        node.last_heartbeat = now;
        table_.Set(p.node_id(), p.node_ip(), proto::Resources(), {},
                   static_cast<int64_t>(nodes_.size()));
        SetNodeStateLocked(node, proto::RECONNECTING,
                           "known from a running job; waiting for its agent to re-register");
      }
      Allocation a;
      a.node_id = p.node_id();
      a.res = job.info.spec().per_process();
      a.gpus.assign(p.gpu_ids().begin(), p.gpu_ids().end());
      table_.Use(a.node_id, a.res, a.gpus, +1);
      job.allocs.push_back(std::move(a));
      if (!exited.count(p.rank())) job.live.insert(p.rank());
    }
    job.info.set_live_processes(static_cast<int>(job.live.size()));
    ++job.allocs_gen;
    // The placement is stored before a start is sent (Dispatch), the start's answer
    // after: none recorded means the start may never have gone out.
    const bool starting = job.info.state() == proto::RUNNING && !job.info.restarting() &&
                          job.info.exited_ranks_size() == 0 && job.info.placement_size() > 0;
    job.start_unconfirmed = starting && job.info.started_processes() == 0;
    if (starting && !job.start_unconfirmed && job.info.master_port() > 0 &&
        job.info.placement_epoch() != 0) {
      // The record names the nodes whose start was answered: every other one is
      // unconfirmed, whatever order the answers came in (starts sent again after an
      // earlier restart are answered in any order).
      const auto& started = job.info.started_nodes();
      for (const auto& p : job.info.placement()) {
        if (std::find(started.begin(), started.end(), p.node_id()) == started.end()) {
          job.starts().unconfirmed_nodes.insert(p.node_id());
        }
      }
    } else if (starting && !job.start_unconfirmed && job.info.master_port() > 0) {
      // A record from before placement epochs: nodes are started in the order of the
      // placement, and started_processes counts the ranks of those that answered, so
      // the confirmed ones are taken as a prefix.
      std::vector<std::string> order;
      std::map<std::string, int> ranks;
      for (const auto& p : job.info.placement()) {
        if (ranks[p.node_id()]++ == 0) order.push_back(p.node_id());
      }
      int confirmed = job.info.started_processes();
      for (const std::string& id : order) {
        if (confirmed >= ranks[id]) {
          confirmed -= ranks[id];
        } else {
          confirmed = 0;
          job.starts().unconfirmed_nodes.insert(id);
        }
      }
    }
    if (!IsTerminal(job.info.state()) && job.info.spec().time_limit_ms() > 0) {
      time_limited_.insert(job.info.job_id());
    }
    IndexLocked(job);
  }
  DROVER_LOG(INFO) << "loaded " << jobs_.size() << " jobs from " << store_->Describe()
                   << "; new job ids are job-" << job_tag_ << "-N";
  monitor_ = std::thread([this, now] { MonitorLoop(now); });
  return absl::OkStatus();
}

void SchedulerCore::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    for (auto& [id, job] : jobs_) {
      if (job.changed != nullptr) job.changed->SignalAll();
    }
    monitor_wake_.SignalAll();
    sessions_.Stop();
  }
  // Their waits end (the lock order allows them under mu_, but none needs it).
  objects_.Stop();
  kv_.Stop();
  if (monitor_.joinable()) monitor_.join();
  // Launches still waiting for their placement to be stored are not sent.
  persister_.CancelWaits();
  {
    // Calls in flight end within their deadline; their reactions use the pool.
    absl::MutexLock lock(&calls_mu_);
    calls_closed_ = true;
    calls_mu_.Await(absl::Condition(
        +[](int64_t* in_flight) { return *in_flight == 0; }, &calls_in_flight_));
  }
  outbound_.reset();
  persister_.Stop(/*grace=*/absl::Seconds(2));
}

void SchedulerCore::SetAddress(const std::string& address) {
  absl::MutexLock lock(&mu_);
  BookScope book(this);
  address_ = address;
}

void SchedulerCore::RunWithLockHeldForTest(absl::FunctionRef<void()> f) {
  absl::MutexLock lock(&mu_);
  f();
}

// ---------------------------------------------------------------------------
// Nodes

absl::StatusOr<proto::RegisterNodeReply> SchedulerCore::RegisterNode(
    const proto::RegisterNodeRequest& req) {
  if (req.agent_address().empty() || req.node_ip().empty()) {
    return absl::InvalidArgumentError("RegisterNode needs agent_address and node_ip");
  }
  if (std::string bad = ValidateNodeOffer(req.total(), req.gpu_ids()); !bad.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("RegisterNode: ", bad));
  }
  Actions actions;
  proto::RegisterNodeReply reply;
  for (bool waited_for_ids = false;; waited_for_ids = true) {
    if (waited_for_ids) {
      // No id was reserved (a slow store): wait for some without the lock.
      DROVER_RETURN_IF_ERROR(persister_.WaitForIds("node", options_.durable_wait));
    }
    absl::MutexLock lock(&mu_);
    std::string id = req.node_id();
    while (id.empty() || (req.node_id().empty() && nodes_.count(id))) {
      std::optional<int64_t> n = persister_.TakeId("node");
      if (!n) break;
      id = absl::StrCat("node-", *n);
    }
    if (id.empty() || (req.node_id().empty() && nodes_.count(id))) continue;
    bool known = nodes_.count(id) > 0;
    Node& node = nodes_[id];
    bool reattach = known && node.info.state() == proto::RECONNECTING;
    node.info.set_node_id(id);
    node.info.set_agent_address(req.agent_address());
    node.info.set_hostname(req.hostname());
    node.info.mutable_gpu_names()->CopyFrom(req.gpu_names());
    node.info.mutable_warnings()->CopyFrom(req.warnings());
    node.info.set_metrics_address(req.metrics_address());
    {
      BookScope book(this);
      const NodeUse* placed = table_.Find(id);
      const int64_t order = known && placed != nullptr ? placed->order
                                                       : static_cast<int64_t>(nodes_.size());
      table_.Set(id, req.node_ip(), req.total(),
                 std::vector<int>(req.gpu_ids().begin(), req.gpu_ids().end()), order);
      agent_addresses_[id] = req.agent_address();
    }
    // The leases its workers serve are booked before the node is ALIVE: no job placed
    // by the pass below and no lease granted meanwhile (grants take only book_mu_) may
    // take what they hold.
    AdoptLeasesLocked(id, req);
    {
      BookScope book(this);
      SetNodeStateLocked(node, proto::ALIVE, "");
    }
    // Its room may fit lease requests that wait (after a scheduler restart, drivers
    // ask before their nodes are back): the lease manager runs a pass.
    freed_ = true;
    notes_pending_ = true;
    node.last_heartbeat = clock_->Now();
    node.registration = std::max(node.registration + 1, absl::ToUnixMicros(node.last_heartbeat));
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
    reply.set_registration(node.registration);
    reply.set_heartbeat_interval_ms(absl::ToInt64Milliseconds(options_.heartbeat_interval));
    break;
  }
  Dispatch(std::move(actions));
  return reply;
}

void SchedulerCore::DeclareDeadLocked(Node& node, const std::string& reason, Actions* out) {
  DROVER_LOG(WARNING) << "node " << node.info.node_id() << " declared dead: " << reason;
  notes_pending_ = true;
  // Its object store is unreachable too: nobody should try to pull from it.
  SetNodeStateLocked(node, proto::DEAD, reason);
  dead_nodes_.emplace_back(node.info.node_id(), reason);
  sessions_.Forget(node.info.node_id());  // a later close of its session means nothing
  for (Job* job : RunningJobsLocked()) {
    std::vector<int> lost;
    for (const auto& p : job->info.placement()) {
      if (p.node_id() == node.info.node_id() && job->live.count(p.rank())) lost.push_back(p.rank());
    }
    FailRanksLocked(*job, node.info.node_id(), lost,
                    absl::StrCat("was lost: its node was declared dead (", reason, ")"), out);
    if (job->start_unconfirmed && job->info.placement(0).node_id() == node.info.node_id()) {
      ResolveStartLocked(*job, /*started=*/true, out);
    }
  }
}

void SchedulerCore::SetNodeStateLocked(Node& node, proto::NodeState state,
                                       const std::string& reason) {
  const std::string& id = node.info.node_id();
  node.info.set_state(state);
  node.info.set_reason(reason);
  {
    BookScope book(this);
    table_.SetAlive(id, state == proto::ALIVE);
    agent_addresses_[id] = node.info.agent_address();
  }
  if (state == proto::ALIVE) {
    objects_.NodeUp(id, node.info.agent_address());
  } else {
    objects_.NodeDown(id);
  }
  PublishNodeLocked(node);
}

void SchedulerCore::PublishNodeLocked(const Node& node) {
  proto::DriverNodeState n;
  n.set_node_id(node.info.node_id());
  n.set_alive(node.info.state() == proto::ALIVE);
  if (!n.alive()) n.set_reason(node.info.reason());
  n.set_agent_address(node.info.agent_address());
  n.set_store_restarts(node.info.object_store().restarts());
  n.set_store_last_restart_ms(node.info.object_store().last_restart_ms());
  node_feed_.Publish(n);
}

void SchedulerCore::MonitorLoop(absl::Time started) {
  const absl::Duration tick =
      std::min(absl::Milliseconds(200), options_.node_timeout / 4);
  // From the time Start() ran, not the time this thread got going: a test that moves a
  // fake clock right after Start() must not find the first pass scheduled after it.
  absl::Time wake = started + tick;
  for (;;) {
    Actions actions;
    {
      absl::MutexLock lock(&mu_);
      // A closed session signals monitor_wake_: its loss may fall due before `wake`
      // (the pass then runs early, which is harmless).
      RequireNoBookScopeLocked("the monitor's wait on mu_");
      while (!stopping_ && !clock_->WaitWithDeadline(&monitor_wake_, &mu_,
                                                     std::min(wake, sessions_.NextDue()))) {
      }
      if (stopping_) return;
      const absl::Time now = clock_->Now();
      ForgiveStallLocked(now, now - wake);
      wake = now + tick;
      ExpireAgentSessionsLocked(now, &actions);
      ExpireDriverReconnectsLocked(now);
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
              absl::StrCat("no heartbeat from ", id, " (", NodeIpLocked(id), ") for ",
                           absl::FormatDuration(absl::Trunc(silent, absl::Milliseconds(100))),
                           "; the node timeout is ",
                           absl::FormatDuration(options_.node_timeout)),
              &actions);
        } else {
          // The next pass comes no later than the moment this node's silence passes the
          // timeout: a pass that fell at exactly the timeout would otherwise leave the
          // node alive for a whole tick more (and, on a fake clock moved just past the
          // timeout, for ever).
          wake = std::min(wake, node.last_heartbeat + options_.node_timeout + absl::Nanoseconds(1));
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
        const bool running = job->info.state() == proto::RUNNING && !job->info.restarting();
        if (!running || deadline >= now) {
          // Past the limit means after it (as for the node timeout), and the next pass
          // comes then, not a tick after a pass at exactly the limit.
          if (running) wake = std::min(wake, deadline + absl::Nanoseconds(1));
          ++it;
          continue;
        }
        TimeOutLocked(*job, &actions);
        it = time_limited_.erase(it);
      }
      // Time moved: backfill by time limit and the waiting jobs' reasons depend on it.
      queue_.Invalidate();
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
  auto check = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    // Reject at once what could never fit on the nodes that exist.
    BookScope book(this);
    if (!table_.Total().empty()) {
      const PlacementResult& never = queue_.Whole(spec, table_);
      if (!never.ok) {
        // A node that is down now (restarting, cut off) may be the one it needs: saying
        // "never" would send the user to change a job that only has to wait.
        std::vector<std::string> down;
        for (const auto& [id, node] : nodes_) {
          if (node.info.state() != proto::ALIVE) {
            down.push_back(absl::StrCat(id, " (", proto::NodeState_Name(node.info.state()),
                                        node.info.reason().empty() ? "" : ": ",
                                        node.info.reason(), ")"));
          }
        }
        if (!down.empty()) {
          return absl::FailedPreconditionError(absl::StrCat(
              "this job cannot run on the nodes alive now: ", never.reason,
              " (counting every alive node's total, not just what is free); ", down.size(),
              " known node(s) are down and not counted: ", absl::StrJoin(down, ", "),
              "; submit again once they are back (`drover status` shows them), or ask for "
              "less"));
        }
        return absl::FailedPreconditionError(absl::StrCat(
            "this job can never run on this cluster: ", never.reason,
            " (counting every alive node's total, not just what is free); ask for less, "
            "or add nodes that have it"));
      }
    }
    return absl::OkStatus();
  };
  auto fill = [&](Job& job, Actions* actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    *job.info.mutable_spec() = spec;
    if (job.info.spec().name().empty()) job.info.mutable_spec()->set_name(spec.command(0));
    job.info.set_state(proto::PENDING);
    job.info.set_reason("waiting to be placed");
    DROVER_LOG(INFO) << "submitted " << job.info.job_id() << ": " << spec.nproc() << " x "
                     << absl::StrJoin(spec.command(), " ");
    ChangedLocked(job);
    ScheduleLocked(actions);
  };
  return CreateJob(spec.idempotency_key(), check, fill);
}

absl::StatusOr<proto::JobInfo> SchedulerCore::CreateJob(
    const std::string& idempotency_key, const std::function<absl::Status()>& check,
    const std::function<void(Job&, Actions*)>& fill) {
  Actions actions;
  proto::JobInfo result;
  for (bool waited_for_ids = false;; waited_for_ids = true) {
    {
      absl::MutexLock lock(&mu_);
      if (!idempotency_key.empty()) {
        auto it = idempotency_.find(idempotency_key);
        if (it != idempotency_.end()) {
          result = it->second->info;  // a retry: answer as the first call would
          break;
        }
      }
      DROVER_RETURN_IF_ERROR(check());
      // A store that is down: refuse now rather than run what cannot be saved.
      DROVER_RETURN_IF_ERROR(persister_.Health());
      if (std::optional<int64_t> n = persister_.TakeId("job")) {
        std::string id = absl::StrCat("job-", job_tag_, "-", *n);
        Job& job = jobs_[id];
        job.seq = next_seq_++;
        by_seq_.push_back(&job);
        job.info.set_job_id(id);
        job.info.set_submit_time_ms(absl::ToUnixMillis(clock_->Now()));
        if (!idempotency_key.empty()) idempotency_[idempotency_key] = &job;
        NoteLocked(job, TimelineEventOf(proto::TIMELINE_SUBMITTED, 0));
        fill(job, &actions);
        result = job.info;
        break;
      }
    }
    // Every reserved id is taken (the store is slower than the submissions): wait for
    // more without the lock, then start over (a retry may have created the job meanwhile).
    if (waited_for_ids) return absl::UnavailableError("no job id could be reserved; retry");
    DROVER_RETURN_IF_ERROR(persister_.WaitForIds("job", options_.durable_wait));
  }
  Dispatch(std::move(actions));
  // The job stands and runs even if its record is not saved in time: the answer says
  // so, and names the job (a status payload the RPC carries), so that no one submits
  // it anew (that would run it twice).
  absl::Status durable = AwaitDurable(
      result.job_id(), "was accepted and will run",
      "it is forgotten only if the scheduler restarts before it is saved. Do not submit it "
      "anew: that would run it twice; a retry with the same request id (idempotency key) "
      "returns this job, never a second one");
  if (!durable.ok()) {
    durable.SetPayload(kAcceptedJobPayload, absl::Cord(result.job_id()));
    return durable;
  }
  return result;
}

absl::Status SchedulerCore::AwaitDurable(const std::string& job_id, const std::string& what,
                                         const std::string& then) {
  absl::Status s = persister_.AwaitStored(job_id, options_.durable_wait);
  if (s.ok()) return s;
  return absl::UnavailableError(absl::StrCat(job_id, " ", what, ", but ", s.message(), "; ",
                                             then));
}

void SchedulerCore::ScheduleLocked(Actions* out) {
  JobQueue::Callbacks cb;
  cb.start = [this, out](const QueuedJob& q, std::vector<proto::RankPlacement> ranks)
                 ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                   Job& job = *static_cast<Job*>(q.ref);
                   job.queued = false;  // the queue let it go
                   StartJobLocked(job, std::move(ranks), out);
                 };
  cb.wait = [this](const QueuedJob& q, const std::string& reason)
                ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                  Job& job = *static_cast<Job*>(q.ref);
                  if (job.info.reason() == reason) return;
                  job.info.set_reason(reason);
                  ChangedLocked(job);
                };
  {
    // One scope for the whole pass: leases wait for it, and see its starts and claim
    // together.
    BookScope book(this);
    queue_.Plan(table_, clock_->Now(), cb);
    if (queue_.passes() != claim_pass_) {
      claim_pass_ = queue_.passes();
      claim_ = queue_.claim();
    }
  }
  if (queue_.claim().job_id != claim_told_) {
    // Leases on what the claim needs are asked back (lease_manager.h).
    claim_told_ = queue_.claim().job_id;
    claim_changed_ = !claim_told_.empty();
    notes_pending_ = true;
  }
  TakeNotesLocked(&out->notes);
}

void SchedulerCore::IndexLocked(Job& job) {
  const proto::JobState state = job.info.state();
  const bool pending = state == proto::PENDING;
  if (pending != job.queued) {
    QueuedJob q{job.info.job_id(), &job.info.spec(), job.info.restart_count(), job.seq, &job};
    if (pending) {
      queue_.Add(q);
    } else {
      queue_.Remove(q);
    }
    job.queued = pending;
  }
  // Its hold on its nodes until it ends at the latest (the queue's claims wait for it).
  std::optional<absl::Time> hold;
  if (!job.allocs.empty() && !IsTerminal(state)) {
    hold = absl::InfiniteFuture();
    const int64_t limit_ms = job.info.spec().time_limit_ms();
    if (limit_ms > 0 && state == proto::RUNNING && !job.info.restarting()) {
      hold = absl::FromUnixMillis(job.info.generation_start_ms()) + absl::Milliseconds(limit_ms);
    }
  }
  if (hold != job.hold || (hold && job.hold_allocs != job.allocs_gen)) {
    auto nodes = [](const std::vector<Allocation>& allocs) {
      std::vector<std::string> ids;
      for (const Allocation& a : allocs) ids.push_back(a.node_id);
      return ids;
    };
    BookScope book(this);
    if (job.hold) table_.Hold(job.hold_nodes, *job.hold, -1);
    job.hold_nodes = hold ? nodes(job.allocs) : std::vector<std::string>();
    if (hold) table_.Hold(job.hold_nodes, *hold, +1);
    job.hold = hold;
    job.hold_allocs = job.allocs_gen;
  }
  if (job.live.empty()) {
    running_.erase(job.info.job_id());
  } else {
    running_.insert(job.info.job_id());
  }
  // Whether it runs, as leases ask (CheckJobRunning): from when it leaves PENDING (no
  // process of a job that never started can ask; an entry per queued job would cost
  // ~100 bytes each), and ends once.
  const int8_t booked = IsTerminal(state) ? 1 : state == proto::PENDING ? -1 : 0;
  if (booked > job.booked) {
    BookScope book(this);
    JobEnd& end = job_ends_[job.info.job_id()];
    if (booked == 1) {
      end.state = state;
      end.reason = job.info.reason();
    }
    job.booked = booked;
  }
  if (job.counted_state != state) {
    if (job.counted_state >= 0) --state_counts_[job.counted_state];
    ++state_counts_[state];
    job.counted_state = state;
  }
  // The rendezvous KV accepts the running generation only, drops the others and forgets
  // the job when it ends (it ignores a queued job that never ran, and what it knows).
  // WatchGeneration waits on it too: `failing` is the one more fact GenerationEnd reads.
  const bool failing = job.info.has_root_cause() &&
                       job.info.root_cause().generation() == job.info.restart_count() &&
                       job.info.restarting();
  kv_.JobChanged(job.info.job_id(), state, job.info.restart_count(), failing);
}

std::vector<SchedulerCore::Job*> SchedulerCore::RunningJobsLocked() {
  std::vector<Job*> jobs;
  jobs.reserve(running_.size());
  for (const std::string& id : running_) jobs.push_back(&jobs_[id]);
  return jobs;
}

void SchedulerCore::StartJobLocked(Job& job, std::vector<proto::RankPlacement> ranks,
                                   Actions* out) {
  const auto& per = job.info.spec().per_process();
  job.info.clear_placement();
  job.info.clear_exited_ranks();
  job.info.clear_succeeded_ranks();
  job.live.clear();
  // Launches of an earlier placement are dropped when they come up.
  job.asking_port = false;
  if (job.start_sets != nullptr) {
    job.start_sets->unsent.clear();
    job.start_sets->awaiting_port.clear();
  }
  job.allocs.clear();
  ++job.allocs_gen;
  std::vector<std::string> node_order;
  BookScope book(this);  // nests in the pass's
  for (auto& p : ranks) {
    Allocation a{p.node_id(), per, std::vector<int>(p.gpu_ids().begin(), p.gpu_ids().end())};
    table_.Use(a.node_id, a.res, a.gpus, +1);
    job.allocs.push_back(std::move(a));
    job.live.insert(p.rank());
    if (std::find(node_order.begin(), node_order.end(), p.node_id()) == node_order.end()) {
      node_order.push_back(p.node_id());
    }
    *job.info.add_placement() = std::move(p);
  }
  const auto& spec = job.info.spec();
  job.info.set_state(proto::RUNNING);
  job.info.set_master_addr(job.info.placement(0).node_ip());
  job.info.set_master_port(0);
  job.info.set_started_processes(0);
  job.info.clear_started_nodes();
  // Unique among this job's placements that ever sent a start: the record holding the
  // last epoch is stored before any start of it goes out (Dispatch), so a scheduler
  // restarted from the store counts on from at least every epoch sent; an epoch it
  // reuses was never stored, so no start carried it.
  job.info.set_placement_epoch(job.info.placement_epoch() + 1);
  job.info.set_live_processes(static_cast<int>(job.live.size()));
  job.info.clear_root_cause();
  const int64_t now_ms = absl::ToUnixMillis(clock_->Now());
  if (job.info.start_time_ms() == 0) job.info.set_start_time_ms(now_ms);
  job.info.set_generation_start_ms(now_ms);
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
    proto::StartProcessesRequest req = StartRequestLocked(job, node_id);
    a.ranks.push_back(RanksOf(req));
    NoteLocked(job, TimelineEventOf(proto::TIMELINE_PLACED, a.generation, node_id, a.ranks.back()));
    a.starts.emplace_back(nodes_[node_id].info.agent_address(), std::move(req));
    a.node_ids.push_back(node_id);
  }
  DROVER_LOG(INFO) << "placed " << job.info.job_id() << " generation " << a.generation << " on "
                   << absl::StrJoin(node_order, ",");
  ChangedLocked(job);
  QueueLaunchLocked(job, std::move(a), out);
}

proto::StartProcessesRequest SchedulerCore::StartRequestLocked(const Job& job,
                                                               const std::string& node_id) {
  const auto& spec = job.info.spec();
  proto::StartProcessesRequest req;
  for (const auto& p : job.info.placement()) {
    if (p.node_id() != node_id) continue;
    auto* proc = req.add_processes();
    proc->set_rank(p.rank());
    proc->set_local_rank(p.local_rank());
    proc->mutable_gpu_ids()->CopyFrom(p.gpu_ids());
    req.set_group_rank(p.group_rank());
  }
  req.set_node_registration(nodes_[node_id].registration);
  req.set_job_id(job.info.job_id());
  req.set_generation(job.info.restart_count());
  req.set_placement_epoch(job.info.placement_epoch());
  req.mutable_command()->CopyFrom(spec.command());
  req.mutable_env()->insert(spec.env().begin(), spec.env().end());
  req.set_cwd(spec.cwd());
  req.set_world_size(spec.nproc());
  req.set_local_world_size(req.processes_size());
  req.set_master_addr(job.info.master_addr());
  req.set_max_restarts(spec.max_restarts());
  BookScope book(this);
  req.set_scheduler_address(address_);
  return req;
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
  deferred_stops_.emplace(job.info.job_id(), clock_->Now() + options_.abort_notice);
}

void SchedulerCore::ReleaseLocked(Job& job) {
  if (!job.allocs.empty()) {
    freed_ = true;
    notes_pending_ = true;
  }
  if (!job.allocs.empty()) {
    BookScope book(this);
    for (const auto& a : job.allocs) table_.Use(a.node_id, a.res, a.gpus, -1);
  }
  job.allocs.clear();
  ++job.allocs_gen;
}

void SchedulerCore::FinishLocked(Job& job, proto::JobState state, const std::string& reason,
                                 int exit_code) {
  ended_jobs_.push_back(job.info.job_id());
  notes_pending_ = true;
  job.info.set_state(state);
  job.info.set_reason(reason);
  job.info.set_exit_code(exit_code);
  job.info.set_end_time_ms(absl::ToUnixMillis(clock_->Now()));
  NoteLocked(job, JobEndEvent(state, job.info.restart_count(), reason));
  DROVER_LOG(INFO) << job.info.job_id() << " " << proto::JobState_Name(state) << ": " << reason;
}

void SchedulerCore::FailLaunchLocked(Job& job, const Action& a, size_t i, const absl::Status& why,
                                     Actions* out) {
  if (i >= a.starts.size()) return;
  FailRanksLocked(job, a.node_ids[i], a.ranks[i],
                  absl::StrCat("could not be started: ", why.message()), out);
  // The nodes after it are never asked (they would need the master's port): their
  // ranks end here, else they stay "live" forever, the job never ends (or ends FAILED
  // with live processes) and their resources are never freed.
  for (size_t k = i + 1; k < a.starts.size(); ++k) {
    FailRanksLocked(job, a.node_ids[k], a.ranks[k],
                    absl::StrCat("was not started: the start on ", a.node_ids[i],
                                 " failed before (", why.message(), ")"),
                    out);
  }
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

bool SchedulerCore::OfAnotherPlacement(const Job& job, int generation, int64_t epoch) {
  return generation == job.info.restart_count() && epoch != 0 &&
         job.info.placement_epoch() != 0 && epoch != job.info.placement_epoch();
}

void SchedulerCore::HandleExitLocked(Job& job, const proto::ExitInfo& exit, Actions* out) {
  if (exit.generation() != job.info.restart_count()) return;  // an older generation
  if (OfAnotherPlacement(job, exit.generation(), exit.placement_epoch())) {
    // Another placement of this generation: its rank is not the current placement's.
    DROVER_LOG(WARNING) << job.info.job_id() << " generation " << exit.generation()
                        << " rank " << exit.rank() << " on " << exit.node_id()
                        << ": exit of placement epoch " << exit.placement_epoch()
                        << ", not the current " << job.info.placement_epoch() << "; ignored";
    return;
  }
  if (!job.live.count(exit.rank())) return;                  // already recorded
  NoteLocked(job, RankExitEvent(exit));
  job.live.erase(exit.rank());
  job.info.add_exited_ranks(exit.rank());
  job.info.set_live_processes(static_cast<int>(job.live.size()));
  const bool failed = Failed(exit);
  if (!failed) job.info.add_succeeded_ranks(exit.rank());

  if (job.info.state() == proto::RUNNING && !job.info.restarting()) {
    if (failed) {
      *job.info.mutable_root_cause() = exit;
      std::string cause = DescribeFailure(exit, NodeIpLocked(exit.node_id()));
      const auto& spec = job.info.spec();
      if (job.info.restart_count() < spec.max_restarts()) {
        job.info.set_restarting(true);
        job.info.set_reason(absl::StrCat("restarting the gang (", job.info.restart_count() + 1,
                                         " of ", spec.max_restarts(), ") because ", cause));
        DROVER_LOG(INFO) << job.info.job_id() << " " << job.info.reason();
        NoteLocked(job, TimelineEventOf(proto::TIMELINE_RESTARTING, exit.generation(),
                                        exit.node_id(), {exit.rank()}, cause));
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
      NoteLocked(job, TimelineEventOf(proto::TIMELINE_REQUEUED, job.info.restart_count()));
      job.info.set_state(proto::PENDING);
      job.info.clear_placement();
      // Placed by the ScheduleLocked that every caller runs next (restarts go first).
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
    AwaitJobLocked(*job, clock_->Now() + std::min(wait, absl::Seconds(30)),
                   [job, after_version, this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                     return job->info.version() > after_version || stopping_;
                   });
  }
  return job->info;
}

std::vector<proto::JobInfo> SchedulerCore::ListJobs(const proto::ListJobsRequest& req) {
  std::set<int> states(req.states().begin(), req.states().end());
  std::vector<proto::JobInfo> out;
  // Batched with the agents' reports: in its turn, however many of them there are.
  RunBatched([&](Actions*) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto it = by_seq_.rbegin(); it != by_seq_.rend(); ++it) {
      if (req.limit() > 0 && static_cast<int>(out.size()) >= req.limit()) break;
      const Job& j = **it;
      if (states.empty() || states.count(j.info.state())) out.push_back(j.info);
    }
  });
  return out;
}

void SchedulerCore::EndLocked(Job& job, proto::JobState state, const std::string& reason,
                              int exit_code, Actions* out) {
  FinishLocked(job, state, reason, exit_code);
  job.info.set_restarting(false);
  if (job.start_sets != nullptr &&
      (!job.start_sets->unsent.empty() || !job.start_sets->awaiting_port.empty())) {
    // Their start waits for the store (down, maybe for long), or for the master's port:
    // it will never be sent (DropStaleLaunchesLocked, ApplyStartLocked), so they end now
    // and free what they hold.
    std::set<int> unsent;
    unsent.swap(job.starts().unsent);
    std::set<std::string> awaiting;
    awaiting.swap(job.starts().awaiting_port);
    for (const auto& p : job.info.placement()) {
      if (unsent.count(p.rank()) == 0 && awaiting.count(p.node_id()) == 0) continue;
      FailRanksLocked(job, p.node_id(), {p.rank()},
                      "was never started: the job ended before its start was sent", out);
    }
  }
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
  DROVER_RETURN_IF_ERROR(AwaitDurable(job_id, "is cancelled",
                                      "the cancellation stands: retrying it is harmless"));
  return result;
}

proto::GetClusterStatusReply SchedulerCore::ClusterStatus() {
  proto::GetClusterStatusReply reply;
  // Batched with the agents' reports: in its turn, however many of them there are.
  RunBatched([&](Actions*) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    BookScope book(this);
    std::vector<std::pair<int64_t, const Node*>> nodes;  // by registration order
    for (const auto& [id, n] : nodes_) {
      const NodeUse* use = table_.Find(id);
      nodes.emplace_back(use == nullptr ? 0 : use->order, &n);
    }
    std::sort(nodes.begin(), nodes.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [order, n] : nodes) *reply.add_nodes() = NodeViewLocked(*n);
    for (int s = proto::JobState_MIN; s <= proto::JobState_MAX; ++s) {
      (*reply.mutable_job_counts())[proto::JobState_Name(static_cast<proto::JobState>(s))] =
          static_cast<int32_t>(state_counts_[s]);
    }
    reply.set_state_backend(store_->Describe());
    reply.set_address(address_);
  });
  return reply;
}

proto::NodeInfo SchedulerCore::NodeViewLocked(const Node& n) {
  proto::NodeInfo info = n.info;
  info.clear_free_gpu_ids();
  BookScope book(this);
  if (const NodeUse* use = table_.Find(n.info.node_id())) {
    info.set_node_ip(use->node_ip);
    *info.mutable_total() = use->total;
    *info.mutable_free() = SubtractResources(use->total, use->used);
    for (int g : use->gpu_ids) {
      if (!use->used_gpus.count(g)) info.add_free_gpu_ids(g);
    }
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
  if (job.changed != nullptr) job.changed->SignalAll();
  persister_.Put(job.info);
  IndexLocked(job);
}

std::string SchedulerCore::NodeIpLocked(const std::string& node_id) {
  BookScope book(this);
  const NodeUse* n = table_.Find(node_id);
  return n == nullptr ? "" : n->node_ip;
}

}  // namespace drover
