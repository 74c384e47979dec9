#include "node_agent/agent.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/files.h"
#include "common/job_state.h"
#include "common/metrics_http.h"
#include "common/status_macros.h"
#include "common/log.h"
#include "common/net.h"
#include "common/paths.h"
#include "common/rpc.h"
#include "common/spawn.h"
#include "common/status.h"
#include "common/tls.h"
#include "grpcpp/server_builder.h"
#include "node_agent/tls_bootstrap.h"
#include "proto/lease.grpc.pb.h"

namespace drover {
namespace {

constexpr auto kRegisterTimeout = std::chrono::milliseconds(5000);
constexpr auto kHeartbeatTimeout = std::chrono::milliseconds(2000);
// The store's counters a heartbeat carries: skipped (sent next time) when the store does
// not answer within this, so a stopped store never delays a heartbeat past the node
// timeout (it had up to the client's 60 s call timeout). Above the store client's
// kMinReplyWait (1 s), the least time left with which a call is sent at all.
constexpr absl::Duration kHeartbeatStoreStatsTimeout = absl::Milliseconds(1500);
constexpr auto kReportTimeout = std::chrono::milliseconds(2000);
// Exits sent in one ReportExit at most (a node that reaps thousands at once sends a
// few calls).
constexpr size_t kMaxExitsPerReport = 512;
// How often the jobs of task workers are checked (StopWorkersOfEndedJobs): a job's end
// does not reach the node when the scheduler restarted since its workers started, or
// when its StopJob could not reach this node (cut off, stopped). One GetJob per job
// with workers here.
constexpr absl::Duration kWorkerCheck = absl::Seconds(2);
constexpr absl::Duration kMinBackoff = absl::Milliseconds(100);
constexpr absl::Duration kMaxBackoff = absl::Seconds(5);

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", static_cast<int>(c));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

bool IsWildcard(const std::string& ip) { return ip == "0.0.0.0" || ip == "::" || ip == "[::]"; }

// Bytes the object store may spill: half of what the agent directory's filesystem has
// free now.
uint64_t DefaultSpillCapacity(const std::string& dir) {
  struct statvfs vfs;
  if (::statvfs(dir.c_str(), &vfs) != 0) return 0;
  return static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize / 2;
}

std::string NodeIdPath(const std::string& dir) { return absl::StrCat(dir, "/node-id"); }

// The node id an agent on `dir` registered as before ("" if none, or not an id).
std::string ReadNodeIdFile(const std::string& dir) {
  absl::StatusOr<std::string> text = ReadFile(NodeIdPath(dir));
  if (!text.ok()) return "";
  std::string id(absl::StripAsciiWhitespace(*text));
  const bool valid = !id.empty() && id.size() <= 64 &&
                     std::all_of(id.begin(), id.end(), [](char c) {
                       return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
                     });
  if (!valid) {
    DROVER_LOG(WARNING) << NodeIdPath(dir) << " holds no node id; registering as a new node";
    return "";
  }
  return id;
}

}  // namespace

void NodeAgent::OnPull(const PullRecord& pull) {
  if (pull.job_id.empty()) return;
  TimelineRecord r;
  r.kind = proto::TIMELINE_PULL;
  r.job_id = pull.job_id;
  r.node_id = node_id();
  r.object_id = PrintableObjectId(pull.object_id);
  r.source_node_id = pull.source_node;
  r.bytes = pull.bytes;
  r.start_us = absl::ToUnixMicros(pull.start);
  r.duration_us = absl::ToInt64Microseconds(pull.end - pull.start);
  if (!pull.status.ok()) {
    r.failed = true;
    r.detail = std::string(pull.status.message().substr(0, 512));
  }
  timeline_->Add(std::move(r));
}

std::string DefaultAgentDir() { return absl::StrCat(DroverHome(), "/agent-", ::getpid()); }

NodeAgent::NodeAgent(AgentOptions options) : options_(std::move(options)) {}

NodeAgent::~NodeAgent() { Shutdown(); }

std::string NodeAgent::node_id() {
  absl::MutexLock lock(&mu_);
  return node_id_;
}

bool NodeAgent::WaitRegistered(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = options_.clock->Now() + timeout;
  while (node_id_.empty()) {
    if (options_.clock->WaitWithDeadline(&cv_, &mu_, deadline)) return !node_id_.empty();
  }
  return true;
}

absl::Status NodeAgent::Start() {
  auto sched = ParseHostPort(options_.scheduler_address);
  if (!sched.ok()) return sched.status();
  std::string reach_ip;
  if (options_.bind_ip.empty() || options_.node_ip.empty()) {
    auto local = LocalAddressFor(sched->host);
    if (!local.ok()) {
      return absl::Status(local.status().code(),
                          absl::StrCat(local.status().message(),
                                       "; pass --bind-ip and --node-ip explicitly"));
    }
    reach_ip = *local;
  }
  if (options_.bind_ip.empty()) options_.bind_ip = reach_ip;
  if (options_.node_ip.empty()) {
    options_.node_ip = IsWildcard(options_.bind_ip) ? reach_ip : options_.bind_ip;
  }
  if (options_.dir.empty()) options_.dir = DefaultAgentDir();
  if (options_.launcher_path.empty()) {
    options_.launcher_path = FindDroverBinary("drover-launch");
    if (options_.launcher_path.empty()) {
      return absl::FailedPreconditionError(
          "drover-launch not found next to drover-agent, in ../node_agent/ or in PATH; "
          "install it next to drover-agent or pass --launcher");
    }
  }
  std::string log_dir = absl::StrCat(options_.dir, "/logs");
  DROVER_RETURN_IF_ERROR(MakeDirs(log_dir, 0700));
  hostname_ = Hostname();
  if (!options_.tls_ca.empty()) DROVER_RETURN_IF_ERROR(StartTls());
  remembered_node_id_ = ReadNodeIdFile(options_.dir);
  if (options_.object_store) DROVER_RETURN_IF_ERROR(StartObjectStore());

  resources_ = DiscoverResources(options_.resources, options_.discovery);
  for (const auto& w : resources_.warnings) DROVER_LOG(WARNING) << w;
  DROVER_LOG(INFO) << "resources: " << resources_.total.cpus() << " CPUs, "
                   << (resources_.total.memory_bytes() >> 20) << " MiB memory, "
                   << resources_.total.gpus() << " GPU(s)";
  for (size_t i = 0; i < resources_.gpus.size(); ++i) {
    const GpuInfo& g = resources_.gpus[i];
    DROVER_LOG(INFO) << "GPU " << i << ": " << g.name << ", " << (g.memory_bytes >> 20)
                     << " MiB, " << (g.uuid.empty() ? "no UUID" : g.uuid);
  }

  metrics_ = std::make_unique<AgentMetrics>();
  ProcessManagerOptions pmo;
  pmo.launcher_path = options_.launcher_path;
  pmo.log_dir = log_dir;
  pmo.node_ip = options_.node_ip;
  pmo.socket_ifname = InterfaceForAddress(options_.node_ip);
  pmo.token_file = options_.token_file;
  pmo.default_grace = options_.kill_grace;
  pm_ = std::make_unique<ProcessManager>(
      pmo, [this](const std::string& job_id, const proto::ExitInfo& e) { OnExit(job_id, e); });
  service_ = std::make_unique<AgentService>(options_.token, pm_.get(), options_.kill_grace);
  DROVER_RETURN_IF_ERROR(StartWorkerPool());

  grpc::ServerBuilder builder;
  int selected_port = 0;
  std::string host = options_.bind_ip.find(':') != std::string::npos &&
                             options_.bind_ip.front() != '['
                         ? absl::StrCat("[", options_.bind_ip, "]")
                         : options_.bind_ip;
  AddListeningPort(&builder, absl::StrCat(host, ":", options_.port), &selected_port);
  builder.RegisterService(service_.get());
  if (options_.local_objects != nullptr) {
    TimelineReporterOptions tro;
    tro.reporter = absl::StrCat("agent ", options_.node_ip);
    timeline_ = std::make_unique<TimelineReporter>(
        tro, SchedulerTimelineSender(options_.scheduler_address, options_.token));
    ObjectTransferOptions to;
    to.token = options_.token;
    to.scheduler_address = options_.scheduler_address;
    to.on_pull = [this](const PullRecord& pull) { OnPull(pull); };
    transfer_ = std::make_unique<ObjectTransfer>(to, options_.local_objects);
  }
  object_service_ = std::make_unique<ObjectTransferService>(options_.token, transfer_.get());
  builder.RegisterService(object_service_.get());
  builder.RegisterService(workers_service_.get());
  ObjectTransfer::ConfigureServer(&builder);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> timing;
  timing.push_back(metrics_->rpcs().InterceptorFactory());
  builder.experimental().SetInterceptorCreators(std::move(timing));
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || selected_port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", host, ":", options_.port,
                                               ": is the address local and the port free?"));
  }
  address_ = absl::StrCat(IsWildcard(options_.bind_ip) ? options_.node_ip : host, ":",
                          selected_port);
  pm_->SetWorkerEnv("DROVER_AGENT_ADDRESS", address_);
  pm_->SetWorkerEnv("DROVER_NODE_IP", options_.node_ip);
  for (const auto& [key, value] : ProcessTransport()->Environment()) pm_->SetWorkerEnv(key, value);
  if (store_) pm_->SetWorkerEnv("DROVER_OBJECT_STORE_SOCKET", store_->socket_path());
  DROVER_RETURN_IF_ERROR(StartMetrics());
  DROVER_LOG(INFO) << "node agent listening on " << address_ << " (bound " << host << ":"
                   << selected_port << "), node ip " << options_.node_ip << ", logs in "
                   << log_dir;
  started_ = true;
  SchedulerSessionOptions sso;
  sso.scheduler_address = options_.scheduler_address;
  sso.token = options_.token;
  sso.clock = options_.clock;
  session_ = std::make_unique<SchedulerSession>(sso, [this] { WriteReadyFile(); });
  session_->Start();
  if (object_reporter_) object_reporter_->Start();
  reporter_thread_ = std::thread([this] { ReporterLoop(); });
  registration_thread_ = std::thread([this] { RegistrationLoop(); });
  return absl::OkStatus();
}

