// SchedulerCore's traffic with the agents: what they report (heartbeats with their
// process tables, exits, launch replies), applied in batches (RunBatched), and the calls
// made to them (launches, stops: Dispatch).
#include <unistd.h>

#include <algorithm>
#include <iostream>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "scheduler/generation.h"
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
    const bool store_restarted =
        req.object_store().restarts() != node->info.object_store().restarts();
    *node->info.mutable_object_store() = req.object_store();
    if (store_restarted) PublishNodeLocked(*node);  // drivers' objects there are lost
    ApplyProcessTableLocked(*node, req, /*reattach=*/false, &reply, out);
  });
  return reply;
}

void SchedulerCore::ApplyProcessTableLocked(Node& node, const proto::HeartbeatRequest& report,
                                            bool reattach, proto::HeartbeatReply* reply,
                                            Actions* out) {
  // (job, generation) -> all of its processes on this node have exited.
  std::map<std::pair<std::string, int>, bool> groups;
  // (job, generation) -> why the scheduler expects none of it to run on this node.
  std::map<std::pair<std::string, int>, std::string> stale_running;
  std::map<std::string, std::set<int>> reported;  // job -> ranks of its current generation
  // (job, generation, epoch) of processes running under another placement of the
  // job's current generation: stopped, that placement's only.
  std::set<std::tuple<std::string, int, int64_t>> other_placement;
  for (const auto& p : report.processes()) {
    auto key = std::make_pair(p.job_id(), p.generation());
    auto [it, inserted] = groups.emplace(key, true);
    Job* job = FindJobLocked(p.job_id());
    if (job != nullptr && OfAnotherPlacement(*job, p.generation(), p.placement_epoch())) {
      // Never a live rank of the current placement, nor its exit; once all of it has
      // exited the agent forgets it like any settled generation.
      if (p.running()) {
        it->second = false;
        other_placement.emplace(p.job_id(), p.generation(), p.placement_epoch());
      }
      continue;
    }
    if (p.running()) {
      it->second = false;
      if (std::string why = StaleRunningLocked(job, node, p); !why.empty()) {
        stale_running.emplace(key, std::move(why));
      }
    } else if (job != nullptr) {
      proto::ExitInfo e = p.exit();
      e.set_rank(p.rank());
      e.set_generation(p.generation());
      e.set_placement_epoch(p.placement_epoch());
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
    // processes gone. A later heartbeat forgets it.
    const Job* job = FindJobLocked(key.first);
    const bool asking = job != nullptr && job->asking_port &&
                        job->info.restart_count() == key.second;
    if (all_exited && persister_.Stored(key.first) && !asking) {
      auto* f = reply->add_forget();
      f->set_job_id(key.first);
      f->set_generation(key.second);
    }
  }
  for (const auto& [key, why] : stale_running) {
    // The agent stops every process of the generation there (StopJob has no rank).
    DROVER_LOG(WARNING) << "node " << node.info.node_id() << " reports " << why
                        << ": asking it to stop job " << key.first << " generation "
                        << key.second << " there";
    Action a;
    a.kind = Action::kStop;
    a.job_id = key.first;
    a.generation = key.second;
    a.stop_address = node.info.agent_address();
    out->push_back(std::move(a));
  }
  for (const auto& [job_id, generation, epoch] : other_placement) {
    DROVER_LOG(WARNING) << "node " << node.info.node_id() << " runs job " << job_id
                        << " generation " << generation << " under placement epoch " << epoch
                        << ", not the current placement's: stopping that placement there";
    Action a;
    a.kind = Action::kStop;
    a.job_id = job_id;
    a.generation = generation;
    a.placement_epoch = epoch;
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
    if (job->start_unconfirmed && job->info.placement(0).node_id() != node.info.node_id()) {
      if (!reported[id].empty()) {
        // A later node that runs ranks of it proves the start went out, whatever the
        // first node reports; its ranks missing here had their start: they are gone.
        job->seen_running = true;
      } else {
        // Never started, or gone: the first node's report tells which.
        job->starts().unreported.insert(lost.begin(), lost.end());
        lost.clear();
      }
    } else if (job->start_unconfirmed) {
      if (reported[id].empty() && !job->seen_running) {
        ResolveStartLocked(*job, /*started=*/false, out);  // nothing runs anywhere
        continue;
      }
      // The start went out: its ranks missing here are gone (failed first, so that the
      // settling below knows whether the master still runs).
      FailRanksLocked(*job, node.info.node_id(), lost,
                      "is gone: its node agent restarted and no longer has the process", out);
      lost.clear();
      ResolveStartLocked(*job, /*started=*/true, out);
    } else if (job->start_sets != nullptr &&
               job->start_sets->unconfirmed_nodes.erase(node.info.node_id()) > 0 &&
               reported[id].empty() && !lost.empty()) {
      // Its start never reached this node (none of its ranks is here, and it refuses a
      // start sent before its registration): sent now, its first and only one.
      if (job->info.state() == proto::RUNNING && !job->info.restarting()) {
        StartLaterNodesLocked(*job, {node.info.node_id()}, out);
        continue;
      }
      FailRanksLocked(*job, node.info.node_id(), lost,
                      "was never started: the scheduler stopped before its start reached the "
                      "node",
                      out);
      lost.clear();
    }
    FailRanksLocked(*job, node.info.node_id(), lost,
                    "is gone: its node agent restarted and no longer has the process", out);
    // Ended (a cancel) or failing while the node was away: its stop went nowhere then
    // (the node's address was unknown); it goes now.
    const bool to_stop = IsTerminal(job->info.state()) ||
                         (job->info.restarting() && deferred_stops_.count(id) == 0);
    bool runs_here = false;
    for (int rank : reported[id]) runs_here = runs_here || job->live.count(rank) > 0;
    if (to_stop && runs_here) {
      Action a;
      a.kind = Action::kStop;
      a.job_id = id;
      a.generation = job->info.restart_count();
      a.stop_address = node.info.agent_address();
      out->push_back(std::move(a));
    }
  }
}

void SchedulerCore::ResolveStartLocked(Job& job, bool started, Actions* out) {
  job.start_unconfirmed = false;
  std::set<int> unreported;
  unreported.swap(job.starts().unreported);
  if (started) {
    // The first node had the start. A later node's start went out only after the first
    // node answered, and that answer may never have come (the scheduler stopped first),
    // so no later node's start is confirmed: a node that came back with none of its
    // ranks never got it (and refuses it now: it was sent before its registration),
    // and a node not back yet is in the same doubt until it registers.
    const std::string& first = job.info.placement(0).node_id();
    std::vector<std::string> to_start;
    std::set<std::string> never_started;
    for (const auto& p : job.info.placement()) {
      const std::string& id = p.node_id();
      if (id == first || job.live.count(p.rank()) == 0) continue;
      if (unreported.count(p.rank()) > 0) {
        if (never_started.insert(id).second) to_start.push_back(id);
        continue;
      }
      const Node* node = FindNodeLocked(id);
      if (node == nullptr || node->info.state() != proto::ALIVE) job.starts().unconfirmed_nodes.insert(id);
    }
    if (to_start.empty()) return;
    if (job.info.state() == proto::RUNNING && !job.info.restarting()) {
      StartLaterNodesLocked(job, to_start, out);
    } else {
      FailNeverStartedLocked(job, never_started,
                             "was never started: the scheduler stopped before its start "
                             "reached the node",
                             out);
    }
    return;
  }
  if (IsTerminal(job.info.state()) || job.info.restarting()) {
    // Ended meanwhile (a cancel before its nodes came back): nothing to place again.
    for (const auto& p : job.info.placement()) {
      if (job.live.count(p.rank()) == 0) continue;
      FailRanksLocked(job, p.node_id(), {p.rank()},
                      "was never started: the scheduler stopped before its start reached the "
                      "node",
                      out);
    }
    return;
  }
  DROVER_LOG(INFO) << job.info.job_id() << " generation " << job.info.restart_count()
                   << ": no node has its processes (the scheduler stopped before the start "
                      "reached them); placing it again";
  job.live.clear();
  job.info.set_live_processes(0);
  ReleaseLocked(job);
  job.info.set_state(proto::PENDING);
  job.info.clear_placement();
  job.info.set_reason("placed again: the scheduler stopped before its start reached the nodes");
  ChangedLocked(job);
}

void SchedulerCore::ResendStartLocked(Job& job, const std::string& node_id, Actions* out) {
  Node* node = FindNodeLocked(node_id);
  if (node == nullptr) return;
  proto::StartProcessesRequest req = StartRequestLocked(job, node_id);
  DROVER_LOG(INFO) << job.info.job_id() << " generation " << job.info.restart_count()
                   << ": node " << node_id << " has none of its ranks (the scheduler stopped "
                   << "before the start reached it); starting them now";
  Action a;
  a.kind = Action::kLaunch;
  a.job_id = job.info.job_id();
  a.generation = job.info.restart_count();
  a.master_port = job.info.master_port();
  a.ranks.push_back(RanksOf(req));
  a.node_ids.push_back(node_id);
  a.starts.emplace_back(node->info.agent_address(), std::move(req));
  QueueLaunchLocked(job, std::move(a), out);
}

void SchedulerCore::StartLaterNodesLocked(Job& job, const std::vector<std::string>& node_ids,
                                          Actions* out) {
  if (job.info.master_port() > 0) {
    for (const std::string& id : node_ids) ResendStartLocked(job, id, out);
    return;
  }
  if (job.asking_port) {
    job.starts().awaiting_port.insert(node_ids.begin(), node_ids.end());
    return;
  }
  // The master's answer was lost with the scheduler that sent its start. Its node holds
  // the generation, so a start sent to it again starts nothing and answers the port
  // (ProcessManager::StartOnManager); the later nodes follow with it, as at a first start.
  // Only while a rank of it runs there: an agent told to forget the generation (all its
  // ranks there exited) would start it again.
  const std::string& first = job.info.placement(0).node_id();
  const Node* first_node = FindNodeLocked(first);
  bool master_runs = first_node != nullptr && first_node->info.state() == proto::ALIVE;
  bool any_live = false;
  for (const auto& p : job.info.placement()) {
    if (p.node_id() == first) any_live = any_live || job.live.count(p.rank()) > 0;
  }
  if (!master_runs || !any_live) {
    FailNeverStartedLocked(job, std::set<std::string>(node_ids.begin(), node_ids.end()),
                           absl::StrCat("was never started: the scheduler stopped before its "
                                        "start reached the node, and ", first,
                                        " no longer runs the master's ranks to start it with"),
                           out);
    return;
  }
  Action a;
  a.kind = Action::kLaunch;
  a.job_id = job.info.job_id();
  a.generation = job.info.restart_count();
  std::vector<std::string> order = {first};
  order.insert(order.end(), node_ids.begin(), node_ids.end());
  for (const std::string& id : order) {
    Node* node = FindNodeLocked(id);
    if (node == nullptr) continue;  // not the first: it just registered
    proto::StartProcessesRequest req = StartRequestLocked(job, id);
    a.ranks.push_back(RanksOf(req));
    a.node_ids.push_back(id);
    a.starts.emplace_back(node->info.agent_address(), std::move(req));
  }
  DROVER_LOG(INFO) << job.info.job_id() << " generation " << job.info.restart_count()
                   << ": nodes " << absl::StrJoin(node_ids, ",") << " have none of its ranks "
                   << "(the scheduler stopped before their start reached them); asking "
                   << first << " for the master's port again, then starting them";
  a.reask = true;
  job.asking_port = true;
  QueueLaunchLocked(job, std::move(a), out);
}

void SchedulerCore::FailNeverStartedLocked(Job& job, const std::set<std::string>& node_ids,
                                           const std::string& why, Actions* out) {
  for (const auto& p : job.info.placement()) {
    if (node_ids.count(p.node_id()) == 0 || job.live.count(p.rank()) == 0) continue;
    FailRanksLocked(job, p.node_id(), {p.rank()}, why, out);
  }
}

void SchedulerCore::QueueLaunchLocked(Job& job, Action a, Actions* out) {
  a.placement_epoch = job.info.placement_epoch();
  // With a store behind a network the launch waits for the placement to be stored
  // (Dispatch); until DropStaleLaunchesLocked lets it go, its ranks are unsent.
  if (!store_->InMemory()) {
    for (size_t k = a.reask ? 1 : 0; k < a.ranks.size(); ++k) {
      job.starts().unsent.insert(a.ranks[k].begin(), a.ranks[k].end());
    }
  }
  out->push_back(std::move(a));
}

std::vector<std::shared_ptr<SchedulerCore::Action>> SchedulerCore::DropStaleLaunchesLocked(
    std::vector<std::shared_ptr<Action>> launches, Actions* out) {
  std::vector<std::shared_ptr<Action>> kept;
  for (auto& a : launches) {
    Job* job = FindJobLocked(a->job_id);
    // Stopping: not sent, and not failed either; the next scheduler finds the placement
    // stored with no start confirmed and settles it (ResolveStartLocked).
    if (job == nullptr || job->info.restart_count() != a->generation || stopping_ ||
        job->info.placement_epoch() != a->placement_epoch) {
      continue;
    }
    for (const auto& ranks : a->ranks) {
      for (int r : ranks) job->starts().unsent.erase(r);
    }
    const bool stale = IsTerminal(job->info.state()) || job->info.restarting();
    if (stale && a->reask) {
      // Never sent: the nodes waiting for its answer are not started either.
      job->asking_port = false;
      std::set<std::string> awaiting;
      awaiting.swap(job->starts().awaiting_port);
      FailNeverStartedLocked(*job, awaiting,
                             "was not started: the job ended or failed before its start was sent",
                             out);
    }
    if (IsTerminal(job->info.state())) {
      // Sent now, it would start processes of a job that has ended (a cancel while its
      // placement was being stored): its ranks end here instead.
      FailLaunchLocked(*job, *a, a->reask ? 1 : 0,
                       absl::CancelledError("the job ended before its start was sent"), out);
      continue;
    }
    if (job->info.restarting()) {
      // Its generation failed meanwhile (a node died while the placement was being
      // stored) and its stop has gone out already: started now, these ranks would run a
      // failed generation nobody stops. They end here, so the restart can go on.
      FailLaunchLocked(
          *job, *a, a->reask ? 1 : 0,
          absl::AbortedError("the generation failed before its start was sent"), out);
      continue;
    }
    kept.push_back(std::move(a));
  }
  return kept;
}

void SchedulerCore::MaybeCrashAfterStart(const Action& a, size_t i,
                                         const absl::StatusOr<int>& port) {
  const bool last = options_.test_crash_after_start && i + 1 == a.starts.size();
  const bool master = options_.test_crash_after_master_start && i == 0 && a.starts.size() > 1;
  if (!port.ok() || !(last || master)) return;
  DROVER_LOG(WARNING) << "DROVER_TEST_CRASH_AFTER_START: exiting after the start of "
                      << a.job_id << " generation " << a.generation;
  std::cerr.flush();
  _exit(86);
}

std::string SchedulerCore::StaleRunningLocked(const Job* job, const Node& node,
                                              const proto::ProcessStatus& p) {
  // The usual case, on every heartbeat for every running process: nothing to say.
  if (job != nullptr && p.generation() == job->info.restart_count() &&
      job->live.count(p.rank()) > 0) {
    return "";
  }
  const std::string what =
      absl::StrCat("job ", p.job_id(), " generation ", p.generation(), " rank ", p.rank(),
                   " (pid ", p.pid(), ") running");
  if (job == nullptr) return absl::StrCat(what, ", a job this scheduler does not know");
  if (p.generation() != job->info.restart_count()) {
    return absl::StrCat(what, ", but the job is at generation ", job->info.restart_count());
  }
  // The rank's exit is recorded, yet the table says it runs. A table is taken before
  // its heartbeat is sent and applied after whatever overtook it: an exit report sent
  // later (the process has ended since) is the usual case. Stopping the generation
  // would then kill its other ranks on this node, which still run and are wanted. So
  // stop only where no rank of the generation is wanted any more; if it really still
  // runs, a later table says so once those have ended (or the job's stop reaches it).
  for (const auto& placed : job->info.placement()) {
    if (placed.node_id() == node.info.node_id() && job->live.count(placed.rank()) > 0) {
      return "";
    }
  }
  return absl::StrCat(what, ", but its exit is recorded and no rank of the job is live there");
}

void SchedulerCore::ReportExit(const proto::ReportExitRequest& req) {
  RunBatched([&](Actions* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto apply = [&](const std::string& job_id, const proto::ExitInfo& exit)
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                       Job* job = FindJobLocked(job_id);
                       if (job == nullptr) return;
                       proto::ExitInfo e = exit;
                       e.set_node_id(req.node_id());
                       HandleExitLocked(*job, e, out);
                     };
    if (!req.job_id().empty()) apply(req.job_id(), req.exit());
    for (const auto& e : req.exits()) apply(e.job_id(), e.exit());
  });
}

