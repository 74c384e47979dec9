// The task runtime of one process: drover::Init, and the calls task.h's templates make.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/auth.h"
#include "common/env.h"
#include "common/job_state.h"
#include "common/log.h"
#include "common/net.h"
#include "common/rpc.h"
#include "common/status.h"
#include "drover/client.h"
#include "drover/task.h"
#include "proto/scheduler.grpc.pb.h"
#include "sdk/runtime/actor_client.h"
#include "sdk/internal/runtime_internal.h"
#include "sdk/internal/tensor_internal.h"
#include "sdk/runtime/connection_loop.h"
#include "sdk/runtime/context.h"
#include "sdk/runtime/object_table.h"
#include "sdk/runtime/owner_cores.h"
#include "sdk/runtime/package.h"
#include "sdk/runtime/scheduler_outage.h"
#include "sdk/runtime/seams_grpc.h"
#include "sdk/runtime/queue_client.h"
#include "sdk/runtime/store_tensor.h"
#include "sdk/runtime/task_submitter.h"
#include "sdk/runtime/worker_server.h"

namespace drover {
namespace internal {
namespace {

// Values up to this size stay in the owner's memory; larger ones go into the store.
constexpr size_t kInlineValueLimit = 100 * 1024;
// How often Get looks again at an object it cannot read whose node may be dying.
constexpr absl::Duration kLostRecheck = absl::Milliseconds(200);
// How long one read of a value on another node waits for a node to hold it.
constexpr absl::Duration kHolderWait = absl::Seconds(1);
// How long a driver keeps asking a scheduler that cannot answer yet to register it.
constexpr absl::Duration kRegisterPatience = absl::Seconds(60);
// How long Init in a job waits for a scheduler that does not answer. The job's
// environment names the scheduler, so a cluster exists: one that does not answer is
// restarting (a head restart takes seconds). A driver outside a job does not wait:
// nothing says a cluster is there at all.
constexpr absl::Duration kInJobSchedulerPatience = absl::Seconds(20);

std::string RandomTag() {
  std::random_device rd;
  return absl::StrCat(absl::Hex(static_cast<uint32_t>(rd()), absl::kZeroPad8));
}

class Runtime;

// The process-wide state of the task runtime lives here and nowhere else: the runtime
// (g_runtime; the current one is the current context, SetCurrentRuntimeContext, since a
// Runtime is its RuntimeContext) and the object table. The cores take what they need
// as arguments (TaskSubmitter::Deps, ActorClient::Deps).

// The process's object table: lives until exit, so refs may outlive the runtime.
ObjectTable& TheObjectTable() {
  static ObjectTable* table = new ObjectTable();
  return *table;
}

absl::Mutex g_mu;
Runtime* g_runtime ABSL_GUARDED_BY(g_mu) = nullptr;

// The runtime is its context: the one current-context pointer (context.h) is also the
// current runtime, so there is no second pointer to keep in step with it.
class Runtime : public RuntimeContext {
 public:
  RuntimeContext& ctx = *this;
  // For node liveness (lost objects): the scheduler's view, cached briefly.
  std::unique_ptr<proto::Scheduler::Stub> scheduler;
  absl::Mutex nodes_mu;
  absl::Time nodes_read ABSL_GUARDED_BY(nodes_mu) = absl::InfinitePast();
  // A GetClusterStatus call of RefreshNodes is in flight.
  bool nodes_refreshing ABSL_GUARDED_BY(nodes_mu) = false;
  // A plain driver's session is attached: the scheduler pushes node changes over it
  // (ApplyPushedNodes), so the tables below are current without polling.
  bool nodes_pushed ABSL_GUARDED_BY(nodes_mu) = false;
  std::map<std::string, std::pair<bool, std::string>> nodes ABSL_GUARDED_BY(nodes_mu);  // alive, why not
  std::map<std::string, std::string> agents ABSL_GUARDED_BY(nodes_mu);  // node id -> agent address
  // Node id -> (restarts, when it last died) of its object store, from the heartbeats.
  std::map<std::string, std::pair<int64_t, absl::Time>> store_restarts ABSL_GUARDED_BY(nodes_mu);
  // Store restarts before this runtime started lost nothing of it.
  const absl::Time started = absl::Now();

  // Reads the scheduler's node table if the copy is older than 100 ms. The RPC runs
  // without nodes_mu (no lock is held across an RPC): one refresh is in flight at a
  // time, other callers wait for its result (bounded by its deadline) and the tables
  // are swapped in under the lock after. A failed read leaves the old tables.
  // Processes without a driver session (in a job, workers) poll so; a plain driver's
  // tables are pushed (ApplyPushedNodes) while its session is attached.
  void RefreshNodes() ABSL_LOCKS_EXCLUDED(nodes_mu) {
    {
      absl::MutexLock l(&nodes_mu);
      if (nodes_pushed || absl::Now() - nodes_read <= absl::Milliseconds(100)) return;
      if (nodes_refreshing) {
        nodes_mu.Await(absl::Condition(
            +[](bool* refreshing) { return !*refreshing; }, &nodes_refreshing));
        return;
      }
      nodes_refreshing = true;
    }
    grpc::ClientContext cctx;
    PrepareContext(&cctx, ctx.token, std::chrono::milliseconds(5000));
    proto::GetClusterStatusReply reply;
    const bool ok =
        scheduler->GetClusterStatus(&cctx, proto::GetClusterStatusRequest(), &reply).ok();
    std::map<std::string, std::pair<bool, std::string>> fresh;
    if (ok) {
      for (const proto::NodeInfo& n : reply.nodes()) {
        fresh[n.node_id()] = {n.state() == proto::ALIVE, n.reason()};
      }
    }
    absl::MutexLock l(&nodes_mu);
    nodes_refreshing = false;
    if (!ok) return;
    nodes = std::move(fresh);
    for (const proto::NodeInfo& n : reply.nodes()) {
      agents[n.node_id()] = n.agent_address();
      if (n.object_store().restarts() > 0) {
        store_restarts[n.node_id()] = {n.object_store().restarts(),
                                       absl::FromUnixMillis(n.object_store().last_restart_ms())};
      }
    }
    nodes_read = absl::Now();
  }

