// drover-scheduler: the head daemon, in named steps: parse the flags, build the
// options (token, state store), start the services (core, leases, TLS, HTTP, gRPC),
// wait for SIGTERM/SIGINT, shut down.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/auth.h"
#include "common/daemon.h"
#include "common/paths.h"
#include "common/files.h"
#include "common/http_server.h"
#include "common/log.h"
#include "common/metrics_http.h"
#include "common/net.h"
#include "common/rpc.h"
#include "common/tls.h"
#include "common/tls_ca.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "scheduler/dashboard.h"
#include "scheduler/dashboard_auth.h"
#include "scheduler/job_timeline.h"
#include "scheduler/lease_manager.h"
#include "scheduler/leases_service.h"
#include "scheduler/package_store.h"
#include "scheduler/scheduler_core.h"
#include "scheduler/scheduler_metrics.h"
#include "scheduler/scheduler_service.h"

namespace drover {
namespace {

// The command line.
struct SchedulerFlags {
  std::string bind = "127.0.0.1", advertise, token_file, redis, redis_prefix = "drover:",
              ready_file, package_dir, tls_dir, redis_password_file;
  int port = 0, metrics_port = 0;
  TimelineLimits timeline_limits;
  LeaseManagerOptions lease_options;
  int64_t lease_request_memory_ms = absl::ToInt64Milliseconds(lease_options.request_memory);
  int64_t node_timeout_ms = 10000, heartbeat_ms = 500, kill_grace_ms = 5000,
          abort_notice_ms = 3000, session_grace_ms = 1000, redis_wait_ms = 30000;
};

// Step 1. Fills `f`; an exit code if the process should end here (--help, a parse
// error: CLI11 has printed why).
std::optional<int> ParseFlags(int argc, char** argv, SchedulerFlags& f) {
  CLI::App app{"drover-scheduler: the head of a drover cluster"};
  app.add_option("--bind", f.bind, "IP address to listen on (0.0.0.0 for all)");
  app.add_option("--port", f.port, "TCP port (0 picks a free one)")->check(CLI::Range(0, 65535));
  app.add_option("--metrics-port", f.metrics_port,
                 "port of the HTTP server for Prometheus' /metrics and the dashboard (both "
                 "need the cluster token or a `drover dashboard` login); 0 picks a free one, "
                 "-1 serves none")
      ->check(CLI::Range(-1, 65535));
  app.add_option("--advertise", f.advertise,
                 "address agents and workers use (default: bind:port)");
  app.add_option("--token-file", f.token_file, "cluster token file, created 0600 if missing")
      ->default_str("$DROVER_HOME/token");
  app.add_option("--redis", f.redis, "HOST:PORT of Redis for durable state (default: in memory)");
  app.add_option("--redis-prefix", f.redis_prefix, "key prefix in Redis");
  app.add_option("--redis-password-file", f.redis_password_file,
                 "file (mode 600) holding the password of a Redis with `requirepass`; sent "
                 "with AUTH on every connection (never take a secret on the command line)");
  app.add_option("--redis-wait-ms", f.redis_wait_ms,
                 "at start, wait this long for a Redis that does not answer yet (started "
                 "beside the head, restarting) before giving up; 0 gives up at once")
      ->check(CLI::Range(int64_t{0}, int64_t{3600000}));
  app.add_option("--node-timeout-ms", f.node_timeout_ms, "declare a silent node dead after this")
      ->check(CLI::Range(int64_t{100}, int64_t{3600000}));
  app.add_option("--session-grace-ms", f.session_grace_ms,
                 "declare a node dead this long after its agent's connection closed (the "
                 "agent process died), unless the agent opens a new session first")
      ->check(CLI::Range(int64_t{0}, int64_t{600000}));
  app.add_option("--heartbeat-ms", f.heartbeat_ms, "agents' heartbeat interval")
      ->check(CLI::Range(int64_t{10}, int64_t{60000}));
  app.add_option("--kill-grace-ms", f.kill_grace_ms, "SIGTERM to SIGKILL grace for workers")
      ->check(CLI::Range(int64_t{0}, int64_t{600000}));
  app.add_option("--max-queued-leases", f.lease_options.max_queued,
                 "task lease requests queued at most (~0.5 KB each); beyond, requests are "
                 "refused RESOURCE_EXHAUSTED")
      ->check(CLI::Range(size_t{1}, size_t{100000000}));
  app.add_option("--lease-request-memory-ms", f.lease_request_memory_ms,
                 "forget a task lease request nobody asked about for this long (a queued "
                 "one leaves the queue; an unclaimed granted lease is returned)")
      ->check(CLI::Range(int64_t{1000}, int64_t{86400000}));
  app.add_option("--abort-notice-ms", f.abort_notice_ms,
                 "after a failure, how long processes that watch their job generation "
                 "(collective groups) get to abort and exit on their own before SIGTERM")
      ->check(CLI::Range(int64_t{0}, int64_t{600000}));
  app.add_option("--ready-file", f.ready_file, "write {\"address\":...} here once serving");
  app.add_option("--package-dir", f.package_dir,
                 "where task programs uploaded by drivers are kept (default: beside the token "
                 "file, in packages/)");
  app.add_option("--tls-dir", f.tls_dir,
                 "encrypt every connection of the cluster with TLS: the cluster CA's "
                 "directory (ca.crt, ca.key; a new CA is made there if it has none). Agents "
                 "and clients need a copy of its ca.crt");
  app.add_option("--timeline-reported-per-job", f.timeline_limits.activity_per_job,
                 "reported timeline events (tasks, actor calls, pulls, collectives) kept per "
                 "job; the oldest go first, counted as dropped")
      ->check(CLI::Range(size_t{0}, size_t{1000000}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  f.timeline_limits.activity_total =
      std::max(f.timeline_limits.activity_total, f.timeline_limits.activity_per_job);
  f.lease_options.request_memory = absl::Milliseconds(f.lease_request_memory_ms);
  if (f.token_file.empty()) f.token_file = DroverHome() + "/token";
  if (f.package_dir.empty()) {
    f.package_dir = f.token_file.substr(0, f.token_file.find_last_of('/') + 1) + "packages";
  }
  return std::nullopt;
}

// Step 2a. The core's options from the flags.
SchedulerOptions BuildOptions(const SchedulerFlags& f) {
  SchedulerOptions options;
  options.node_timeout = absl::Milliseconds(f.node_timeout_ms);
  options.session_grace = absl::Milliseconds(f.session_grace_ms);
  options.heartbeat_interval = absl::Milliseconds(f.heartbeat_ms);
  options.kill_grace = absl::Milliseconds(f.kill_grace_ms);
  options.abort_notice = absl::Milliseconds(f.abort_notice_ms);
  // Fault points for tests (SchedulerOptions): never set in production.
  if (const char* v = std::getenv("DROVER_TEST_CRASH_AFTER_START"); v != nullptr) {
    options.test_crash_after_start = std::string(v) == "1";
    options.test_crash_after_master_start = std::string(v) == "master";
  }
  int64_t delay_ms = 0;
  if (const char* v = std::getenv("DROVER_TEST_STORE_DELAY_MS");
      v != nullptr && absl::SimpleAtoi(v, &delay_ms) && delay_ms > 0) {
    options.test_store_delay = absl::Milliseconds(delay_ms);
  }
  if (options.test_crash_after_start || options.test_crash_after_master_start ||
      options.test_store_delay > absl::ZeroDuration()) {
    DROVER_LOG(WARNING) << "test fault points on: crash after a start "
                        << options.test_crash_after_start << ", after a master's start "
                        << options.test_crash_after_master_start << ", store delay "
                        << options.test_store_delay;
  }
  return options;
}

// Step 2b. Where the cluster's state lives: Redis (--redis), waited for up to
// --redis-wait-ms, or this process's memory.
absl::StatusOr<std::unique_ptr<StateStore>> OpenStateStore(const SchedulerFlags& f) {
  // Nothing reloads its job records: they end with this process.
  if (f.redis.empty()) return NewMemoryStateStore(/*keep_jobs=*/false);
  absl::StatusOr<HostPort> hp = ParseHostPort(f.redis);
  if (!hp.ok()) return absl::InvalidArgumentError(absl::StrCat("--redis: ", hp.status().message()));
  std::string redis_password;
  if (!f.redis_password_file.empty()) {
    absl::StatusOr<std::string> pw = ReadOwnerOnlyFile(f.redis_password_file, "Redis password file");
    if (!pw.ok()) {
      return absl::Status(pw.status().code(),
                          absl::StrCat("--redis-password-file: ", pw.status().message()));
    }
    redis_password = std::string(absl::StripAsciiWhitespace(*pw));
    if (redis_password.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--redis-password-file: ", f.redis_password_file, " is empty"));
    }
  }
  // A Redis started beside the head (a service manager starts both at once) may not
  // listen yet: retry what may pass by itself, for --redis-wait-ms.
  const absl::Duration patience = absl::Milliseconds(f.redis_wait_ms);
  const absl::Time give_up = absl::Now() + patience;
  auto r = NewRedisStateStore(hp->host, hp->port, f.redis_prefix, redis_password);
  for (bool said = false; !r.ok() && absl::IsUnavailable(r.status()) && absl::Now() < give_up;
       said = true) {
    if (!said) {
      DROVER_LOG(WARNING) << r.status().message() << "; waiting up to "
                          << absl::FormatDuration(patience) << " for it (--redis-wait-ms)";
    }
    absl::SleepFor(absl::Milliseconds(200));
    r = NewRedisStateStore(hp->host, hp->port, f.redis_prefix, redis_password);
  }
  if (!r.ok() && patience > absl::ZeroDuration()) {
    return absl::Status(r.status().code(),
                        absl::StrCat(r.status().message(), " (waited ",
                                     absl::FormatDuration(patience), ", --redis-wait-ms)"));
  }
  return r;
}

// Steps 3 and 5: everything the head runs, started in order and stopped in order.
// Members are declared in the order they are built, so that they are destroyed in the
// reverse one.
class SchedulerDaemon {
 public:
  SchedulerDaemon(const SchedulerFlags& flags, std::string token)
      : flags_(flags), token_(std::move(token)), options_(BuildOptions(flags)) {}

  // Step 3. Errors name the flag to change.
  absl::Status Start(std::unique_ptr<StateStore> store) {
    if (absl::Status s = StartCore(std::move(store)); !s.ok()) return s;
    if (absl::Status s = SetUpTls(); !s.ok()) return s;
    packages_ = std::make_unique<PackageStore>(flags_.package_dir);
    core_->SetLeaseManager(leases_.get());
    leases_service_ = std::make_unique<LeasesService>(core_.get(), leases_.get(),
                                                      packages_.get(), token_);
    service_->SetTimeline(&timeline_);
    if (absl::Status s = StartHttp(); !s.ok()) return s;
    if (absl::Status s = StartGrpc(); !s.ok()) return s;
    AnnounceAndWriteReadyFile();
    return absl::OkStatus();
  }

  // Step 5.
  void Shutdown() {
    http_->Stop();
    // First the agents' sessions, so that their end is not taken for the agents' death.
    service_->BeginShutdown();
    leases_service_->BeginShutdown();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    leases_->Stop();
    core_->SetLeaseManager(nullptr);
    core_->Stop();
  }

 private:
  // The core, the lease manager, the metrics and the scheduler service; the state
  // loaded from `store`.
  absl::Status StartCore(std::unique_ptr<StateStore> store) {
    // What happened to each job, in memory (bounded): timelines, the dashboard, metrics.
    options_.timeline = &timeline_;
    core_ = std::make_unique<SchedulerCore>(options_, std::move(store),
                                            NewGrpcAgentClient(token_));
    leases_ = std::make_unique<LeaseManager>(core_->resource_book(), NewGrpcWorkerClient(token_),
                                             options_.clock, flags_.lease_options);
    leases_->SetTimeline(&timeline_);
    metrics_ = std::make_unique<SchedulerMetrics>(core_.get(), leases_.get());
    timeline_.SetListener(metrics_->TimelineListener());
    absl::Status started = core_->Start();
    // Actors saved by an earlier scheduler (after the jobs: an ended job's actors are dead).
    if (started.ok()) started = leases_->Recover();
    if (!started.ok()) {
      return absl::Status(started.code(),
                          absl::StrCat("cannot load state: ", started.message()));
    }
    service_ = std::make_unique<SchedulerService>(core_.get(), token_);
    return absl::OkStatus();
  }

  // TLS (--tls-dir): the CA signs the agents' certificates; the scheduler gets one of
  // its own. Plain text otherwise (not whatever DROVER_TLS_* it inherited).
  absl::Status SetUpTls() {
    SetProcessTransport(TransportSecurity::Plaintext());
    if (flags_.tls_dir.empty()) return absl::OkStatus();
    auto loaded = CertificateAuthority::LoadOrCreate(flags_.tls_dir);
    absl::StatusOr<TlsFiles> files =
        loaded.ok() ? (*loaded)->IssueFiles(flags_.tls_dir, "scheduler") : loaded.status();
    auto transport = files.ok() ? TransportSecurity::Load(*files)
                                : absl::StatusOr<std::shared_ptr<const TransportSecurity>>(
                                      files.status());
    if (!transport.ok()) {
      return absl::Status(transport.status().code(),
                          absl::StrCat("--tls-dir: ", transport.status().message()));
    }
    ca_ = *std::move(loaded);
    SetProcessTransport(*transport);
    service_->SetCertificateAuthority(ca_.get());
    return absl::OkStatus();
  }

  // /metrics and the dashboard, before the gRPC server: CreateDashboardLogin names it.
  // HTTPS in a TLS cluster, with the scheduler's certificate.
  absl::Status StartHttp() {
    // Listening on every interface: advertise a real address, not the hostname (which
    // on stock Debian resolves to 127.0.1.1, unreachable from other machines).
    host_ = flags_.bind;
    if (flags_.bind == "0.0.0.0") {
      host_ = FirstNonLoopbackAddress();
      if (host_.empty()) host_ = Hostname();
      DROVER_LOG(INFO) << "advertising " << host_ << " (pass --advertise HOST:PORT to choose)";
    }
    const TlsFiles& tls_files = ProcessTransport()->files();
    http_ = std::make_unique<HttpServer>(token_, /*threads=*/8,
                                         HttpsFiles{tls_files.cert, tls_files.key});
    dashboard_ = std::make_unique<DashboardAuth>(options_.clock);
    if (flags_.metrics_port < 0) return absl::OkStatus();
    ServeMetrics(http_.get(), metrics_->Sources());
    ServeDashboard(http_.get(), {core_.get(), leases_.get(), &timeline_, dashboard_.get(), token_});
    absl::StatusOr<int> http_port = http_->Start(flags_.bind, flags_.metrics_port);
    if (!http_port.ok()) {
      return absl::Status(http_port.status().code(),
                          absl::StrCat("--metrics-port: ", http_port.status().message()));
    }
    std::string http_host = host_;
    if (auto hp = ParseHostPort(flags_.advertise); !flags_.advertise.empty() && hp.ok()) {
      http_host = hp->host;
    }
    http_address_ = HttpHostPort(http_host, *http_port);
    service_->SetHttp(dashboard_.get(), http_address_, http_->scheme());
    return absl::OkStatus();
  }

  absl::Status StartGrpc() {
    grpc::ServerBuilder builder;
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> timing;
    timing.push_back(metrics_->rpcs().InterceptorFactory());
    builder.experimental().SetInterceptorCreators(std::move(timing));
    int selected_port = 0;
    AddListeningPort(&builder, absl::StrCat(flags_.bind, ":", flags_.port), &selected_port);
    builder.RegisterService(service_.get());
    builder.RegisterService(leases_service_.get());
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || selected_port == 0) {
      return absl::UnavailableError(absl::StrCat("cannot listen on ", flags_.bind, ":",
                                                 flags_.port, " (in use? pick another --port)"));
    }
    address_ = flags_.advertise.empty() ? absl::StrCat(host_, ":", selected_port)
                                        : flags_.advertise;
    core_->SetAddress(address_);
    return absl::OkStatus();
  }

  void AnnounceAndWriteReadyFile() {
    if (!http_address_.empty()) {
      DROVER_LOG(INFO) << "metrics at " << http_->scheme() << "://" << http_address_
                       << "/metrics, dashboard at " << http_->scheme() << "://"
                       << http_address_ << "/ (`drover dashboard` prints a login link)";
    }
    DROVER_LOG(INFO) << "serving at " << address_ << " (state: "
                     << core_->ClusterStatus().state_backend() << ", token file "
                     << flags_.token_file
                     << (ca_ ? absl::StrCat(", TLS with the CA in ", ca_->cert_path())
                             : std::string(", plain text"))
                     << ")";
    if (flags_.ready_file.empty()) return;
    std::string json =
        absl::StrCat("{\"address\":\"", address_, "\",\"pid\":", getpid(),
                     ",\"token_file\":\"", flags_.token_file,
                     ca_ ? absl::StrCat("\",\"tls_ca\":\"", ca_->cert_path()) : "",
                     "\",\"metrics_address\":\"", http_address_, "\"}\n");
    if (absl::Status s = WriteFileAtomic(flags_.ready_file, json, 0600); !s.ok()) {
      DROVER_LOG(ERROR) << s;
    }
  }

  const SchedulerFlags flags_;
  const std::string token_;
  SchedulerOptions options_;
  JobTimeline timeline_{options_.clock, flags_.timeline_limits};
  std::unique_ptr<SchedulerCore> core_;
  std::unique_ptr<LeaseManager> leases_;
  std::unique_ptr<SchedulerMetrics> metrics_;
  std::unique_ptr<SchedulerService> service_;
  std::unique_ptr<CertificateAuthority> ca_;
  std::unique_ptr<PackageStore> packages_;
  std::unique_ptr<LeasesService> leases_service_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<DashboardAuth> dashboard_;
  std::unique_ptr<grpc::Server> server_;
  std::string host_, http_address_, address_;
};

// Step 4. Returns the stop signal that came.
int WaitForStopSignal(const sigset_t& stop_signals) {
  int sig = 0;
  while (sigwait(&stop_signals, &sig) != 0) {
  }
  return sig;
}

}  // namespace
}  // namespace drover

int main(int argc, char** argv) {
  // Before any thread starts; the end of main waits for them.
  const sigset_t stop_signals = drover::BlockStopSignals();
  drover::SetLogTag("scheduler");
  // Debian's Abseil checks every lock acquisition for lock-order cycles (a debug aid
  // that cost a tenth of the scheduler's CPU at 1,000 nodes: docs/scaling.md). The
  // tests keep it on, where it finds such bugs.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  drover::SchedulerFlags flags;
  if (std::optional<int> exit_code = drover::ParseFlags(argc, argv, flags)) return *exit_code;
  auto fail = [](const absl::Status& s) {
    std::cerr << "drover-scheduler: " << s.message() << "\n";
    return 2;
  };
  absl::StatusOr<std::string> token = drover::LoadOrCreateTokenFile(flags.token_file);
  if (!token.ok()) return fail(token.status());
  absl::StatusOr<std::unique_ptr<drover::StateStore>> store = drover::OpenStateStore(flags);
  if (!store.ok()) return fail(store.status());
  drover::SchedulerDaemon daemon(flags, *std::move(token));
  if (absl::Status s = daemon.Start(*std::move(store)); !s.ok()) return fail(s);

  const int sig = drover::WaitForStopSignal(stop_signals);
  DROVER_LOG(INFO) << "received " << strsignal(sig) << "; shutting down";
  daemon.Shutdown();
  return 0;
}