void NodeAgent::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  if (!started_) return;
  if (http_) http_->Stop();
  DROVER_LOG(INFO) << "shutting down: stopping workers (grace "
                   << absl::FormatDuration(options_.kill_grace) << ")";
  pm_->StopAllAndWait(options_.kill_grace);
  pool_->Shutdown();
  task_reports_.reset();  // sends what is queued
  service_->BeginShutdown();  // after the workers: followers get their last output
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    cv_.SignalAll();
  }
  registration_thread_.join();
  reporter_thread_.join();
  session_->Stop();  // after the last exit reports: the scheduler now sees the agent go
  if (transfer_) transfer_->Shutdown();  // running pulls end; their handlers return
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_->Wait();
  // The directory forgets this node's objects, then the store goes.
  if (object_reporter_) object_reporter_->Stop();
  if (store_) {
    store_->Stop();
    const std::string socket = store_->socket_path();
    RemoveSocketDir(socket.substr(0, socket.rfind('/')), options_.dir);
  }
  pm_.reset();
  DROVER_LOG(INFO) << "node agent stopped";
}

absl::Status NodeAgent::StartTls() {
  NodeCertificateRequest req;
  req.scheduler_address = options_.scheduler_address;
  req.token = options_.token;
  req.ca_file = options_.tls_ca;
  req.dir = absl::StrCat(options_.dir, "/tls");
  req.common_name = absl::StrCat("drover node ", hostname_, " ", options_.node_ip);
  DROVER_ASSIGN_OR_RETURN(TlsFiles files, ObtainNodeCertificate(req));
  DROVER_ASSIGN_OR_RETURN(std::shared_ptr<const TransportSecurity> transport,
                          TransportSecurity::Load(files));
  SetProcessTransport(std::move(transport));
  DROVER_LOG(INFO) << "TLS: certificate " << files.cert << " issued by the head, CA "
                   << files.ca;
  return absl::OkStatus();
}