  // A notice of the driver's session: the nodes that changed (every node in the
  // session's first notice, which replaces what was known).
  void ApplyPushedNodes(const proto::DriverNotice& notice) ABSL_LOCKS_EXCLUDED(nodes_mu) {
    absl::MutexLock l(&nodes_mu);
    if (notice.attached()) nodes.clear();
    for (const proto::DriverNodeState& n : notice.nodes()) {
      nodes[n.node_id()] = {n.alive(), n.reason()};
      agents[n.node_id()] = n.agent_address();
      if (n.store_restarts() > 0) {
        store_restarts[n.node_id()] = {n.store_restarts(),
                                       absl::FromUnixMillis(n.store_last_restart_ms())};
      }
    }
    nodes_read = absl::Now();
    nodes_pushed = true;
  }
  // The session broke: poll again until it is attached again.
  void LostPushedNodes() ABSL_LOCKS_EXCLUDED(nodes_mu) {
    absl::MutexLock l(&nodes_mu);
    nodes_pushed = false;
  }

  // The address of `node_id`'s agent ("" if the scheduler does not know the node).
  std::string AgentOf(const std::string& node_id) {
    RefreshNodes();
    absl::MutexLock l(&nodes_mu);
    auto it = agents.find(node_id);
    return it == agents.end() ? "" : it->second;
  }

  // True (with why) if the object store of `node_id` died and was restarted since this
  // runtime started: objects kept there before are lost (the restarted store is empty).
  bool StoreRestarted(const std::string& node_id, std::string* why) {
    RefreshNodes();
    absl::MutexLock l(&nodes_mu);
    auto it = store_restarts.find(node_id);
    if (it == store_restarts.end() || it->second.second < started) return false;
    *why = absl::StrCat("it was lost when the object store of node ", node_id, " restarted at ",
                        absl::FormatTime("%Y-%m-%d %H:%M:%E3S %Z", it->second.second,
                                         absl::LocalTimeZone()),
                        " (restart ", it->second.first, " of that store)");
    return true;
  }

  // True (with why) if `node_id` is dead or unknown to the scheduler.
  bool NodeGone(const std::string& node_id, std::string* why) {
    RefreshNodes();
    absl::MutexLock l(&nodes_mu);
    auto it = nodes.find(node_id);
    if (it == nodes.end()) {
      *why = "the scheduler does not know it";
      return nodes_read != absl::InfinitePast();
    }
    *why = it->second.second.empty() ? "it is not alive" : it->second.second;
    return !it->second.first;
  }
  // The real collaborators of the core (seams.h), and the core wired to them.
  std::unique_ptr<GrpcScheduler> scheduler_calls;
  std::unique_ptr<SocketWorkerConnector> connector;
  std::unique_ptr<GrpcWorkerAgents> worker_agents;
  // What the user is told while the scheduler is away: one line per outage, whichever
  // of the session, the actor client and the submitter notices it first. Declared
  // before the cores, which hold it: it goes after them.
  std::unique_ptr<SchedulerOutage> outage;
  // The submitter, the actor client and the one loop that reads their connections,
  // stopped in the one safe order (owner_cores.h).
  std::unique_ptr<OwnerCores> cores;
  // A plain driver's session with the scheduler (its job ends when this ends): the
  // call in progress, and whether the driver is shutting down.
  struct Session {
    absl::Mutex mu;
    absl::CondVar stopped;
    grpc::ClientContext* call ABSL_GUARDED_BY(mu) = nullptr;
    bool stop ABSL_GUARDED_BY(mu) = false;
  };
  std::shared_ptr<Session> session = std::make_shared<Session>();
  std::thread session_thread;

  // Always shuts down (again, if drover::Shutdown did: each step is idempotent), before
  // any member goes: the cores and their loop stop in their order (owner_cores.h), and
  // a runtime that MakeRuntime gives up on after RegisterDriver started the session
  // thread has that thread joined here too.
  ~Runtime() { Shutdown(); }

