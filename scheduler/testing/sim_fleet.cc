#include "scheduler/testing/sim_fleet.h"

#include <deque>
#include <functional>
#include <map>
#include <queue>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/auth.h"
#include "common/rpc.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "proto/lease.grpc.pb.h"
#include "proto/node_agent.grpc.pb.h"
#include "proto/scheduler.grpc.pb.h"

namespace drover::testing {
namespace {

// As drover-agent: heartbeats time out after 2 s, other calls after the default 5 s.
constexpr std::chrono::milliseconds kHeartbeatTimeout{2000};
constexpr char kRuntimeVariable[] = "SIM_RUNTIME_MS";
constexpr int kMasterPort = 29500;

using JobGen = std::pair<std::string, int>;  // job id, generation

// One asynchronous unary call to the scheduler: lives until its callback ran.
template <typename Req, typename Reply>
struct Call {
  grpc::ClientContext ctx;
  Req req;
  Reply reply;
  absl::Time sent;
};

}  // namespace

class SimFleet::Impl {
 public:
  explicit Impl(SimFleetOptions options) : options_(std::move(options)) {}
  ~Impl() { Stop(); }

  absl::Status Start();
  absl::Status WaitReady(absl::Duration timeout);
  void Release();
  SimFleetStats stats() {
    absl::MutexLock l(&mu_);
    SimFleetStats s = stats_;
    for (const Node& n : nodes_) {
      s.registered += !n.node_id.empty();
      s.sessions_open += n.session_open;
    }
    return s;
  }
  std::vector<double> TakeHeartbeatLatencies() {
    absl::MutexLock l(&mu_);
    return std::exchange(latencies_, {});
  }
  void Stop();

  // Handlers of the services (called on gRPC's threads).
  grpc::Status StartProcesses(const grpc::CallbackServerContext& ctx,
                              const proto::StartProcessesRequest& req,
                              proto::StartProcessesReply* reply);
  grpc::Status StopJob(const grpc::CallbackServerContext& ctx, const proto::StopJobRequest& req);
  void CountBatch() {
    absl::MutexLock l(&mu_);
    ++stats_.start_batches;
  }
  grpc::Status StartWorker(const grpc::CallbackServerContext& ctx,
                           const proto::StartWorkerRequest& req, proto::StartWorkerReply* reply);
  grpc::Status DescribeNode(const grpc::CallbackServerContext& ctx,
                            proto::DescribeNodeReply* reply);
  // Token and node of a call: the node's index, or -1 with `*status` set.
  int NodeOf(const grpc::CallbackServerContext& ctx, grpc::Status* status);

 private:
  class Session;
  class AgentService;
  class WorkersService;

  struct Node {
    std::string address;  // 127.0.0.1:<its port>: what the scheduler dials
    std::string node_id;  // "" until registered
    std::unique_ptr<proto::Scheduler::Stub> stub;
    bool registering = false;
    bool heartbeat_in_flight = false;
    // Exits to report (job id, exit), one call at a time carrying all held, in order
    // (as an agent's reporter thread).
    std::deque<std::pair<std::string, proto::ExitInfo>> reports;
    bool report_in_flight = false;
    bool session_open = false;
    std::shared_ptr<Session> session;  // the newest, until its OnDone
    absl::Duration interval = absl::Milliseconds(500);
    std::map<JobGen, std::map<int, proto::ProcessStatus>> procs;
  };
  struct Event {
    absl::Time when;
    int node;
    bool heartbeat;  // else an exit of (job, rank)
    JobGen job;
    int rank = 0;
    bool operator>(const Event& o) const { return when > o.when; }
  };
  using Outgoing = std::vector<std::function<void()>>;