bool NodeAgent::SleepUntilOrStop(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    if (options_.clock->WaitWithDeadline(&cv_, &mu_, deadline)) break;
  }
  return stop_;
}

absl::Status NodeAgent::StartWorkerPool() {
  packages_ = std::make_unique<PackageCache>(absl::StrCat(options_.dir, "/packages"),
                                             options_.scheduler_address, options_.token);
  task_reports_ = std::make_unique<ThreadPool>(1);
  worker_checks_ = std::make_unique<ThreadPool>(1);
  auto leases = std::shared_ptr<proto::Leases::Stub>(
      proto::Leases::NewStub(MakeChannel(options_.scheduler_address)));
  WorkerPoolOptions wpo;
  wpo.dir = options_.dir;
  wpo.node_ip = options_.node_ip;
  wpo.token = options_.token;
  wpo.scheduler_address = options_.scheduler_address;
  wpo.idle_timeout = options_.worker_idle_timeout;
  wpo.kill_grace = options_.kill_grace;
  WorkerPool::Callbacks cb;
  cb.lease_returned = [this, leases](const std::string& lease_id, const std::string& reason) {
    task_reports_->Post([this, leases, lease_id, reason] {
      grpc::ClientContext ctx;
      PrepareContext(&ctx, options_.token, kReportTimeout);
      proto::ReturnWorkerLeaseRequest req;
      req.set_lease_id(lease_id);
      req.set_reason(reason);
      proto::ReturnWorkerLeaseReply reply;
      grpc::Status s = leases->ReturnLease(&ctx, req, &reply);
      if (!s.ok()) DROVER_LOG(WARNING) << "ReturnLease " << lease_id << ": " << s.error_message();
    });
  };
  cb.worker_exited = [this, leases](const std::string& worker_id, const std::string& lease_id,
                                    const std::string& actor_id, const proto::ExitInfo& exit) {
    const std::string node = node_id();
    task_reports_->Post([this, leases, node, worker_id, lease_id, actor_id, exit] {
      grpc::ClientContext ctx;
      PrepareContext(&ctx, options_.token, kReportTimeout);
      proto::ReportWorkerExitRequest req;
      req.set_node_id(node);
      req.set_worker_id(worker_id);
      req.set_lease_id(lease_id);
      req.set_actor_id(actor_id);
      *req.mutable_exit() = exit;
      proto::ReportWorkerExitReply reply;
      grpc::Status s = leases->ReportWorkerExit(&ctx, req, &reply);
      if (!s.ok()) DROVER_LOG(WARNING) << "ReportWorkerExit " << worker_id << ": " << s.error_message();
    });
  };
  pool_ = std::make_unique<WorkerPool>(wpo, pm_.get(), packages_.get(), std::move(cb));
  DROVER_RETURN_IF_ERROR(pool_->Start());
  workers_service_ = std::make_unique<WorkersService>(
      options_.token, pool_.get(), store_ ? store_->socket_path() : "", options_.node_ip);
  return absl::OkStatus();
}