  // Idempotent.
  void Shutdown() {
    // The cores shut their connections and fail what is in flight; then the loop
    // stops (it never waits on a peer, so a stopped worker cannot hold this up).
    if (cores) cores->Shutdown();
    {
      absl::MutexLock l(&session->mu);
      session->stop = true;
      if (session->call != nullptr) session->call->TryCancel();
      session->stopped.SignalAll();
    }
    if (session_thread.joinable()) session_thread.join();
  }
};

// Only runtime.cc sets the current context, and only to a Runtime.
Runtime* ActiveRuntime() { return static_cast<Runtime*>(CurrentRuntimeContext()); }

// The codec's bridge to the store: large tensors are put into this node's store.
class StoreCodecContext : public CodecContext {
 public:
  absl::StatusOr<StoredRef> Store(absl::string_view data, absl::string_view metadata) override {
    Runtime* rt = ActiveRuntime();
    if (rt == nullptr) return absl::FailedPreconditionError("drover::Init was not called");
    return rt->ctx.store->Put(rt->ctx.NewObjectId(), data, metadata);
  }
  absl::StatusOr<ValueView> Load(const StoredRef& ref) override {
    Runtime* rt = ActiveRuntime();
    if (rt == nullptr) return absl::FailedPreconditionError("drover::Init was not called");
    return rt->ctx.store->Load(ref, absl::Now() + kLoadWait);
  }
  absl::StatusOr<Buffer> LoadBuffer(const StoredRef& ref) override {
    Runtime* rt = ActiveRuntime();
    if (rt == nullptr) return absl::FailedPreconditionError("drover::Init was not called");
    DROVER_ASSIGN_OR_RETURN(object_store::ObjectRef r,
                            rt->ctx.store->GetRef(ref.object_id, ref.node_id, absl::Now() + kLoadWait));
    return TensorAccess::FromObject(std::move(r));
  }
  std::string node_id() override {
    Runtime* rt = ActiveRuntime();
    return rt == nullptr ? "" : rt->ctx.node_id;
  }

