#include "sdk/internal/convert.h"

#include <algorithm>

namespace drover::internal {
namespace {

// Wire times are milliseconds since the epoch, 0 for "not yet".
int64_t ToMillis(absl::Time t) { return absl::ToUnixMillis(t); }
int64_t ToMillis(const std::optional<absl::Time>& t) { return t ? absl::ToUnixMillis(*t) : 0; }
std::optional<absl::Time> OptionalTime(int64_t ms) {
  if (ms == 0) return std::nullopt;
  return absl::FromUnixMillis(ms);
}

template <typename T, typename Repeated>
std::vector<T> ToVector(const Repeated& r) {
  return std::vector<T>(r.begin(), r.end());
}

template <typename Repeated, typename T>
void SetRepeated(Repeated* out, const std::vector<T>& v) {
  out->Clear();
  for (const auto& x : v) out->Add(T(x));
}

proto::Resources ToProto(const Resources& r) {
  proto::Resources out;
  out.set_cpus(r.cpus);
  out.set_memory_bytes(r.memory_bytes);
  out.set_gpus(r.gpus);
  for (const auto& [name, amount] : r.custom) (*out.mutable_custom())[name] = amount;
  return out;
}

Resources FromProto(const proto::Resources& r) {
  Resources out;
  out.cpus = r.cpus();
  out.memory_bytes = r.memory_bytes();
  out.gpus = r.gpus();
  out.custom.insert(r.custom().begin(), r.custom().end());
  return out;
}

proto::PlacementStrategy ToProto(PlacementStrategy s) {
  return s == PlacementStrategy::kSpread ? proto::SPREAD : proto::PACK;
}

PlacementStrategy FromProto(proto::PlacementStrategy s) {
  return s == proto::SPREAD ? PlacementStrategy::kSpread : PlacementStrategy::kPack;
}

proto::NodeState ToProto(NodeState s) {
  switch (s) {
    case NodeState::kAlive: return proto::ALIVE;
    case NodeState::kDead: return proto::DEAD;
    case NodeState::kReconnecting: return proto::RECONNECTING;
  }
  return proto::ALIVE;
}

NodeState FromProto(proto::NodeState s) {
  switch (s) {
    case proto::DEAD: return NodeState::kDead;
    case proto::RECONNECTING: return NodeState::kReconnecting;
    default: return NodeState::kAlive;
  }
}

proto::RankPlacement ToProto(const RankPlacement& p) {
  proto::RankPlacement out;
  out.set_rank(p.rank);
  out.set_node_id(p.node_id);
  out.set_node_ip(p.node_ip);
  out.set_local_rank(p.local_rank);
  out.set_group_rank(p.group_rank);
  SetRepeated(out.mutable_gpu_ids(), p.gpu_ids);
  return out;
}

RankPlacement FromProto(const proto::RankPlacement& p) {
  RankPlacement out;
  out.rank = p.rank();
  out.node_id = p.node_id();
  out.node_ip = p.node_ip();
  out.local_rank = p.local_rank();
  out.group_rank = p.group_rank();
  out.gpu_ids = ToVector<int>(p.gpu_ids());
  return out;
}

proto::ExitInfo ToProto(const ExitInfo& e) {
  proto::ExitInfo out;
  out.set_rank(e.rank);
  out.set_node_id(e.node_id);
  out.set_exit_code(e.exit_code);
  out.set_signal(e.signal);
  out.set_stderr_tail(e.stderr_tail);
  out.set_error(e.error);
  out.set_generation(e.generation);
  out.set_placement_epoch(e.placement_epoch);
  return out;
}

ExitInfo FromProto(const proto::ExitInfo& e) {
  ExitInfo out;
  out.rank = e.rank();
  out.node_id = e.node_id();
  out.exit_code = e.exit_code();
  out.signal = e.signal();
  out.stderr_tail = e.stderr_tail();
  out.error = e.error();
  out.generation = e.generation();
  out.placement_epoch = e.placement_epoch();
  return out;
}

}  // namespace

proto::JobState ToProto(JobState s) {
  switch (s) {
    case JobState::kPending: return proto::PENDING;
    case JobState::kRunning: return proto::RUNNING;
    case JobState::kSucceeded: return proto::SUCCEEDED;
    case JobState::kFailed: return proto::FAILED;
    case JobState::kCancelled: return proto::CANCELLED;
  }
  return proto::PENDING;
}

JobState FromProto(proto::JobState s) {
  switch (s) {
    case proto::RUNNING: return JobState::kRunning;
    case proto::SUCCEEDED: return JobState::kSucceeded;
    case proto::FAILED: return JobState::kFailed;
    case proto::CANCELLED: return JobState::kCancelled;
    default: return JobState::kPending;
  }
}

proto::JobSpec ToProto(const JobSpec& s) {
  proto::JobSpec out;
  out.set_name(s.name);
  SetRepeated(out.mutable_command(), s.command);
  for (const auto& [k, v] : s.env) (*out.mutable_env())[k] = v;
  out.set_cwd(s.cwd);
  out.set_nproc(s.nproc);
  out.set_nproc_per_node(s.nproc_per_node);
  *out.mutable_per_process() = ToProto(s.per_process);
  out.set_strategy(ToProto(s.strategy));
  out.set_max_restarts(s.max_restarts);
  out.set_idempotency_key(s.idempotency_key);
  if (s.time_limit > absl::ZeroDuration()) {
    out.set_time_limit_ms(std::max<int64_t>(1, absl::ToInt64Milliseconds(s.time_limit)));
  } else {
    // Zero is "no limit"; a negative limit goes to the scheduler as is, which refuses it.
    out.set_time_limit_ms(absl::ToInt64Milliseconds(s.time_limit));
  }
  return out;
}

JobSpec FromProto(const proto::JobSpec& s) {
  JobSpec out;
  out.name = s.name();
  out.command = ToVector<std::string>(s.command());
  out.env.insert(s.env().begin(), s.env().end());
  out.cwd = s.cwd();
  out.nproc = s.nproc();
  out.nproc_per_node = s.nproc_per_node();
  out.per_process = FromProto(s.per_process());
  out.strategy = FromProto(s.strategy());
  out.max_restarts = s.max_restarts();
  out.time_limit = absl::Milliseconds(s.time_limit_ms());
  out.idempotency_key = s.idempotency_key();
  return out;
}

proto::JobInfo ToProto(const JobInfo& j) {
  proto::JobInfo out;
  out.set_job_id(j.job_id);
  *out.mutable_spec() = ToProto(j.spec);
  out.set_state(ToProto(j.state));
  out.set_reason(j.reason);
  out.set_submit_time_ms(ToMillis(j.submit_time));
  out.set_start_time_ms(ToMillis(j.start_time));
  out.set_end_time_ms(ToMillis(j.end_time));
  out.set_generation_start_ms(ToMillis(j.generation_start));
  out.set_restart_count(j.restart_count);
  for (const auto& p : j.placement) *out.add_placement() = ToProto(p);
  out.set_master_addr(j.master_addr);
  out.set_master_port(j.master_port);
  if (j.root_cause) *out.mutable_root_cause() = ToProto(*j.root_cause);
  SetRepeated(out.mutable_succeeded_ranks(), j.succeeded_ranks);
  SetRepeated(out.mutable_exited_ranks(), j.exited_ranks);
  out.set_live_processes(j.live_processes);
  out.set_started_processes(j.started_processes);
  out.set_placement_epoch(j.placement_epoch);
  SetRepeated(out.mutable_started_nodes(), j.started_nodes);
  out.set_restarting(j.restarting);
  out.set_version(j.version);
  out.set_exit_code(j.exit_code);
  SetRepeated(out.mutable_nodes_used(), j.nodes_used);
  out.set_driver(j.driver);
  return out;
}

JobInfo FromProto(const proto::JobInfo& j) {
  JobInfo out;
  out.job_id = j.job_id();
  out.spec = FromProto(j.spec());
  out.state = FromProto(j.state());
  out.reason = j.reason();
  out.submit_time = absl::FromUnixMillis(j.submit_time_ms());
  out.start_time = OptionalTime(j.start_time_ms());
  out.end_time = OptionalTime(j.end_time_ms());
  out.generation_start = OptionalTime(j.generation_start_ms());
  out.restart_count = j.restart_count();
  for (const auto& p : j.placement()) out.placement.push_back(FromProto(p));
  out.master_addr = j.master_addr();
  out.master_port = j.master_port();
  if (j.has_root_cause()) out.root_cause = FromProto(j.root_cause());
  out.succeeded_ranks = ToVector<int>(j.succeeded_ranks());
  out.exited_ranks = ToVector<int>(j.exited_ranks());
  out.live_processes = j.live_processes();
  out.started_processes = j.started_processes();
  out.placement_epoch = j.placement_epoch();
  out.started_nodes = ToVector<std::string>(j.started_nodes());
  out.restarting = j.restarting();
  out.version = j.version();
  out.exit_code = j.exit_code();
  out.nodes_used = ToVector<std::string>(j.nodes_used());
  out.driver = j.driver();
  return out;
}

proto::NodeInfo ToProto(const NodeInfo& n) {
  proto::NodeInfo out;
  out.set_node_id(n.node_id);
  out.set_agent_address(n.agent_address);
  out.set_node_ip(n.node_ip);
  out.set_hostname(n.hostname);
  out.set_state(ToProto(n.state));
  *out.mutable_total() = ToProto(n.total);
  *out.mutable_free() = ToProto(n.free);
  SetRepeated(out.mutable_free_gpu_ids(), n.free_gpu_ids);
  out.set_last_heartbeat_ms(ToMillis(n.last_heartbeat));
  SetRepeated(out.mutable_warnings(), n.warnings);
  SetRepeated(out.mutable_gpu_names(), n.gpu_names);
  out.set_reason(n.reason);
  out.set_metrics_address(n.metrics_address);
  if (n.object_store) {
    proto::ObjectStoreUsage& u = *out.mutable_object_store();
    u.set_capacity_bytes(n.object_store->capacity_bytes);
    u.set_used_bytes(n.object_store->used_bytes);
    u.set_objects(n.object_store->objects);
    u.set_spilled_objects(n.object_store->spilled_objects);
    u.set_spilled_bytes(n.object_store->spilled_bytes);
    u.set_evictions(n.object_store->evictions);
    u.set_restarts(n.object_store->restarts);
    if (n.object_store->restarts > 0) u.set_last_restart_ms(ToMillis(n.object_store->last_restart));
  }
  return out;
}

NodeInfo FromProto(const proto::NodeInfo& n) {
  NodeInfo out;
  out.node_id = n.node_id();
  out.agent_address = n.agent_address();
  out.node_ip = n.node_ip();
  out.hostname = n.hostname();
  out.state = FromProto(n.state());
  out.total = FromProto(n.total());
  out.free = FromProto(n.free());
  out.free_gpu_ids = ToVector<int>(n.free_gpu_ids());
  out.last_heartbeat = absl::FromUnixMillis(n.last_heartbeat_ms());
  out.warnings = ToVector<std::string>(n.warnings());
  out.gpu_names = ToVector<std::string>(n.gpu_names());
  out.reason = n.reason();
  out.metrics_address = n.metrics_address();
  if (n.has_object_store()) {
    const proto::ObjectStoreUsage& u = n.object_store();
    out.object_store = ObjectStoreUsage{u.capacity_bytes(),  u.used_bytes(),
                                        u.objects(),         u.spilled_objects(),
                                        u.spilled_bytes(),   u.evictions()};
    out.object_store->restarts = u.restarts();
    if (u.last_restart_ms() > 0) out.object_store->last_restart = absl::FromUnixMillis(u.last_restart_ms());
  }
  return out;
}

proto::GetClusterStatusReply ToProto(const ClusterStatus& s) {
  proto::GetClusterStatusReply out;
  for (const auto& n : s.nodes) *out.add_nodes() = ToProto(n);
  for (const auto& [state, count] : s.job_counts) {
    (*out.mutable_job_counts())[proto::JobState_Name(ToProto(state))] = count;
  }
  out.set_state_backend(s.state_backend);
  out.set_address(s.address);
  out.set_metrics_address(s.metrics_address);
  return out;
}

ClusterStatus FromProto(const proto::GetClusterStatusReply& s) {
  ClusterStatus out;
  for (const auto& n : s.nodes()) out.nodes.push_back(FromProto(n));
  for (const auto& [name, count] : s.job_counts()) {
    proto::JobState state;
    if (proto::JobState_Parse(name, &state)) out.job_counts[FromProto(state)] = count;
  }
  out.state_backend = s.state_backend();
  out.address = s.address();
  out.metrics_address = s.metrics_address();
  return out;
}

proto::GetJobTimelineReply ToProto(const JobTimeline& t) {
  proto::GetJobTimelineReply out;
  for (const TimelineEvent& e : t.events) {
    proto::TimelineEvent* p = out.add_events();
    p->set_time_us(absl::ToUnixMicros(e.time));
    p->set_kind(static_cast<proto::TimelineEventKind>(e.kind));
    p->set_generation(e.generation);
    p->set_node_id(e.node_id);
    SetRepeated(p->mutable_ranks(), e.ranks);
    p->set_detail(e.detail);
    if (e.exit) *p->mutable_exit() = ToProto(*e.exit);
    p->set_lease_id(e.lease_id);
    p->set_actor_id(e.actor_id);
    p->set_worker_id(e.worker_id);
    p->set_state(e.state);
    p->set_duration_us(absl::ToInt64Microseconds(e.duration));
    p->set_name(e.name);
    p->set_bytes(e.bytes);
    p->set_source_node_id(e.source_node_id);
    p->set_object_id(e.object_id);
    p->set_failed(e.failed);
  }
  out.set_dropped(t.dropped);
  out.set_activity_dropped(t.activity_dropped);
  return out;
}

JobTimeline FromProto(const proto::GetJobTimelineReply& t) {
  JobTimeline out;
  for (const proto::TimelineEvent& p : t.events()) {
    TimelineEvent e;
    e.time = absl::FromUnixMicros(p.time_us());
    e.kind = static_cast<TimelineEventKind>(p.kind());
    e.generation = p.generation();
    e.node_id = p.node_id();
    e.ranks = ToVector<int>(p.ranks());
    e.detail = p.detail();
    if (p.has_exit()) e.exit = FromProto(p.exit());
    e.lease_id = p.lease_id();
    e.actor_id = p.actor_id();
    e.worker_id = p.worker_id();
    e.state = p.state();
    e.duration = absl::Microseconds(p.duration_us());
    e.name = p.name();
    e.bytes = p.bytes();
    e.source_node_id = p.source_node_id();
    e.object_id = p.object_id();
    e.failed = p.failed();
    out.events.push_back(std::move(e));
  }
  out.dropped = t.dropped();
  out.activity_dropped = t.activity_dropped();
  return out;
}

proto::LogOffset ToProto(const LogOffset& o) {
  proto::LogOffset out;
  out.set_rank(o.rank);
  out.set_stream(o.stream == LogStream::kStderr ? 2 : 1);
  out.set_offset(o.offset);
  return out;
}

LogChunk FromProto(const proto::LogChunk& c) {
  LogChunk out;
  out.rank = c.rank();
  out.stream = c.stream() == 2 ? LogStream::kStderr : LogStream::kStdout;
  out.offset = c.offset();
  out.data = c.data();
  return out;
}

}  // namespace drover::internal