  void Loop();
  void PushLocked(Event e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const bool sooner = events_.empty() || e.when < events_.top().when;
    events_.push(std::move(e));
    if (sooner) wake_.Signal();
  }
  // Marks the process exited with `exit` and queues its report.
  void ExitLocked(int node, const JobGen& job, proto::ProcessStatus* p, proto::ExitInfo exit,
                  Outgoing* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends the node's next exit report unless one is in flight.
  void ReportLocked(int node, Outgoing* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RegisterLocked(int node, Outgoing* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HeartbeatLocked(int node, Outgoing* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OpenSessionLocked(int node, Outgoing* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SessionEnded(int node, Session* s, const grpc::Status& status);
  // Runs what was queued under the lock (asynchronous calls), without it.
  static void Send(Outgoing out) {
    for (auto& f : out) f();
  }
  // Counts a call in flight; CallDone when its callback has run.
  void CallStarted() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { ++in_flight_; }
  void CallDoneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { --in_flight_; }

  const SimFleetOptions options_;
  std::unique_ptr<AgentService> agent_service_;
  std::unique_ptr<WorkersService> workers_service_;
  std::unique_ptr<grpc::Server> server_;
  // address -> node index; written before serving, read-only after.
  absl::flat_hash_map<std::string, int> by_address_;
  std::thread loop_;

  absl::Mutex mu_;
  absl::CondVar wake_;
  std::vector<Node> nodes_ ABSL_GUARDED_BY(mu_);
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_ ABSL_GUARDED_BY(mu_);
  SimFleetStats stats_ ABSL_GUARDED_BY(mu_);
  std::vector<double> latencies_ ABSL_GUARDED_BY(mu_);
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_pid_ ABSL_GUARDED_BY(mu_) = 1000;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

// A node's AgentSession stream: reads the scheduler's notice, then nothing until it ends.
// Kept alive by itself from Begin to OnDone, and by its node while it is the newest:
// never cancelled under the fleet's lock (gRPC may run a reaction inline).
class SimFleet::Impl::Session : public grpc::ClientReadReactor<proto::AgentSessionNotice>,
                                public std::enable_shared_from_this<Session> {
 public:
  Session(Impl* fleet, int node) : fleet_(fleet), node_(node) {}

  void Begin(proto::Scheduler::Stub* stub, const std::string& token, const std::string& node_id) {
    self_ = shared_from_this();
    ctx_.AddMetadata(kTokenMetadataKey, token);
    req_.set_node_id(node_id);
    stub->async()->AgentSession(&ctx_, &req_, this);
    StartRead(&notice_);
    StartCall();
  }
  void Cancel() { ctx_.TryCancel(); }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream ends: OnDone follows
    {
      absl::MutexLock l(&fleet_->mu_);
      if (fleet_->nodes_[node_].session.get() == this) fleet_->nodes_[node_].session_open = true;
    }
    StartRead(&notice_);
  }
  void OnDone(const grpc::Status& status) override {
    fleet_->SessionEnded(node_, this, status);
    self_.reset();  // may delete this
  }

 private:
  std::shared_ptr<Session> self_;
  Impl* const fleet_;
  const int node_;
  grpc::ClientContext ctx_;
  proto::AgentSessionRequest req_;
  proto::AgentSessionNotice notice_;
};

class SimFleet::Impl::AgentService final : public proto::NodeAgent::CallbackService {
 public:
  explicit AgentService(Impl* fleet) : fleet_(fleet) {}
  grpc::ServerUnaryReactor* StartProcesses(grpc::CallbackServerContext* ctx,
                                           const proto::StartProcessesRequest* req,
                                           proto::StartProcessesReply* reply) override {
    auto* r = ctx->DefaultReactor();
    r->Finish(fleet_->StartProcesses(*ctx, *req, reply));
    return r;
  }
  grpc::ServerUnaryReactor* StartProcessesBatch(grpc::CallbackServerContext* ctx,
                                                const proto::StartProcessesBatchRequest* req,
                                                proto::StartProcessesBatchReply* reply) override {
    auto* r = ctx->DefaultReactor();
    grpc::Status status;
    if (fleet_->NodeOf(*ctx, &status) >= 0) {
      fleet_->CountBatch();
      for (const auto& start : req->starts()) {
        proto::StartProcessesReply one;
        grpc::Status s = fleet_->StartProcesses(*ctx, start, &one);
        proto::StartResult* result = reply->add_results();
        result->set_code(static_cast<int32_t>(s.error_code()));
        result->set_message(s.error_message());
        result->set_master_port(one.master_port());
      }
    }
    r->Finish(status);
    return r;
  }
  grpc::ServerUnaryReactor* StopJob(grpc::CallbackServerContext* ctx,
                                    const proto::StopJobRequest* req,
                                    proto::StopJobReply*) override {
    auto* r = ctx->DefaultReactor();
    r->Finish(fleet_->StopJob(*ctx, *req));
    return r;
  }

 private:
  Impl* const fleet_;
};

class SimFleet::Impl::WorkersService final : public proto::Workers::CallbackService {
 public:
  explicit WorkersService(Impl* fleet) : fleet_(fleet) {}
  grpc::ServerUnaryReactor* StartWorker(grpc::CallbackServerContext* ctx,
                                        const proto::StartWorkerRequest* req,
                                        proto::StartWorkerReply* reply) override {
    auto* r = ctx->DefaultReactor();
    r->Finish(fleet_->StartWorker(*ctx, *req, reply));
    return r;
  }
  // The workers do not exist: killing one, waiting for it or deleting its objects has
  // nothing to do.
  grpc::ServerUnaryReactor* KillWorker(grpc::CallbackServerContext* ctx,
                                       const proto::KillWorkerRequest*,
                                       proto::KillWorkerReply*) override {
    return Answer(ctx);
  }
  grpc::ServerUnaryReactor* WaitWorkerExit(grpc::CallbackServerContext* ctx,
                                           const proto::WaitWorkerExitRequest*,
                                           proto::WaitWorkerExitReply* reply) override {
    reply->set_exited(true);
    return Answer(ctx);
  }
  grpc::ServerUnaryReactor* DeleteObjects(grpc::CallbackServerContext* ctx,
                                          const proto::DeleteObjectsRequest*,
                                          proto::DeleteObjectsReply*) override {
    return Answer(ctx);
  }
  grpc::ServerUnaryReactor* DescribeNode(grpc::CallbackServerContext* ctx,
                                         const proto::DescribeNodeRequest*,
                                         proto::DescribeNodeReply* reply) override {
    auto* r = ctx->DefaultReactor();
    r->Finish(fleet_->DescribeNode(*ctx, reply));
    return r;
  }

 private:
  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* ctx) {
    grpc::Status s;
    fleet_->NodeOf(*ctx, &s);
    auto* r = ctx->DefaultReactor();
    r->Finish(s);
    return r;
  }
  Impl* const fleet_;
};

absl::Status SimFleet::Impl::Start() {
  if (options_.nodes < 1) return absl::InvalidArgumentError("SimFleet needs at least 1 node");
  agent_service_ = std::make_unique<AgentService>(this);
  workers_service_ = std::make_unique<WorkersService>(this);
  grpc::ServerBuilder builder;
  std::vector<int> ports(options_.nodes, 0);
  for (int i = 0; i < options_.nodes; ++i) {
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &ports[i]);
  }
  builder.RegisterService(agent_service_.get());
  builder.RegisterService(workers_service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr) return absl::UnavailableError("SimFleet: the gRPC server did not start");
  absl::MutexLock l(&mu_);
  nodes_.resize(options_.nodes);
  const absl::Time now = absl::Now();
  for (int i = 0; i < options_.nodes; ++i) {
    if (ports[i] == 0) {
      return absl::UnavailableError(absl::StrCat("SimFleet: no loopback port for node ", i));
    }
    Node& n = nodes_[i];
    n.address = absl::StrCat("127.0.0.1:", ports[i]);
    by_address_[n.address] = i;
    // A connection of its own per node (MakeChannel uses a local subchannel pool).
    n.stub = proto::Scheduler::NewStub(MakeChannel(options_.scheduler_address));
    PushLocked({now, i, /*heartbeat=*/true, {}, 0});
  }
  loop_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

absl::Status SimFleet::Impl::WaitReady(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    SimFleetStats s = stats();
    if (s.registered == options_.nodes && s.sessions_open == options_.nodes) {
      return absl::OkStatus();
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "SimFleet: after ", absl::FormatDuration(timeout), " ", s.registered, " of ",
          options_.nodes, " nodes are registered and ", s.sessions_open, " hold a session"));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

void SimFleet::Impl::Loop() {
  absl::MutexLock l(&mu_);
  while (!stopping_) {
    Outgoing out;
    const absl::Time now = absl::Now();
    while (!events_.empty() && events_.top().when <= now) {
      Event e = events_.top();
      events_.pop();
      if (e.heartbeat) {
        HeartbeatLocked(e.node, &out);
        continue;
      }
      auto procs = nodes_[e.node].procs.find(e.job);
      if (procs == nodes_[e.node].procs.end()) continue;
      auto p = procs->second.find(e.rank);
      if (p == procs->second.end() || !p->second.running()) continue;
      proto::ExitInfo exit;
      exit.set_exit_code(0);
      ExitLocked(e.node, e.job, &p->second, std::move(exit), &out);
    }
    if (!out.empty()) {
      mu_.Unlock();
      Send(std::move(out));
      mu_.Lock();
      continue;
    }
    const absl::Time next = events_.empty() ? now + absl::Seconds(1) : events_.top().when;
    wake_.WaitWithDeadline(&mu_, next);
  }
}

void SimFleet::Impl::ExitLocked(int node, const JobGen& job, proto::ProcessStatus* p,
                                proto::ExitInfo exit, Outgoing* out) {
  Node& n = nodes_[node];
  p->set_running(false);
  exit.set_rank(p->rank());
  exit.set_generation(job.second);
  exit.set_node_id(n.node_id);
  *p->mutable_exit() = exit;
  --stats_.running;
  // Without a node id (or once stopping) the heartbeats carry it, as an agent's table does.
  if (n.node_id.empty() || stopping_) return;
  n.reports.emplace_back(job.first, std::move(exit));
  ReportLocked(node, out);
}

void SimFleet::Impl::ReportLocked(int node, Outgoing* out) {
  Node& n = nodes_[node];
  if (n.report_in_flight || n.reports.empty() || stopping_) return;
  n.report_in_flight = true;
  auto* call = new Call<proto::ReportExitRequest, proto::ReportExitReply>;
  PrepareContext(&call->ctx, options_.token);
  // Every exit held, in one call (as an agent's reporter sends them).
  call->req.set_node_id(n.node_id);
  for (auto& [job_id, exit] : n.reports) {
    proto::ExitReport* e = call->req.add_exits();
    e->set_job_id(std::move(job_id));
    *e->mutable_exit() = std::move(exit);
  }
  const int64_t exits = static_cast<int64_t>(n.reports.size());
  n.reports.clear();
  CallStarted();
  proto::Scheduler::Stub* stub = n.stub.get();
  out->push_back([this, stub, call, node, exits] {
    stub->async()->ReportExit(&call->ctx, &call->req, &call->reply,
                              [this, call, node, exits](grpc::Status s) {
                                Outgoing next;
                                {
                                  absl::MutexLock l(&mu_);
                                  // Unreported exits ride the heartbeats (as an agent's do).
                                  (s.ok() ? stats_.exits_reported : stats_.report_errors) +=
                                      exits;
                                  ++stats_.report_calls;
                                  nodes_[node].report_in_flight = false;
                                  ReportLocked(node, &next);
                                  CallDoneLocked();
                                }
                                delete call;
                                Send(std::move(next));
                              });
  });
}

void SimFleet::Impl::RegisterLocked(int node, Outgoing* out) {
  Node& n = nodes_[node];
  if (n.registering || stopping_) return;
  n.registering = true;
  auto* call = new Call<proto::RegisterNodeRequest, proto::RegisterNodeReply>;
  PrepareContext(&call->ctx, options_.token);
  call->req.set_node_id(n.node_id);
  call->req.set_hostname(absl::StrCat("sim-", node));
  call->req.set_agent_address(n.address);
  call->req.set_node_ip(absl::StrCat("127.0.", node / 250, ".", node % 250 + 1));
  call->req.mutable_total()->set_cpus(options_.cpus_per_node);
  call->req.mutable_total()->set_memory_bytes(options_.memory_bytes_per_node);
  for (const auto& [job, ranks] : n.procs) {
    for (const auto& [rank, p] : ranks) *call->req.add_processes() = p;
  }
  CallStarted();
  proto::Scheduler::Stub* stub = n.stub.get();
  out->push_back([this, stub, call, node] {
    stub->async()->RegisterNode(
        &call->ctx, &call->req, &call->reply, [this, call, node](grpc::Status s) {
          Outgoing next;
          {
            absl::MutexLock l(&mu_);
            Node& n = nodes_[node];
            n.registering = false;
            if (s.ok()) {
              ++stats_.registrations;
              n.node_id = call->reply.node_id();
              if (call->reply.heartbeat_interval_ms() > 0) {
                n.interval = absl::Milliseconds(call->reply.heartbeat_interval_ms());
              }
              OpenSessionLocked(node, &next);
            }
            CallDoneLocked();
          }
          delete call;
          Send(std::move(next));
        });
  });
}

void SimFleet::Impl::HeartbeatLocked(int node, Outgoing* out) {
  Node& n = nodes_[node];
  // The next one, whatever becomes of this one; spread over the interval at first.
  static thread_local absl::BitGen gen;
  const absl::Duration next =
      n.node_id.empty() ? n.interval * absl::Uniform(gen, 0.5, 1.0) : n.interval;
  PushLocked({absl::Now() + next, node, true, {}, 0});
  if (n.node_id.empty()) {
    RegisterLocked(node, out);
    return;
  }
  if (n.session == nullptr) OpenSessionLocked(node, out);
  if (n.heartbeat_in_flight) return;
  n.heartbeat_in_flight = true;
  auto* call = new Call<proto::HeartbeatRequest, proto::HeartbeatReply>;
  PrepareContext(&call->ctx, options_.token, kHeartbeatTimeout);
  call->req.set_node_id(n.node_id);
  for (const auto& [job, ranks] : n.procs) {
    for (const auto& [rank, p] : ranks) *call->req.add_processes() = p;
  }
  call->sent = absl::Now();
  CallStarted();
  proto::Scheduler::Stub* stub = n.stub.get();
  out->push_back([this, stub, call, node] {
    stub->async()->Heartbeat(
        &call->ctx, &call->req, &call->reply, [this, call, node](grpc::Status s) {
          Outgoing next;
          {
            absl::MutexLock l(&mu_);
            Node& n = nodes_[node];
            n.heartbeat_in_flight = false;
            if (!s.ok()) {
              ++stats_.heartbeat_errors;
            } else {
              ++stats_.heartbeats;
              latencies_.push_back(absl::ToDoubleMilliseconds(absl::Now() - call->sent));
              for (const auto& f : call->reply.forget()) {
                auto it = n.procs.find({f.job_id(), f.generation()});
                if (it == n.procs.end()) continue;
                bool running = false;
                for (const auto& [rank, p] : it->second) running = running || p.running();
                if (!running) n.procs.erase(it);
              }
              if (!call->reply.known()) {
                // Unknown (declared dead, or a new scheduler): register again, keeping
                // the node id and reporting the process table.
                ++stats_.unknown_replies;
                n.session_open = false;
                if (n.session != nullptr) next.push_back([s = n.session] { s->Cancel(); });
                RegisterLocked(node, &next);
              }
            }
            CallDoneLocked();
          }
          delete call;
          Send(std::move(next));
        });
  });
}

void SimFleet::Impl::OpenSessionLocked(int node, Outgoing* out) {
  Node& n = nodes_[node];
  if (stopping_) return;
  // A replaced session is cancelled (the scheduler would end it anyway).
  if (n.session != nullptr) out->push_back([s = n.session] { s->Cancel(); });
  auto s = std::make_shared<Session>(this, node);
  n.session = s;
  n.session_open = false;
  CallStarted();
  proto::Scheduler::Stub* stub = n.stub.get();
  out->push_back([s, stub, token = options_.token, id = n.node_id] { s->Begin(stub, token, id); });
}

void SimFleet::Impl::SessionEnded(int node, Session* s, const grpc::Status&) {
  absl::MutexLock l(&mu_);
  Node& n = nodes_[node];
  if (n.session.get() == s) {
    // Opened again with the next heartbeat (a real agent backs off 100 ms to 1 s).
    n.session = nullptr;
    n.session_open = false;
  }
  CallDoneLocked();
}

int SimFleet::Impl::NodeOf(const grpc::CallbackServerContext& ctx, grpc::Status* status) {
  *status = CheckToken(ctx, options_.token);
  if (!status->ok()) return -1;
  const grpc::string_ref authority = ctx.ExperimentalGetAuthority();
  auto it = by_address_.find(std::string(authority.data(), authority.size()));
  if (it == by_address_.end()) {
    *status = grpc::Status(grpc::StatusCode::NOT_FOUND,
                           absl::StrCat("no simulated node at ", std::string(authority.data(),
                                                                              authority.size())));
    return -1;
  }
  return it->second;
}

grpc::Status SimFleet::Impl::StartProcesses(const grpc::CallbackServerContext& ctx,
                                            const proto::StartProcessesRequest& req,
                                            proto::StartProcessesReply* reply) {
  grpc::Status status;
  const int node = NodeOf(ctx, &status);
  if (node < 0) return status;
  absl::Duration runtime = options_.runtime;
  if (auto it = req.env().find(kRuntimeVariable); it != req.env().end()) {
    int64_t ms = 0;
    if (absl::SimpleAtoi(it->second, &ms)) runtime = absl::Milliseconds(ms);
  }
  const absl::Time now = absl::Now();
  absl::MutexLock l(&mu_);
  ++stats_.start_calls;
  if (stats_.first_start == absl::InfinitePast()) stats_.first_start = now;
  stats_.last_start = now;
  Node& n = nodes_[node];
  const JobGen key{req.job_id(), req.generation()};
  auto& ranks = n.procs[key];
  for (const auto& spec : req.processes()) {
    if (ranks.count(spec.rank())) continue;  // a retry: started already
    proto::ProcessStatus& p = ranks[spec.rank()];
    p.set_job_id(req.job_id());
    p.set_generation(req.generation());
    p.set_rank(spec.rank());
    p.set_pid(static_cast<int32_t>(next_pid_++));
    p.set_running(true);
    ++stats_.processes_started;
    ++stats_.running;
    if (runtime >= absl::ZeroDuration()) PushLocked({now + runtime, node, false, key, spec.rank()});
  }
  reply->set_master_port(req.master_port() == 0 ? kMasterPort : req.master_port());
  return grpc::Status::OK;
}

grpc::Status SimFleet::Impl::StopJob(const grpc::CallbackServerContext& ctx,
                                     const proto::StopJobRequest& req) {
  grpc::Status status;
  const int node = NodeOf(ctx, &status);
  if (node < 0) return status;
  Outgoing out;
  {
    absl::MutexLock l(&mu_);
    ++stats_.stop_calls;
    Node& n = nodes_[node];
    for (auto it = n.procs.lower_bound({req.job_id(), 0});
         it != n.procs.end() && it->first.first == req.job_id(); ++it) {
      if (req.generation() >= 0 && it->first.second > req.generation()) continue;
      for (auto& [rank, p] : it->second) {
        if (!p.running()) continue;
        proto::ExitInfo exit;
        exit.set_exit_code(-1);
        exit.set_signal(15);
        ExitLocked(node, it->first, &p, std::move(exit), &out);
      }
    }
  }
  Send(std::move(out));
  return grpc::Status::OK;
}

grpc::Status SimFleet::Impl::StartWorker(const grpc::CallbackServerContext& ctx,
                                         const proto::StartWorkerRequest& req,
                                         proto::StartWorkerReply* reply) {
  grpc::Status status;
  const int node = NodeOf(ctx, &status);
  if (node < 0) return status;
  absl::MutexLock l(&mu_);
  ++stats_.worker_starts;
  reply->set_worker_id(absl::StrCat("sim-worker-", req.lease_id()));
  reply->set_unix_path(absl::StrCat("/nonexistent/sim-", node, ".sock"));
  reply->set_tcp_address(nodes_[node].address);
  reply->set_pid(static_cast<int32_t>(next_pid_++));
  return grpc::Status::OK;
}

grpc::Status SimFleet::Impl::DescribeNode(const grpc::CallbackServerContext& ctx,
                                          proto::DescribeNodeReply* reply) {
  grpc::Status status;
  const int node = NodeOf(ctx, &status);
  if (node < 0) return status;
  absl::MutexLock l(&mu_);
  reply->set_node_id(nodes_[node].node_id);
  reply->set_node_ip("127.0.0.1");
  return grpc::Status::OK;
}

void SimFleet::Impl::Release() {
  Outgoing out;
  {
    absl::MutexLock l(&mu_);
    for (size_t i = 0; i < nodes_.size(); ++i) {
      for (auto& [job, ranks] : nodes_[i].procs) {
        for (auto& [rank, p] : ranks) {
          if (!p.running()) continue;
          proto::ExitInfo exit;
          exit.set_exit_code(0);
          ExitLocked(static_cast<int>(i), job, &p, std::move(exit), &out);
        }
      }
    }
  }
  Send(std::move(out));
}

void SimFleet::Impl::Stop() {
  {
    absl::MutexLock l(&mu_);
    if (stopped_) return;
    stopped_ = stopping_ = true;
    wake_.Signal();
  }
  if (loop_.joinable()) loop_.join();
  std::vector<std::shared_ptr<Session>> sessions;
  {
    absl::MutexLock l(&mu_);
    for (Node& n : nodes_) {
      if (n.session != nullptr) sessions.push_back(std::move(n.session));
    }
  }
  for (auto& s : sessions) s->Cancel();
  sessions.clear();
  {
    absl::MutexLock l(&mu_);
    // Every callback (and every session's OnDone) has run: nothing touches us after.
    mu_.Await(absl::Condition(
        +[](int64_t* in_flight) { return *in_flight == 0; }, &in_flight_));
  }
  if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
}

SimFleet::SimFleet(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SimFleet::~SimFleet() { Stop(); }

absl::StatusOr<std::unique_ptr<SimFleet>> SimFleet::Start(SimFleetOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  if (absl::Status s = impl->Start(); !s.ok()) return s;
  return std::unique_ptr<SimFleet>(new SimFleet(std::move(impl)));
}

absl::Status SimFleet::WaitReady(absl::Duration timeout) { return impl_->WaitReady(timeout); }
void SimFleet::Release() { impl_->Release(); }
SimFleetStats SimFleet::stats() { return impl_->stats(); }
std::vector<double> SimFleet::TakeHeartbeatLatencies() { return impl_->TakeHeartbeatLatencies(); }
void SimFleet::Stop() { impl_->Stop(); }

}  // namespace drover::testing