bool SchedulerCore::ApplyStartLocked(const Action& a, size_t i, const absl::StatusOr<int>& port,
                                     int* master_port, Actions* out) {
  Job* job = FindJobLocked(a.job_id);
  if (job == nullptr || job->info.restart_count() != a.generation || stopping_) return false;
  // A launch of an earlier placement of this generation (placed again meanwhile): what
  // it started there is stale, stopped when its node reports it.
  if (job->info.placement_epoch() != a.placement_epoch) return false;
  std::set<std::string> awaiting;  // the nodes waiting for this answer (a re-ask's)
  if (i == 0 && a.reask) {
    job->asking_port = false;
    awaiting.swap(job->starts().awaiting_port);
  }
  if (!port.ok() && a.reask && i == 0) {
    // Its ranks there still run (as far as anyone knows): they stay live, and the failure
    // of the ranks that now cannot start stops them.
    const std::string why = absl::StrCat("was not started: asking ", a.node_ids[0],
                                         " for the master's port failed (",
                                         port.status().message(), ")");
    for (size_t k = 1; k < a.starts.size(); ++k) {
      FailRanksLocked(*job, a.node_ids[k], a.ranks[k], why, out);
    }
    FailNeverStartedLocked(*job, awaiting, why, out);
    return false;
  }
  if (!port.ok()) {
    FailLaunchLocked(*job, a, i, port.status(), out);
    return false;
  }
  // This node's processes are spawned (`drover run`: "starting N/M").
  job->info.set_started_processes(job->info.started_processes() +
                                  static_cast<int>(a.ranks[i].size()));
  const auto& started = job->info.started_nodes();
  if (std::find(started.begin(), started.end(), a.node_ids[i]) == started.end()) {
    job->info.add_started_nodes(a.node_ids[i]);
  }
  NoteLocked(*job, TimelineEventOf(proto::TIMELINE_RANKS_STARTED, a.generation, a.node_ids[i],
                                   a.ranks[i]));
  if (i == 0) {
    *master_port = *port;
    job->info.set_master_port(*master_port);
  }
  ChangedLocked(*job);
  const std::string& id = job->info.job_id();
  const bool ended = IsTerminal(job->info.state());
  if (ended || job->info.restarting()) {
    // The job ended (a cancel) or its generation failed while this start was in flight:
    // the stop sent then may have reached the node before the start (an agent keeps no
    // record of stops), so it goes again (unless it waits, for the watchers' notice);
    // the nodes after this one are not started. Not when every rank it started there
    // has reported its exit (a job that ends at once): nothing of it runs there.
    bool live_here = false;
    for (int rank : a.ranks[i]) live_here = live_here || job->live.count(rank) > 0;
    Node* node = FindNodeLocked(a.node_ids[i]);
    if (live_here && (ended || deferred_stops_.count(id) == 0) && node != nullptr &&
        !node->info.agent_address().empty()) {
      Action stop;
      stop.kind = Action::kStop;
      stop.job_id = id;
      stop.generation = a.generation;
      stop.stop_address = node->info.agent_address();
      out->push_back(std::move(stop));
    }
    for (size_t k = i + 1; k < a.starts.size(); ++k) {
      FailRanksLocked(*job, a.node_ids[k], a.ranks[k],
                      "was not started: the job ended or failed before its start was sent",
                      out);
    }
    FailNeverStartedLocked(*job, awaiting,
                           "was not started: the job ended or failed before its start was sent",
                           out);
    return false;
  }
  for (const std::string& node_id : awaiting) ResendStartLocked(*job, node_id, out);
  return i + 1 < a.starts.size();
}