 private:
  // How long decoding waits for a stored value to reach this node.
  static constexpr absl::Duration kLoadWait = absl::Minutes(5);
};

// The runtime's codec context (installed at Init: SetRuntimeCodecContext).
CodecContext* TheStoreCodecContext() {
  static StoreCodecContext* ctx = new StoreCodecContext();
  return ctx;
}

// True if `ip` is one of this machine's addresses (or loopback).
bool IsLocalAddress(const std::string& ip) {
  if (ip.rfind("127.", 0) == 0 || ip == "::1") return true;
  struct ifaddrs* addrs = nullptr;
  if (::getifaddrs(&addrs) != 0) return false;
  bool found = false;
  for (struct ifaddrs* a = addrs; a != nullptr && !found; a = a->ifa_next) {
    if (a->ifa_addr == nullptr) continue;
    char buf[INET6_ADDRSTRLEN] = {0};
    if (a->ifa_addr->sa_family == AF_INET) {
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof(buf));
    } else if (a->ifa_addr->sa_family == AF_INET6) {
      ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr, buf, sizeof(buf));
    }
    found = ip == buf;
  }
  ::freeifaddrs(addrs);
  return found;
}

// Init's calls to the scheduler in a job (`attempt`, safe to repeat): while the
// scheduler does not answer (UNAVAILABLE, DEADLINE_EXCEEDED) they are tried again with
// back-off for up to kInJobSchedulerPatience, and the user is told once, on stderr,
// which scheduler and until when (the process's outage line; "back" when it answers).
template <typename T>
absl::StatusOr<T> WhileInJobSchedulerAway(Runtime* rt, const std::function<absl::StatusOr<T>()>& attempt) {
  const absl::Time give_up = absl::Now() + kInJobSchedulerPatience;
  Backoff pause;
  bool told = false;
  for (;;) {
    absl::StatusOr<T> r = attempt();
    if (!SchedulerOutage::IsAway(r.status())) {
      if (told) rt->outage->Back();
      return r;
    }
    if (absl::Now() + pause.Peek() >= give_up) {
      return absl::Status(r.status().code(),
                          absl::StrCat("the scheduler at ", rt->ctx.scheduler_address,
                                       " did not answer for ",
                                       absl::FormatDuration(kInJobSchedulerPatience),
                                       " while this process of job ", rt->ctx.job_id,
                                       " started: ", r.status().message()));
    }
    if (!told) {
      told = true;
      rt->outage->Away(r.status(),
                       absl::StrCat("drover::Init in job ", rt->ctx.job_id, " (until ",
                                    absl::FormatTime("%H:%M:%S %Z", give_up, absl::UTCTimeZone()),
                                    ", then it fails)"));
    }
    absl::SleepFor(pause.Next());
  }
}

// A driver outside any job: finds a node of the cluster on this machine (for its object
// store) and the address its workers are reached at.
absl::Status FindLocalNode(Runtime* rt) {
  grpc::ClientContext cctx;
  PrepareContext(&cctx, rt->ctx.token);
  proto::GetClusterStatusRequest req;
  proto::GetClusterStatusReply reply;
  absl::Status status = FromGrpcStatus(rt->scheduler->GetClusterStatus(&cctx, req, &reply));
  if (SchedulerOutage::IsAway(status)) {
    // The first call of a driver: a cluster on another transport says so here.
    std::string why = TransportMismatch(rt->ctx.scheduler_address, *rt->ctx.transport);
    if (!why.empty()) return absl::UnavailableError(why);
    // Outside a job nothing says a cluster exists, so this does not wait for one.
    return absl::Status(
        status.code(),
        absl::StrCat("no scheduler answers at ", rt->ctx.scheduler_address, " (",
                     status.message(),
                     "): start a cluster (`drover up`) or point this driver at a running one "
                     "(InitOptions::address, DROVER_ADDRESS, or the cluster file `drover up` "
                     "writes, $DROVER_HOME/cluster.json); if its head is restarting, start the "
                     "driver again once it is back"));
  }
  DROVER_RETURN_IF_ERROR(status);
  for (const proto::NodeInfo& n : reply.nodes()) {
    if (n.state() != proto::ALIVE || !IsLocalAddress(n.node_ip())) continue;
    grpc::ClientContext dctx;
    PrepareContext(&dctx, rt->ctx.token);
    proto::DescribeNodeReply d;
    auto workers = proto::Workers::NewStub(MakeChannel(n.agent_address()));
    if (!workers->DescribeNode(&dctx, proto::DescribeNodeRequest(), &d).ok()) continue;
    std::unique_ptr<object_store::Client> store;
    if (!d.store_socket().empty()) {
      absl::StatusOr<std::unique_ptr<object_store::Client>> s =
          object_store::Client::Connect(d.store_socket());
      if (s.ok()) store = *std::move(s);
    }
    rt->ctx.node_id = n.node_id();
    rt->ctx.node_ip = n.node_ip();
    rt->ctx.store = std::make_unique<StoreAccess>(std::move(store), n.node_id(), n.agent_address(),
                                                  rt->ctx.token);
    return absl::OkStatus();
  }
  rt->ctx.store = std::make_unique<StoreAccess>(nullptr, "", "", rt->ctx.token);
  return absl::OkStatus();
}

absl::Status RegisterDriver(Runtime* rt, int argc, char** argv) {
  proto::RegisterDriverRequest req;
  req.set_name(argc > 0 ? argv[0] : "driver");
  req.set_hostname(Hostname());
  req.set_pid(static_cast<int32_t>(::getpid()));
  req.set_request_id(rt->ctx.owner_tag);
  proto::RegisterDriverReply reply;
  // UNAVAILABLE (the scheduler could not store the job yet: it stands, and the same
  // request id gets the same job) and DEADLINE_EXCEEDED (a stalled scheduler) are
  // retried for a while: giving up at once (e.g. on a Redis stall during registration)
  // would leave the job registered and RUNNING with no driver to end it.
  const absl::Time give_up = absl::Now() + kRegisterPatience;
  for (absl::Duration pause = absl::Milliseconds(100);; pause = std::min(pause * 2, absl::Seconds(2))) {
    grpc::ClientContext cctx;
    PrepareContext(&cctx, rt->ctx.token);
    cctx.set_wait_for_ready(true);
    grpc::Status s = rt->ctx.leases->RegisterDriver(&cctx, req, &reply);
    const bool transient = s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                           s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    if (!transient || absl::Now() + pause >= give_up) {
      DROVER_RETURN_IF_ERROR(FromGrpcStatus(s));
      break;
    }
    absl::SleepFor(pause);
  }
  rt->ctx.job_id = reply.job_id();
  // The session: held open for the driver's life. The scheduler ends the job when it
  // breaks, so a driver that dies (even by SIGKILL) releases everything it owned.
  // When the scheduler goes away (a restart), the session is opened again once it is
  // back: with --redis the job stands and the new scheduler waits for its driver
  // (SchedulerOptions::driver_reconnect); the driver's workers run on meanwhile.
  auto attached = std::make_shared<std::atomic<int>>(0);
  proto::Leases::Stub* leases = rt->ctx.leases.get();
  const std::string job = reply.job_id();
  const std::string token = rt->ctx.token;
  std::shared_ptr<Runtime::Session> session = rt->session;
  SchedulerOutage* outage = rt->outage.get();
  // Shutdown() joins the thread before the runtime goes.
  rt->session_thread = std::thread([rt, leases, session, job, token, outage, attached] {
    proto::DriverSessionRequest sreq;
    sreq.set_job_id(job);
    Backoff pause;
    for (;;) {
      grpc::ClientContext cctx;
      cctx.AddMetadata(kTokenMetadataKey, token);
      {
        absl::MutexLock l(&session->mu);
        if (session->stop) break;
        session->call = &cctx;
      }
      std::unique_ptr<grpc::ClientReader<proto::DriverNotice>> reader = leases->DriverSession(&cctx, sreq);
      proto::DriverNotice notice;
      while (reader->Read(&notice)) {
        rt->ApplyPushedNodes(notice);
        if (!notice.attached()) continue;
        attached->store(1);
        outage->Back();
        pause.Reset();
      }
      const grpc::Status s = reader->Finish();
      rt->LostPushedNodes();
      {
        absl::MutexLock l(&session->mu);
        session->call = nullptr;
        if (session->stop) break;
      }
      // Never attached (Init says so), or refused for good (the job ended): done.
      const absl::Status why = s.ok() ? absl::OkStatus() : FromGrpcStatus(s);
      if (attached->load() != 1 || !(s.ok() || SchedulerOutage::IsAway(why))) break;
      outage->Away(why, absl::StrCat("job ", job, " (it stands if the scheduler keeps its jobs, --redis)"));
      absl::MutexLock l(&session->mu);
      if (!session->stop) session->stopped.WaitWithTimeout(&session->mu, pause.Next());
    }
    if (attached->load() != 1) attached->store(-1);
  });
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (attached->load() == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));  // the stream's first message, normally < 1 ms
  }
  if (attached->load() != 1) {
    return absl::UnavailableError("the scheduler did not attach this driver's session");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Runtime>> MakeRuntime(int argc, char** argv,
                                                     const InitOptions& options, bool worker) {
  auto rt = std::make_unique<Runtime>();
  RuntimeContext& ctx = rt->ctx;
  ctx.owner_tag = RandomTag();
  std::string scheduler = Env("DROVER_SCHEDULER_ADDRESS");
  std::string token_file = Env("DROVER_TOKEN_FILE");
  ctx.job_id = Env("DROVER_JOB_ID");
  const bool in_job = !ctx.job_id.empty() && !scheduler.empty() && !token_file.empty();
  // In a job (and in a worker) the agent's TLS files come in DROVER_TLS_*.
  TlsFiles tls{Env(kTlsCaEnv), Env(kTlsCertEnv), Env(kTlsKeyEnv)};
  if (!in_job) {
    absl::StatusOr<ClusterAddress> cluster =
        ResolveCluster(options.address, options.token_file, options.tls_ca_file);
    if (!cluster.ok()) return cluster.status();
    scheduler = cluster->address;
    token_file = cluster->token_file;
    tls = TlsFiles{cluster->tls_ca_file, "", ""};
    ctx.job_id.clear();
  }
  absl::StatusOr<std::string> token = ReadTokenFile(token_file);
  if (!token.ok()) return token.status();
  ctx.token = *token;
  ctx.scheduler_address = scheduler;
  rt->outage = std::make_unique<SchedulerOutage>(scheduler);
  DROVER_ASSIGN_OR_RETURN(ctx.transport, TransportSecurity::Load(tls));
  // Every channel this process makes (stores, collectives, the runtime's own).
  SetProcessTransport(ctx.transport);
  ctx.leases = proto::Leases::NewStub(MakeChannel(scheduler));
  rt->scheduler = proto::Scheduler::NewStub(MakeChannel(scheduler));
  if (in_job) {
    ctx.node_id = Env("DROVER_NODE_ID");
    ctx.node_ip = Env("DROVER_NODE_IP");
    std::unique_ptr<object_store::Client> store;
    const std::string socket = Env("DROVER_OBJECT_STORE_SOCKET");
    if (!socket.empty()) {
      absl::StatusOr<std::unique_ptr<object_store::Client>> s = object_store::Client::Connect(socket);
      if (!s.ok()) return s.status();
      store = *std::move(s);
    }
    ctx.store = std::make_unique<StoreAccess>(std::move(store), ctx.node_id,
                                              Env("DROVER_AGENT_ADDRESS"), ctx.token);
  } else {
    DROVER_RETURN_IF_ERROR(FindLocalNode(rt.get()));
    DROVER_RETURN_IF_ERROR(RegisterDriver(rt.get(), argc, argv));
  }
  ctx.owner = absl::StrCat(ctx.job_id, "/", ::getpid(), "@", ctx.node_id.empty() ? Hostname() : ctx.node_id);
  if (worker) {
    // A worker runs (and submits nested tasks with) the package it was started from.
    ctx.package.set_hash(Env("DROVER_PACKAGE_HASH"));
    ctx.package.set_build_id(Env("DROVER_EXPECTED_BUILD_ID"));
    for (int i = 0; i < argc; ++i) ctx.package.add_argv(argv[i]);
  } else {
    std::vector<std::string> args;
    if (!options.worker_program.empty()) {
      args.push_back(options.worker_program);
      args.insert(args.end(), options.worker_args.begin(), options.worker_args.end());
    } else {
      args.assign(argv, argv + argc);
    }
    auto prepare = [&]() -> absl::StatusOr<proto::PackageRef> {
      return PreparePackage(ctx.leases.get(), ctx.token, options.worker_program, args);
    };
    // The first call to the scheduler of a process in a job (a driver started as the
    // job's command), made while the head may be restarting.
    absl::StatusOr<proto::PackageRef> pkg =
        in_job ? WhileInJobSchedulerAway<proto::PackageRef>(rt.get(), prepare) : prepare();
    if (!pkg.ok()) return pkg.status();
    ctx.package = *std::move(pkg);
  }
  // Objects on nodes this process has no lease on are deleted through the agent the
  // scheduler lists for their node.
  Runtime* raw = rt.get();
  ctx.store->set_agent_resolver([raw](const std::string& node_id) { return raw->AgentOf(node_id); });
  rt->scheduler_calls = std::make_unique<GrpcScheduler>(&rt->ctx);
  rt->connector = std::make_unique<SocketWorkerConnector>(&rt->ctx);
  rt->worker_agents = std::make_unique<GrpcWorkerAgents>(&rt->ctx);
  rt->cores = std::make_unique<OwnerCores>(
      TaskSubmitter::Deps{IdentityOf(&rt->ctx), rt->scheduler_calls.get(), rt->connector.get(),
                          rt->worker_agents.get(), &TheObjectTable(), Clock::Real(),
                          rt->outage.get()},
      ActorClient::Deps{IdentityOf(&rt->ctx), rt->scheduler_calls.get(), rt->connector.get(),
                        rt->worker_agents.get(), &TheObjectTable(), Clock::Real(),
                        rt->ctx.scheduler_address, rt->outage.get()});
  return rt;
}

void ShutdownAtExit() { drover::Shutdown(); }

}  // namespace