void NodeAgent::StopWorkersOfEndedJobs(const std::set<std::string>& jobs) {
  if (jobs.empty()) return;
  auto stub = proto::Scheduler::NewStub(MakeChannel(options_.scheduler_address));
  for (const std::string& job : jobs) {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, options_.token, kReportTimeout);
    proto::GetJobRequest req;
    req.set_job_id(job);
    proto::GetJobReply reply;
    grpc::Status s = stub->GetJob(&ctx, req, &reply);
    const bool ended = s.ok() ? IsTerminal(reply.job().state())
                              : s.error_code() == grpc::StatusCode::NOT_FOUND;
    if (!ended) continue;
    DROVER_LOG(WARNING) << "job " << job << " has ended ("
                        << (s.ok() ? reply.job().reason() : s.error_message())
                        << ") but its task workers still ran here: stopping them";
    pool_->JobEnded(job);
    pm_->Stop(job, -1, options_.kill_grace, "the job has ended: its task workers go");
  }
}

void NodeAgent::CheckWorkersOfEndedJobs() {
  if (worker_checks_ == nullptr || worker_check_queued_.exchange(true)) return;
  worker_checks_->Post([this] {
    worker_check_queued_ = false;
    // The jobs are read when the check runs, not when it was queued.
    std::set<std::string> jobs = pool_->JobsWithWorkers();
    for (const auto& p : pm_->Snapshot()) {
      if (p.running() && WorkerPool::IsWorkerGeneration(p.generation())) jobs.insert(p.job_id());
    }
    StopWorkersOfEndedJobs(jobs);
  });
}

std::vector<proto::ProcessStatus> NodeAgent::GangSnapshot() {
  std::vector<proto::ProcessStatus> out;
  for (auto& p : pm_->Snapshot()) {
    if (!WorkerPool::IsWorkerGeneration(p.generation())) out.push_back(std::move(p));
  }
  return out;
}