void SchedulerCore::RunLaunch(std::shared_ptr<Action> a, size_t i, int master_port) {
  // Sent once: moved out (the action keeps the start's node and ranks).
  proto::StartProcessesRequest req = std::move(a->starts[i].second);
  req.set_master_port(master_port);  // 0 for the first (master) node: it picks one
  agents_->StartProcessesAsync(
      a->starts[i].first, std::move(req), [this, a, i, master_port](absl::StatusOr<int> port) {
        MaybeCrashAfterStart(*a, i, port);
        bool proceed = false;
        int next_port = master_port;
        RunBatched([&](Actions* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          proceed = ApplyStartLocked(*a, i, port, &next_port, out);
        });
        if (proceed) {
          RunLaunch(a, i + 1, next_port);
        } else {
          EndCall();  // last: Stop() may go on once this returns
        }
      });
}

void SchedulerCore::RunLaunches(std::vector<std::shared_ptr<Action>> launches) {
  if (launches.size() == 1) {
    const int master_port = launches[0]->master_port;
    RunLaunch(std::move(launches[0]), 0, master_port);
    return;
  }
  // The first (master) node of each launch, all on one agent: one call, one batch of
  // replies; each launch then goes on to its other nodes on its own.
  std::vector<proto::StartProcessesRequest> reqs;
  reqs.reserve(launches.size());
  for (const auto& a : launches) {
    reqs.push_back(std::move(a->starts[0].second));  // sent once (see RunLaunch)
    reqs.back().set_master_port(a->master_port);
  }
  const std::string address = launches[0]->starts[0].first;
  agents_->StartProcessesBatchAsync(
      address, std::move(reqs),
      [this, launches = std::move(launches)](std::vector<absl::StatusOr<int>> ports) {
        for (size_t k = 0; k < launches.size(); ++k) MaybeCrashAfterStart(*launches[k], 0, ports[k]);
        std::vector<int> next_ports(launches.size(), 0);
        std::vector<char> proceed(launches.size(), 0);
        RunBatched([&](Actions* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          for (size_t k = 0; k < launches.size(); ++k) {
            proceed[k] = ApplyStartLocked(*launches[k], 0, ports[k], &next_ports[k], out);
          }
        });
        for (size_t k = 0; k < launches.size(); ++k) {
          if (proceed[k]) {
            RunLaunch(launches[k], 1, next_ports[k]);
          } else {
            EndCall();
          }
        }
      });
}