void ReturnOrDeleteStored(const std::vector<StoredRef>& objects) {
  StoreObjectStorage::ReturnOrDelete(objects);
}


std::shared_ptr<RefState> FailedRef(absl::Status status) {
  Runtime* rt = ActiveRuntime();
  std::string id = rt != nullptr ? rt->ctx.NewObjectId() : "failed";
  return TheObjectTable().NewFailed(std::move(id), std::move(status));
}

std::shared_ptr<RefState> SubmitTask(const std::string& key, const CallOptions& options,
                                     std::vector<TaskArgument> args) {
  Runtime* rt = ActiveRuntime();
  if (rt == nullptr) {
    return FailedRef(absl::FailedPreconditionError("drover::Init was not called (or Shutdown was)"));
  }
  const FunctionInfo* fn = FindFunctionByKey(key);
  if (fn == nullptr || fn->kind != FunctionKind::kFunction) {
    return FailedRef(absl::InvalidArgumentError(absl::StrCat(
        "cannot run ", DescribeUnregistered(key), " as a task: ",
        fn == nullptr ? "it is not registered; add it to DROVER_REMOTE(...)"
                      : "it is an actor factory; use drover::Actor")));
  }
  auto task = std::make_shared<TaskRecord>();
  task->function = fn->name;
  task->display = options.name.empty() ? fn->name : options.name;
  task->options = options;
  task->args = std::move(args);
  task->retries_left = std::max(options.max_retries, 0);
  task->result = TheObjectTable().NewPending(rt->ctx.NewObjectId());
  task->return_id = task->result->id;
  std::shared_ptr<RefState> result = task->result;
  rt->cores->submitter().Submit(std::move(task));
  return result;
}