void NodeAgent::OnExit(const std::string& job_id, const proto::ExitInfo& info) {
  metrics_->ProcessExited(WorkerPool::IsWorkerGeneration(info.generation()), info);
  if (WorkerPool::IsWorkerGeneration(info.generation())) {
    pool_->OnProcessExit(job_id, info);  // a task worker: the pool reports it
    return;
  }
  absl::MutexLock lock(&mu_);
  reports_.emplace_back(job_id, info);
  cv_.SignalAll();
}

void NodeAgent::ReporterLoop() {
  auto stub = proto::Scheduler::NewStub(MakeChannel(options_.scheduler_address));
  for (;;) {
    // Every exit held now, in one call: those that came while the last call was out.
    std::deque<std::pair<std::string, proto::ExitInfo>> items;
    std::string node_id;
    {
      absl::MutexLock lock(&mu_);
      while (!stop_ && reports_.empty()) cv_.Wait(&mu_);
      if (reports_.empty()) return;  // stopping, nothing left
      const size_t n = std::min(reports_.size(), kMaxExitsPerReport);
      items.assign(std::make_move_iterator(reports_.begin()),
                   std::make_move_iterator(reports_.begin() + n));
      reports_.erase(reports_.begin(), reports_.begin() + n);
      node_id = node_id_;
    }
    if (node_id.empty()) continue;  // not registered: heartbeats will carry them
    proto::ReportExitRequest req = ExitReportOf(node_id, std::move(items));
    grpc::ClientContext ctx;
    PrepareContext(&ctx, options_.token, kReportTimeout);
    proto::ReportExitReply reply;
    grpc::Status s = stub->ReportExit(&ctx, req, &reply);
    if (!s.ok()) {
      DROVER_LOG(WARNING) << "ReportExit for job " << req.job_id() << " rank "
                          << req.exit().rank() << " and " << req.exits_size()
                          << " more exits failed (" << s.error_message()
                          << "); the next heartbeat carries them";
    }
  }
}

proto::ReportExitRequest ExitReportOf(const std::string& node_id,
                                      std::deque<std::pair<std::string, proto::ExitInfo>> items) {
  proto::ReportExitRequest req;
  req.set_node_id(node_id);
  for (auto& [job_id, exit] : items) {
    if (req.job_id().empty()) {
      // The first where a scheduler without ReportExitRequest.exits looks for it.
      req.set_job_id(std::move(job_id));
      *req.mutable_exit() = std::move(exit);
      continue;
    }
    proto::ExitReport* e = req.add_exits();
    e->set_job_id(std::move(job_id));
    *e->mutable_exit() = std::move(exit);
  }
  return req;
}

