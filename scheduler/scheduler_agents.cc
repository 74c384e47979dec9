// SchedulerCore's traffic with the agents: what they report (heartbeats with their
// process tables, exits, launch replies), applied in batches (RunBatched), and the calls
// made to them (launches, stops: Dispatch).
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "scheduler/scheduler_core.h"

namespace drover {

// One call of RunBatched, on its caller's stack until it is done.
struct SchedulerCore::BatchedCall {
  explicit BatchedCall(absl::FunctionRef<void(Actions*)> f) : apply(f) {}
  absl::FunctionRef<void(Actions*)> apply;
  bool done = false;  // applied, its pass run
  bool lead = false;  // handed the lead: take mu_ for the calls waiting
  absl::CondVar changed;
};

void SchedulerCore::RunBatched(absl::FunctionRef<void(Actions*)> apply) {
  BatchedCall call(apply);
  {
    absl::MutexLock lock(&batch_mu_);
    batch_.push_back(&call);
    if (batch_led_) {
      // Another call leads: it (or one after it) applies this one.
      while (!call.done && !call.lead) call.changed.Wait(&batch_mu_);
      if (call.done) return;
    }
    batch_led_ = true;
  }
  // The lead: every call waiting now (this one among them), one pass, then the lead
  // goes to the first call that came meanwhile.
  std::vector<BatchedCall*> calls;
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    {
      absl::MutexLock batch_lock(&batch_mu_);
      calls.swap(batch_);
    }
    for (BatchedCall* c : calls) c->apply(&actions);
    ScheduleLocked(&actions);
  }
  {
    absl::MutexLock lock(&batch_mu_);
    // A waiting caller returns (and its call goes) once this lock is released.
    for (BatchedCall* c : calls) {
      c->done = true;
      c->changed.Signal();
    }
    if (batch_.empty()) {
      batch_led_ = false;
    } else {
      batch_.front()->lead = true;
      batch_.front()->changed.Signal();
    }
  }
  Dispatch(std::move(actions));
}

std::vector<int> SchedulerCore::RanksOf(const proto::StartProcessesRequest& req) {
  std::vector<int> ranks;
  for (const auto& p : req.processes()) ranks.push_back(p.rank());
  return ranks;
}

proto::HeartbeatReply SchedulerCore::Heartbeat(const proto::HeartbeatRequest& req) {
  proto::HeartbeatReply reply;
  RunBatched([&](Actions* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Node* node = FindNodeLocked(req.node_id());
    if (node == nullptr || node->info.state() != proto::ALIVE) {
      reply.set_known(false);
      return;
    }
    reply.set_known(true);
    node->last_heartbeat = clock_->Now();
    *node->info.mutable_object_store() = req.object_store();
    ApplyProcessTableLocked(*node, req, /*reattach=*/false, &reply, out);
  });
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
    // Forgotten only once the job's record with these exits is stored: a scheduler
    // restarted from the store before that would find the job running and its
    // processes gone (found by the chaos campaign). A later heartbeat forgets it.
    if (all_exited && persister_.Stored(key.first)) {
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
  for (Job* job : RunningJobsLocked()) {
    const std::string& id = job->info.job_id();
    std::vector<int> lost;
    for (const auto& p : job->info.placement()) {
      if (p.node_id() == node.info.node_id() && job->live.count(p.rank()) &&
          !reported[id].count(p.rank())) {
        lost.push_back(p.rank());
      }
    }
    FailRanksLocked(*job, node.info.node_id(), lost,
                    "is gone: its node agent restarted and no longer has the process", out);
  }
}

void SchedulerCore::ReportExit(const proto::ReportExitRequest& req) {
  RunBatched([&](Actions* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Job* job = FindJobLocked(req.job_id());
    if (job == nullptr) return;
    proto::ExitInfo e = req.exit();
    e.set_node_id(req.node_id());
    HandleExitLocked(*job, e, out);
  });
}

void SchedulerCore::RunLaunch(std::shared_ptr<const Action> a, size_t i, int master_port) {
  proto::StartProcessesRequest req = a->starts[i].second;
  req.set_master_port(master_port);  // 0 for the first (master) node: it picks one
  agents_->StartProcessesAsync(
      a->starts[i].first, req, [this, a, i, master_port](absl::StatusOr<int> port) {
        bool proceed = port.ok() && i + 1 < a->starts.size();
        int next_port = master_port;
        RunBatched([&](Actions* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          Job* job = FindJobLocked(a->job_id);
          if (job == nullptr || job->info.restart_count() != a->generation || stopping_) {
            proceed = false;
          } else if (!port.ok()) {
            FailLaunchLocked(*job, *a, i, port.status(), out);
          } else {
            // This node's processes are spawned (`drover run`: "starting N/M").
            const auto& started = a->starts[i].second;
            job->info.set_started_processes(job->info.started_processes() +
                                            started.processes_size());
            NoteLocked(*job, TimelineEventOf(proto::TIMELINE_RANKS_STARTED, a->generation,
                                             a->node_ids[i], RanksOf(started)));
            if (i == 0) {
              next_port = *port;
              job->info.set_master_port(next_port);
            }
            ChangedLocked(*job);
          }
        });
        if (proceed) {
          RunLaunch(a, i + 1, next_port);
        } else {
          EndCall();  // last: Stop() may go on once this returns
        }
      });
}

void SchedulerCore::EndCall() {
  absl::MutexLock lock(&calls_mu_);
  --calls_in_flight_;
}

void SchedulerCore::Dispatch(Actions actions) {
  NotifyLeases(std::move(actions.notes));
  for (Action& action : actions) {
    {
      absl::MutexLock lock(&calls_mu_);
      if (calls_closed_) return;  // stopping
      ++calls_in_flight_;
    }
    // From the pool: a client without a non-blocking path (tests') blocks it, not the
    // caller, which may be serving an RPC.
    outbound_->Post([this, a = std::make_shared<const Action>(std::move(action))] {
      if (a->kind == Action::kLaunch) {
        RunLaunch(a, 0, 0);
        return;
      }
      proto::StopJobRequest stop;
      stop.set_job_id(a->job_id);
      stop.set_generation(a->generation);
      stop.set_grace_ms(absl::ToInt64Milliseconds(options_.kill_grace));
      agents_->StopJobAsync(a->stop_address, stop, [this, a](absl::Status s) {
        if (!s.ok()) DROVER_LOG(WARNING) << "stop " << a->job_id << ": " << s;
        EndCall();
      });
    });
  }
}

}  // namespace drover