std::shared_ptr<RefState> PutValue(EncodedValue value) {
  Runtime* rt = ActiveRuntime();
  if (rt == nullptr) return FailedRef(absl::FailedPreconditionError("drover::Init was not called"));
  const std::string id = rt->ctx.NewObjectId();
  ObjectValue v;
  v.contained = std::move(value.stored);
  if (value.bytes.size() <= kInlineValueLimit) {
    v.inline_bytes = std::make_shared<const std::string>(std::move(value.bytes));
  } else {
    absl::StatusOr<StoredRef> s = rt->ctx.store->Put(id, value.bytes);
    if (!s.ok()) return TheObjectTable().NewFailed(id, s.status());
    v.stored = *s;
  }
  return TheObjectTable().NewReady(id, std::move(v));
}

namespace {

// How many times a lost object is made again before Get gives up.
constexpr int kMaxRebuilds = 3;

// The node among `value`'s store objects that is gone, if any ("" if none).
std::string LostNode(Runtime* rt, const ObjectValue& value, std::string* why) {
  std::vector<const StoredRef*> refs;
  if (value.stored) refs.push_back(&*value.stored);
  for (const StoredRef& c : value.contained) refs.push_back(&c);
  for (const StoredRef* r : refs) {
    if (r->node_id != rt->ctx.node_id && rt->NodeGone(r->node_id, why)) return r->node_id;
  }
  return "";
}

// The node among `value`'s store objects whose store restarted (and so lost them), if
// any ("" if none). Asked only once loading the value failed: objects made after the
// restart load. This node's store client knows of a restart it reconnected across at
// once (asked first: no RPC, and never late); the scheduler hears of any node's from
// its agent's heartbeats.
std::string LostStore(Runtime* rt, const ObjectValue& value, absl::Time made, std::string* why) {
  std::vector<const StoredRef*> refs;
  if (value.stored) refs.push_back(&*value.stored);
  for (const StoredRef& c : value.contained) refs.push_back(&c);
  for (const StoredRef* r : refs) {
    if (rt->ctx.store->LostInRestart(*r, made, why)) return r->node_id;
    if (rt->StoreRestarted(r->node_id, why)) return r->node_id;
  }
  return "";
}

// A lost value (`why` says how) is made again from its lineage, the task that made it:
// OK when that task was submitted again (wait for it), else NOT_FOUND saying why not.
absl::Status RemakeLost(Runtime* rt, const std::shared_ptr<RefState>& ref, int* rebuilds,
                        const std::string& why) {
  std::shared_ptr<TaskRecord> task = TheObjectTable().TakeLineage(ref);
  if (task != nullptr && *rebuilds < kMaxRebuilds) {
    ++*rebuilds;
    DROVER_LOG(INFO) << "object " << ref->id << " is lost: " << why << "; running " << task->display
                     << " again to make it";
    task->result = ref;
    ++task->attempt;
    task->retries_left = std::max(task->retries_left, 1);
    rt->cores->submitter().Submit(std::move(task));
    return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat(
      "object ", ref->id, " is lost: ", why, "; ",
      task == nullptr ? "it was made by Put or an actor call, which cannot be made again"
                      : absl::StrCat("it was made again ", *rebuilds, " times and lost again")));
}

}  // namespace