bool NodeAgent::Register(proto::Scheduler::Stub* stub, bool* logged_failure) {
  proto::RegisterNodeRequest req;
  const std::string known_id = node_id();
  req.set_node_id(known_id.empty() ? remembered_node_id_ : known_id);
  req.set_hostname(hostname_);
  req.set_agent_address(address_);
  req.set_node_ip(options_.node_ip);
  *req.mutable_total() = resources_.total;
  for (int g : resources_.gpu_ids) req.add_gpu_ids(g);
  for (const auto& n : resources_.gpu_names) req.add_gpu_names(n);
  for (const auto& w : resources_.warnings) req.add_warnings(w);
  service_->FenceStarts();  // every start is in the table below, or refused
  for (auto& p : GangSnapshot()) *req.add_processes() = std::move(p);
  if (pool_ != nullptr) {
    for (auto& l : pool_->HeldLeases()) *req.add_leases() = std::move(l);
  }
  req.set_metrics_address(metrics_address_);
  grpc::ClientContext ctx;
  PrepareContext(&ctx, options_.token, kRegisterTimeout);
  proto::RegisterNodeReply reply;
  grpc::Status s = stub->RegisterNode(&ctx, req, &reply);
  if (!s.ok() || reply.node_id().empty()) {
    if (!*logged_failure) {
      // A scheduler that answers, but over another transport, will not come round.
      const std::string mismatch =
          s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                  s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
              ? TransportMismatch(options_.scheduler_address, *ProcessTransport())
              : "";
      DROVER_LOG(WARNING) << "cannot register with the scheduler at "
                          << options_.scheduler_address << ": "
                          << (s.ok() ? "empty node id in reply" : s.error_message())
                          << (mismatch.empty() ? "" : absl::StrCat(" (", mismatch, ")"))
                          << "; retrying until it answers";
      *logged_failure = true;
    }
    return false;
  }
  if (reply.node_id() != remembered_node_id_) {
    if (absl::Status w = WriteFileAtomic(NodeIdPath(options_.dir), reply.node_id() + "\n");
        w.ok()) {
      remembered_node_id_ = reply.node_id();
    } else {
      DROVER_LOG(WARNING) << "cannot remember the node id: " << w
                          << "; an agent started again on " << options_.dir
                          << " will be a new node";
    }
  }
  bool first;
  {
    absl::MutexLock lock(&mu_);
    first = node_id_.empty();
    node_id_ = reply.node_id();
    heartbeat_interval_ms_ = reply.heartbeat_interval_ms() > 0 ? reply.heartbeat_interval_ms()
                                                                : 1000;
    cv_.SignalAll();
  }
  pm_->SetNodeId(reply.node_id());
  service_->SetNodeId(reply.node_id());
  service_->SetRegistration(reply.registration());
  workers_service_->SetNodeId(reply.node_id());
  if (transfer_) transfer_->SetNodeId(reply.node_id());
  if (object_reporter_) {
    // A scheduler that did not know us has an empty directory: tell it everything.
    object_reporter_->SetNodeId(reply.node_id());
    object_reporter_->Resync();
  }
  DROVER_LOG(INFO) << (first ? "registered" : "re-registered") << " with "
                   << options_.scheduler_address << " as " << reply.node_id()
                   << " (heartbeat every " << reply.heartbeat_interval_ms() << " ms, "
                   << req.processes_size() << " process(es) held)";
  *logged_failure = false;
  if (!first) CheckWorkersOfEndedJobs();
  session_->Registered(reply.node_id());  // writes the ready file once open
  return true;
}

std::string NodeAgent::object_store_socket() const {
  return store_ ? store_->socket_path() : "";
}

pid_t NodeAgent::object_store_pid() const { return store_ ? store_->pid() : 0; }

absl::Status NodeAgent::StartObjectStore() {
  StoreSupervisorOptions so;
  so.binary = options_.object_store_binary;
  DROVER_ASSIGN_OR_RETURN(so.socket_path, StoreSocketPath(options_.dir));
  so.capacity = options_.object_store_memory;
  so.spill_dir = absl::StrCat(options_.dir, "/spill");
  so.spill_capacity = DefaultSpillCapacity(options_.dir);
  if (so.spill_capacity == 0) so.spill_dir.clear();
  so.log_path = absl::StrCat(options_.dir, "/object-store.log");
  store_ = std::make_unique<StoreSupervisor>(so);
  if (absl::Status s = store_->Start(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("cannot start this node's object store: ",
                                               s.message(),
                                               " (run the agent with --no-object-store to "
                                               "go without one)"));
  }
  store_objects_ = std::make_unique<StoreLocalObjects>(so.socket_path);
  if (options_.local_objects == nullptr) options_.local_objects = store_objects_.get();
  ObjectReporterOptions ro;
  ro.socket_path = so.socket_path;
  ro.scheduler_address = options_.scheduler_address;
  ro.token = options_.token;
  object_reporter_ = std::make_unique<ObjectReporter>(ro);
  DROVER_LOG(INFO) << "object store on " << so.socket_path << " ("
                   << (so.capacity > 0 ? absl::StrCat(so.capacity >> 20, " MiB")
                                       : std::string("default size"))
                   << ", spilling to " << (so.spill_dir.empty() ? "nowhere" : so.spill_dir)
                   << ")";
  return absl::OkStatus();
}

absl::Status NodeAgent::StartMetrics() {
  AgentMetricSources sources;
  sources.node_id = [this] { return node_id(); };
  sources.resources = &resources_;
  sources.processes = pm_.get();
  sources.workers = pool_.get();
  sources.store = store_.get();
  sources.store_objects = store_objects_.get();
  sources.transfer = transfer_.get();
  metrics_->SetSources(std::move(sources));
  if (options_.metrics_port < 0) return absl::OkStatus();
  // HTTPS in a TLS cluster, with the certificate the head issued this agent.
  const TlsFiles& tls = ProcessTransport()->files();
  http_ = std::make_unique<HttpServer>(options_.token, /*threads=*/2, HttpsFiles{tls.cert, tls.key});
  ServeMetrics(http_.get(), metrics_->Sources());
  DROVER_ASSIGN_OR_RETURN(int port, http_->Start(options_.bind_ip, options_.metrics_port));
  metrics_address_ =
      HttpHostPort(IsWildcard(options_.bind_ip) ? options_.node_ip : options_.bind_ip, port);
  DROVER_LOG(INFO) << "metrics at " << http_->scheme() << "://" << metrics_address_
                   << "/metrics";
  return absl::OkStatus();
}