void SchedulerCore::EndCall() {
  absl::MutexLock lock(&calls_mu_);
  --calls_in_flight_;
}

void SchedulerCore::Dispatch(Actions actions) {
  NotifyLeases(std::move(actions.notes));
  // Launches by the agent of their first node, in the order decided.
  std::vector<std::pair<std::string, std::vector<std::shared_ptr<Action>>>> launches;
  absl::flat_hash_map<std::string, size_t> by_agent;
  for (Action& action : actions) {
    {
      absl::MutexLock lock(&calls_mu_);
      if (calls_closed_) break;  // stopping; the launches counted so far still go
      ++calls_in_flight_;
    }
    auto a = std::make_shared<Action>(std::move(action));
    if (a->kind == Action::kLaunch) {
      auto [it, added] = by_agent.emplace(a->starts[0].first, launches.size());
      if (added) launches.push_back({a->starts[0].first, {}});
      launches[it->second].second.push_back(std::move(a));
      continue;
    }
    // From the pool: a client without a non-blocking path (tests') blocks it, not the
    // caller, which may be serving an RPC.
    outbound_->Post([this, a = std::move(a)] {
      proto::StopJobRequest stop;
      stop.set_job_id(a->job_id);
      stop.set_generation(a->generation);
      stop.set_placement_epoch(a->placement_epoch);
      stop.set_grace_ms(absl::ToInt64Milliseconds(options_.kill_grace));
      agents_->StopJobAsync(a->stop_address, stop, [this, a](absl::Status s) {
        if (!s.ok()) DROVER_LOG(WARNING) << "stop " << a->job_id << ": " << s;
        EndCall();
      });
    });
  }
  for (auto& [agent, group] : launches) {
    // A start is sent only once its placement is stored: a scheduler that stops after
    // sending it comes back knowing where the job runs and reattaches it, instead of
    // placing it again (a second run of each rank). See docs/architecture.md, "starts
    // exactly once".
    if (store_->InMemory()) {  // stored at once (JobPersister::AllStored)
      outbound_->Post([this, group = std::move(group)]() mutable { RunLaunches(std::move(group)); });
      continue;
    }
    // Otherwise, even stored already, the launch goes through DropStaleLaunchesLocked:
    // its ranks count as unsent (Job::unsent) until it lets them go.
    std::vector<std::string> ids;
    ids.reserve(group.size());
    for (const auto& a : group) ids.push_back(a->job_id);
    persister_.WhenStored(std::move(ids), [this, group = std::move(group)](bool stored) mutable {
      if (!stored) {  // the scheduler is stopping: nothing is sent
        for (size_t k = 0; k < group.size(); ++k) EndCall();
        return;
      }
      outbound_->Post([this, group = std::move(group)]() mutable {
        // The job may have ended meanwhile (a cancel): check before sending.
        const size_t before = group.size();
        RunBatched([&](Actions* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          group = DropStaleLaunchesLocked(std::move(group), out);
        });
        for (size_t k = group.size(); k < before; ++k) EndCall();
        if (!group.empty()) RunLaunches(std::move(group));
      });
    });
  }
}

}  // namespace drover