absl::StatusOr<ValueView> GetValue(const std::shared_ptr<RefState>& ref, absl::Duration timeout) {
  const absl::Time deadline = timeout == absl::InfiniteDuration() ? absl::InfiniteFuture()
                                                                 : absl::Now() + timeout;
  for (int rebuilds = 0;;) {
    if (!TheObjectTable().WaitDone(ref, deadline)) {
      const std::string reason = TheObjectTable().PendingReason(ref);
      return absl::DeadlineExceededError(absl::StrCat(
          "object ", ref->id, " is not ready after ", absl::FormatDuration(timeout),
          reason.empty() ? "" : absl::StrCat(" (", reason, ")")));
    }
    ObjectTable::Outcome o = TheObjectTable().Read(ref);
    if (o.state == RefState::State::kFailed) return o.error;
    if (o.cache) return *o.cache;
    Runtime* rt = ActiveRuntime();
    absl::Status failed;
    if (rt != nullptr && (o.value.stored || !o.value.contained.empty())) {
      // A value kept in a store on a node that is gone is lost: make it again from its
      // lineage (the task that made it), or say why it cannot be.
      std::string why;
      const std::string lost = LostNode(rt, o.value, &why);
      if (!lost.empty()) {
        absl::Status s = RemakeLost(rt, ref, &rebuilds,
                                    absl::StrCat("it was kept on node ", lost, ", which is gone (", why, ")"));
        if (s.ok()) continue;
        return s;
      }
    }
    if (o.value.inline_bytes) return ValueView{*o.value.inline_bytes, o.value.inline_bytes};
    if (!o.value.stored) return absl::InternalError(absl::StrCat("object ", ref->id, " has no value"));
    if (rt == nullptr) return absl::FailedPreconditionError("drover::Init was not called");
    // A stored value is listed by its node within milliseconds of being made; waiting
    // longer for a holder means its node may be dying: look at the node again, a while
    // at a time, until the deadline.
    const absl::Time attempt = std::min(deadline, absl::Now() + kHolderWait);
    absl::StatusOr<ValueView> v = rt->ctx.store->Load(*o.value.stored, attempt);
    if (v.ok()) {
      TheObjectTable().SetCache(ref, *v);
      return v;
    }
    const absl::StatusCode code = v.status().code();
    if (code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kNotFound ||
        code == absl::StatusCode::kDeadlineExceeded) {
      // Its store restarted: lost as with a lost node, and made again the same way.
      std::string why;
      const std::string lost = LostStore(rt, o.value, o.made, &why);
      if (!lost.empty()) {
        absl::Status s = RemakeLost(rt, ref, &rebuilds, why);
        if (s.ok()) continue;
        return s;
      }
    }
    if ((code != absl::StatusCode::kUnavailable && code != absl::StatusCode::kNotFound &&
         code != absl::StatusCode::kDeadlineExceeded) ||
        absl::Now() + kLostRecheck >= deadline) {
      return v.status();
    }
    if (code != absl::StatusCode::kDeadlineExceeded) absl::SleepFor(kLostRecheck);
  }
}

std::vector<size_t> WaitRefs(const std::vector<std::shared_ptr<RefState>>& refs, int num_ready,
                             absl::Duration timeout) {
  const absl::Time deadline = timeout == absl::InfiniteDuration() ? absl::InfiniteFuture()
                                                                 : absl::Now() + timeout;
  return TheObjectTable().WaitAny(refs, num_ready, deadline);
}

absl::Status CancelRef(const std::shared_ptr<RefState>& ref, bool force) {
  Runtime* rt = ActiveRuntime();
  if (rt == nullptr) return absl::FailedPreconditionError("drover::Init was not called");
  absl::Status s = rt->cores->submitter().Cancel(ref.get(), force);
  if (s.code() != absl::StatusCode::kNotFound) return s;
  if (TheObjectTable().Read(ref).state != RefState::State::kPending) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("object ", ref->id, " is not made by a task of this process (actor calls "
                   "cannot be cancelled: kill the actor)"));
}

const std::string& RefId(const RefState& ref) { return ref.id; }

std::string NewObjectId() {
  Runtime* rt = ActiveRuntime();
  return rt == nullptr ? "no-runtime" : rt->ctx.NewObjectId();
}

object_store::Client* LocalStore() {
  Runtime* rt = ActiveRuntime();
  return rt == nullptr ? nullptr : rt->ctx.store->store();
}

absl::StatusOr<object_store::ObjectRef> GetObject(const std::string& id, absl::Duration timeout) {
  Runtime* rt = ActiveRuntime();
  if (rt == nullptr) return absl::FailedPreconditionError("drover::Init was not called");
  const absl::Time deadline = absl::Now() + timeout;
  // An id the runtime made names its job ("<job>.<owner>.<n>", NewObjectId): if this
  // cluster never ran that job, the object is another cluster's and will never appear
  // here; if the job ended, its objects were freed with it. Either way, say so now
  // rather than after the timeout.
  const std::vector<std::string> parts = absl::StrSplit(id, '.');
  if (parts.size() == 3 && absl::StartsWith(parts[0], "job-") && parts[0] != rt->ctx.job_id) {
    grpc::ClientContext cctx;
    PrepareContext(&cctx, rt->ctx.token, std::chrono::milliseconds(5000));
    proto::GetJobRequest req;
    req.set_job_id(parts[0]);
    proto::GetJobReply reply;
    absl::Status s = FromGrpcStatus(rt->scheduler->GetJob(&cctx, req, &reply));
    if (s.code() == absl::StatusCode::kNotFound) {
      return absl::NotFoundError(absl::StrCat(
          "object ", id, " belongs to job ", parts[0], ", which this cluster (scheduler at ",
          rt->ctx.scheduler_address, ") has never run: it is another cluster's, and objects never leave "
          "their cluster; read it from a process of that cluster"));
    }
    if (s.ok() && IsTerminal(reply.job().state())) {
      return absl::NotFoundError(absl::StrCat("object ", id, " belongs to job ", parts[0], ", which has ended (",
                                              proto::JobState_Name(reply.job().state()),
                                              "): its objects were freed with it"));
    }
  }
  absl::StatusOr<object_store::ObjectRef> ref = rt->ctx.store->GetRef(id, "", deadline);
  if (ref.status().code() == absl::StatusCode::kDeadlineExceeded) {
    return absl::DeadlineExceededError(absl::StrCat("object ", id, " did not appear on any node of this cluster ",
                                                    "within ", absl::FormatDuration(timeout), ": ",
                                                    ref.status().message()));
  }
  return ref;
}

std::shared_ptr<ActorState> CreateActor(const std::string& factory_key, const CallOptions& options,
                                        std::vector<TaskArgument> args) {
  Runtime* rt = ActiveRuntime();
  if (rt == nullptr) {
    auto a = std::make_shared<ActorState>("uninitialized");
    return a;
  }
  return rt->cores->actors().Create(factory_key, options, std::move(args));
}