void NodeAgent::WriteReadyFile() {
  if (options_.ready_file.empty()) return;
  std::string json = absl::StrCat("{\"node_id\":", JsonString(node_id()),
                                  ",\"address\":", JsonString(address_),
                                  ",\"pid\":", ::getpid(), "}\n");
  if (absl::Status s = WriteFileAtomic(options_.ready_file, json); !s.ok()) {
    DROVER_LOG(ERROR) << "cannot write ready file: " << s;
  }
}

void NodeAgent::RegistrationLoop() {
  auto stub = proto::Scheduler::NewStub(MakeChannel(options_.scheduler_address));
  bool registered = false;
  bool logged_failure = false;
  absl::Duration backoff = kMinBackoff;
  Clock* const clock = options_.clock;
  absl::Time next_prune = clock->Now();
  absl::Time next_worker_check = clock->Now() + kWorkerCheck;
  for (;;) {
    // Timers run from when an attempt starts, not from when its RPC returns.
    const absl::Time attempt = clock->Now();
    if (options_.log_retention > absl::ZeroDuration() && attempt >= next_prune) {
      pm_->PruneLogs(options_.log_retention);
      next_prune = clock->Now() + std::min(absl::Hours(1), options_.log_retention);
    }
    if (registered && attempt >= next_worker_check && pool_ != nullptr) {
      next_worker_check = attempt + kWorkerCheck;
      CheckWorkersOfEndedJobs();
    }
    if (!registered) {
      registered = Register(stub.get(), &logged_failure);
      if (registered) {
        backoff = kMinBackoff;
      } else {
        if (SleepUntilOrStop(attempt + backoff)) return;
        backoff = std::min(backoff * 2, kMaxBackoff);
        continue;
      }
    } else {
      proto::HeartbeatRequest req;
      req.set_node_id(node_id());
      for (auto& p : GangSnapshot()) *req.add_processes() = std::move(p);
      if (store_objects_) {
        if (auto stats = store_objects_->Stats(kHeartbeatStoreStatsTimeout); stats.ok()) {
          *req.mutable_object_store() = StoreUsage(*stats);
        }
      }
      if (store_) {
        // Sent even while the store is down: clients learn from it that their objects
        // on this node were lost (sdk/runtime/runtime.cc, GetValue).
        req.mutable_object_store()->set_restarts(store_->restarts());
        if (absl::Time died = store_->last_death(); died != absl::InfinitePast()) {
          req.mutable_object_store()->set_last_restart_ms(absl::ToUnixMillis(died));
        }
      }
      grpc::ClientContext ctx;
      PrepareContext(&ctx, options_.token, kHeartbeatTimeout);
      proto::HeartbeatReply reply;
      grpc::Status s = stub->Heartbeat(&ctx, req, &reply);
      if (!s.ok()) {
        if (!logged_failure) {
          DROVER_LOG(WARNING) << "heartbeat to " << options_.scheduler_address
                              << " failed: " << s.error_message() << "; will keep trying";
          logged_failure = true;
        }
      } else {
        if (logged_failure) {
          DROVER_LOG(INFO) << "scheduler reachable again";
        }
        logged_failure = false;
        for (const auto& f : reply.forget()) pm_->Forget(f.job_id(), f.generation());
        if (!reply.known()) {
          DROVER_LOG(WARNING) << "scheduler does not know node " << req.node_id()
                              << " (it restarted or declared us dead): registering again";
          registered = false;
          continue;
        }
      }
    }
    int64_t interval_ms;
    {
      absl::MutexLock lock(&mu_);
      interval_ms = heartbeat_interval_ms_;
    }
    if (SleepUntilOrStop(attempt + absl::Milliseconds(interval_ms))) return;
  }
}

}  // namespace drover