std::shared_ptr<RefState> SubmitActorTask(const std::shared_ptr<ActorState>& actor,
                                          const std::string& method_key,
                                          const CallOptions& options,
                                          std::vector<TaskArgument> args) {
  Runtime* rt = ActiveRuntime();
  if (rt == nullptr) return FailedRef(absl::FailedPreconditionError("drover::Init was not called"));
  return rt->cores->actors().Call(actor, method_key, options, std::move(args));
}

absl::StatusOr<std::shared_ptr<ActorState>> LookupActor(const std::string& name,
                                                        absl::Duration timeout) {
  Runtime* rt = ActiveRuntime();
  if (rt == nullptr) return absl::FailedPreconditionError("drover::Init was not called");
  return rt->cores->actors().Lookup(name, timeout);
}

std::shared_ptr<ActorState> ActorFromId(const std::string& actor_id) {
  Runtime* rt = ActiveRuntime();
  if (rt == nullptr) return std::make_shared<ActorState>(actor_id);
  return rt->cores->actors().FromId(actor_id);
}

const std::string& ActorId(const ActorState& actor) { return actor.id; }

absl::Status KillActor(const std::shared_ptr<ActorState>& actor) {
  Runtime* rt = ActiveRuntime();
  if (rt == nullptr) return absl::FailedPreconditionError("drover::Init was not called");
  return rt->cores->actors().Kill(actor);
}

absl::Status WaitActorReady(const std::shared_ptr<ActorState>& actor, absl::Duration timeout) {
  Runtime* rt = ActiveRuntime();
  if (rt == nullptr) return absl::FailedPreconditionError("drover::Init was not called");
  return rt->cores->actors().WaitReady(actor, timeout);
}

absl::Status WaitActorDead(const std::shared_ptr<ActorState>& actor, absl::Duration timeout) {
  Runtime* rt = ActiveRuntime();
  if (rt == nullptr) return absl::FailedPreconditionError("drover::Init was not called");
  return rt->cores->actors().WaitDead(actor, timeout);
}

}  // namespace internal

absl::Status Init(int argc, char** argv, const InitOptions& options) {
  using internal::Runtime;
  const bool worker = internal::WorkerEnvironment::Present();
  {
    absl::MutexLock l(&internal::g_mu);
    if (internal::g_runtime != nullptr) {
      return absl::AlreadyExistsError("drover::Init was called already");
    }
  }
  absl::StatusOr<std::unique_ptr<Runtime>> rt = internal::MakeRuntime(argc, argv, options, worker);
  if (!rt.ok()) {
    if (worker) {
      std::cerr << "drover worker: cannot start: " << rt.status().message() << "\n";
      std::exit(3);
    }
    return rt.status();
  }
  Runtime* r = rt->release();
  {
    absl::MutexLock l(&internal::g_mu);
    internal::g_runtime = r;
  }
  internal::SetCurrentRuntimeContext(r);
  internal::SetRuntimeCodecContext(internal::TheStoreCodecContext());
  // Captures nothing that can go: a delete left running after Shutdown (a store that
  // does not answer) finds no runtime, or one that was current, which is never freed.
  internal::TheObjectTable().set_release([](const std::vector<internal::StoredRef>& objects) {
    if (Runtime* cur = internal::ActiveRuntime()) cur->ctx.store->Delete(objects);
  });
  if (!worker) {
    static std::once_flag once;
    std::call_once(once, [] { std::atexit(internal::ShutdownAtExit); });
    return absl::OkStatus();
  }
  absl::StatusOr<internal::WorkerEnvironment> env = internal::WorkerEnvironment::Read();
  if (!env.ok()) {
    std::cerr << "drover worker: " << env.status().message() << "\n";
    std::exit(3);
  }
  int code = 0;
  {
    internal::WorkerServer server(&r->ctx, *std::move(env));
    code = server.Run();
  }
  Shutdown();
  std::exit(code);
}

void Shutdown() {
  internal::Runtime* r = nullptr;
  {
    absl::MutexLock l(&internal::g_mu);
    r = internal::g_runtime;
    internal::g_runtime = nullptr;
  }
  if (r == nullptr) return;
  // Before the job can end: queues that must outlive this driver's work.
  if (!RunningAsWorker()) internal::DrainQueuesBeforeExit();
  internal::SetRuntimeCodecContext(nullptr);
  internal::SetCurrentRuntimeContext(nullptr);
  r->Shutdown();
  // Threads of other parts may still read the context briefly: the runtime is leaked
  // on purpose (one per process).
}

bool IsInitialized() { return internal::ActiveRuntime() != nullptr; }

bool RunningAsWorker() { return internal::WorkerEnvironment::Present(); }

std::string JobId() {
  internal::Runtime* r = internal::ActiveRuntime();
  return r == nullptr ? "" : r->ctx.job_id;
}

std::string NodeId() {
  internal::Runtime* r = internal::ActiveRuntime();
  return r == nullptr ? "" : r->ctx.node_id;
}

absl::Status Get(const ObjectRef<void>& ref, absl::Duration timeout) {
  if (!ref.valid()) return absl::InvalidArgumentError("Get of an empty ObjectRef");
  absl::StatusOr<internal::ValueView> v = internal::GetValue(internal::RefAccess::State(ref), timeout);
  return v.status();
}

}  // namespace drover
