// drover-scheduler: the head daemon. Parses flags, builds the core and service, serves
// until SIGTERM/SIGINT.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
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


int main(int argc, char** argv) {
  // Before any thread starts; the end of main waits for them.
  sigset_t stop_signals = drover::BlockStopSignals();
  drover::SetLogTag("scheduler");
  // Debian's Abseil checks every lock acquisition for lock-order cycles (a debug aid
  // that cost a tenth of the scheduler's CPU at 1,000 nodes: docs/scaling.md). The
  // tests keep it on, where it finds such bugs.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  CLI::App app{"drover-scheduler: the head of a drover cluster"};
  std::string bind = "127.0.0.1", advertise, token_file, redis, redis_prefix = "drover:",
              ready_file, package_dir, tls_dir, redis_password_file;
  int port = 0, metrics_port = 0;
  drover::TimelineLimits timeline_limits;
  drover::LeaseManagerOptions lease_options;
  int64_t lease_request_memory_ms = absl::ToInt64Milliseconds(lease_options.request_memory);
  int64_t node_timeout_ms = 10000, heartbeat_ms = 500, kill_grace_ms = 5000,
          abort_notice_ms = 3000, session_grace_ms = 1000, redis_wait_ms = 30000;
  app.add_option("--bind", bind, "IP address to listen on (0.0.0.0 for all)");
  app.add_option("--port", port, "TCP port (0 picks a free one)")->check(CLI::Range(0, 65535));
  app.add_option("--metrics-port", metrics_port,
                 "port of the HTTP server for Prometheus' /metrics and the dashboard (both "
                 "need the cluster token or a `drover dashboard` login); 0 picks a free one, "
                 "-1 serves none")
      ->check(CLI::Range(-1, 65535));
  app.add_option("--advertise", advertise, "address agents and workers use (default: bind:port)");
  app.add_option("--token-file", token_file, "cluster token file, created 0600 if missing")
      ->default_str("$DROVER_HOME/token");
  app.add_option("--redis", redis, "HOST:PORT of Redis for durable state (default: in memory)");
  app.add_option("--redis-prefix", redis_prefix, "key prefix in Redis");
  app.add_option("--redis-password-file", redis_password_file,
                 "file (mode 600) holding the password of a Redis with `requirepass`; sent "
                 "with AUTH on every connection (never take a secret on the command line)");
  app.add_option("--redis-wait-ms", redis_wait_ms,
                 "at start, wait this long for a Redis that does not answer yet (started "
                 "beside the head, restarting) before giving up; 0 gives up at once")
      ->check(CLI::Range(int64_t{0}, int64_t{3600000}));
  app.add_option("--node-timeout-ms", node_timeout_ms, "declare a silent node dead after this")
      ->check(CLI::Range(int64_t{100}, int64_t{3600000}));
  app.add_option("--session-grace-ms", session_grace_ms,
                 "declare a node dead this long after its agent's connection closed (the "
                 "agent process died), unless the agent opens a new session first")
      ->check(CLI::Range(int64_t{0}, int64_t{600000}));
  app.add_option("--heartbeat-ms", heartbeat_ms, "agents' heartbeat interval")
      ->check(CLI::Range(int64_t{10}, int64_t{60000}));
  app.add_option("--kill-grace-ms", kill_grace_ms, "SIGTERM to SIGKILL grace for workers")
      ->check(CLI::Range(int64_t{0}, int64_t{600000}));
  app.add_option("--max-queued-leases", lease_options.max_queued,
                 "task lease requests queued at most (~0.5 KB each); beyond, requests are "
                 "refused RESOURCE_EXHAUSTED")
      ->check(CLI::Range(size_t{1}, size_t{100000000}));
  app.add_option("--lease-request-memory-ms", lease_request_memory_ms,
                 "forget a task lease request nobody asked about for this long (a queued "
                 "one leaves the queue; an unclaimed granted lease is returned)")
      ->check(CLI::Range(int64_t{1000}, int64_t{86400000}));
  app.add_option("--abort-notice-ms", abort_notice_ms,
                 "after a failure, how long processes that watch their job generation "
                 "(collective groups) get to abort and exit on their own before SIGTERM")
      ->check(CLI::Range(int64_t{0}, int64_t{600000}));
  app.add_option("--ready-file", ready_file, "write {\"address\":...} here once serving");
  app.add_option("--package-dir", package_dir,
                 "where task programs uploaded by drivers are kept (default: beside the token "
                 "file, in packages/)");
  app.add_option("--tls-dir", tls_dir,
                 "encrypt every connection of the cluster with TLS: the cluster CA's "
                 "directory (ca.crt, ca.key; a new CA is made there if it has none). Agents "
                 "and clients need a copy of its ca.crt");
  app.add_option("--timeline-reported-per-job", timeline_limits.activity_per_job,
                 "reported timeline events (tasks, actor calls, pulls, collectives) kept per "
                 "job; the oldest go first, counted as dropped")
      ->check(CLI::Range(size_t{0}, size_t{1000000}));
  CLI11_PARSE(app, argc, argv);
  timeline_limits.activity_total =
      std::max(timeline_limits.activity_total, timeline_limits.activity_per_job);

  if (token_file.empty()) token_file = drover::DroverHome() + "/token";
  auto token = drover::LoadOrCreateTokenFile(token_file);
  if (!token.ok()) {
    std::cerr << "drover-scheduler: " << token.status().message() << "\n";
    return 2;
  }

  std::unique_ptr<drover::StateStore> store;
  if (redis.empty()) {
    // Nothing reloads its job records: they end with this process.
    store = drover::NewMemoryStateStore(/*keep_jobs=*/false);
  } else {
    auto hp = drover::ParseHostPort(redis);
    if (!hp.ok()) {
      std::cerr << "drover-scheduler: --redis: " << hp.status().message() << "\n";
      return 2;
    }
    std::string redis_password;
    if (!redis_password_file.empty()) {
      auto pw = drover::ReadOwnerOnlyFile(redis_password_file, "Redis password file");
      if (!pw.ok()) {
        std::cerr << "drover-scheduler: --redis-password-file: " << pw.status().message() << "\n";
        return 2;
      }
      redis_password = std::string(absl::StripAsciiWhitespace(*pw));
      if (redis_password.empty()) {
        std::cerr << "drover-scheduler: --redis-password-file: " << redis_password_file
                  << " is empty\n";
        return 2;
      }
    }
    // A Redis started beside the head (a service manager starts both at once) may not
    // listen yet: retry what may pass by itself, for --redis-wait-ms.
    const absl::Duration patience = absl::Milliseconds(redis_wait_ms);
    const absl::Time give_up = absl::Now() + patience;
    auto r = drover::NewRedisStateStore(hp->host, hp->port, redis_prefix, redis_password);
    for (bool said = false; !r.ok() && absl::IsUnavailable(r.status()) && absl::Now() < give_up;
         said = true) {
      if (!said) {
        DROVER_LOG(WARNING) << r.status().message() << "; waiting up to "
                            << absl::FormatDuration(patience) << " for it (--redis-wait-ms)";
      }
      absl::SleepFor(absl::Milliseconds(200));
      r = drover::NewRedisStateStore(hp->host, hp->port, redis_prefix, redis_password);
    }
    if (!r.ok()) {
      std::cerr << "drover-scheduler: " << r.status().message();
      if (patience > absl::ZeroDuration()) {
        std::cerr << " (waited " << absl::FormatDuration(patience) << ", --redis-wait-ms)";
      }
      std::cerr << "\n";
      return 2;
    }
    store = std::move(*r);
  }

  drover::SchedulerOptions options;
  options.node_timeout = absl::Milliseconds(node_timeout_ms);
  options.session_grace = absl::Milliseconds(session_grace_ms);
  options.heartbeat_interval = absl::Milliseconds(heartbeat_ms);
  options.kill_grace = absl::Milliseconds(kill_grace_ms);
  options.abort_notice = absl::Milliseconds(abort_notice_ms);
  // What happened to each job, in memory (bounded): timelines, the dashboard, metrics.
  drover::JobTimeline timeline(options.clock, timeline_limits);
  options.timeline = &timeline;
  auto core = std::make_unique<drover::SchedulerCore>(options, std::move(store),
                                                      drover::NewGrpcAgentClient(*token));
  lease_options.request_memory = absl::Milliseconds(lease_request_memory_ms);
  drover::LeaseManager leases(core->resource_book(), drover::NewGrpcWorkerClient(*token),
                              options.clock, lease_options);
  leases.SetTimeline(&timeline);
  drover::SchedulerMetrics metrics(core.get(), &leases);
  timeline.SetListener(metrics.TimelineListener());
  absl::Status started = core->Start();
  // Actors saved by an earlier scheduler (after the jobs: an ended job's actors are dead).
  if (started.ok()) started = leases.Recover();
  if (!started.ok()) {
    std::cerr << "drover-scheduler: cannot load state: " << started.message() << "\n";
    return 2;
  }
  drover::SchedulerService service(core.get(), *token);
  // TLS: the CA signs the agents' certificates; the scheduler gets one of its own.
  // Plain text otherwise (not whatever DROVER_TLS_* it inherited).
  drover::SetProcessTransport(drover::TransportSecurity::Plaintext());
  std::unique_ptr<drover::CertificateAuthority> ca;
  if (!tls_dir.empty()) {
    auto loaded = drover::CertificateAuthority::LoadOrCreate(tls_dir);
    absl::StatusOr<drover::TlsFiles> files =
        loaded.ok() ? (*loaded)->IssueFiles(tls_dir, "scheduler") : loaded.status();
    auto transport = files.ok() ? drover::TransportSecurity::Load(*files)
                                : absl::StatusOr<std::shared_ptr<const drover::TransportSecurity>>(
                                      files.status());
    if (!transport.ok()) {
      std::cerr << "drover-scheduler: --tls-dir: " << transport.status().message() << "\n";
      return 2;
    }
    ca = *std::move(loaded);
    drover::SetProcessTransport(*transport);
    service.SetCertificateAuthority(ca.get());
  }
  if (package_dir.empty()) {
    package_dir = token_file.substr(0, token_file.find_last_of('/') + 1) + "packages";
  }
  drover::PackageStore packages(package_dir);
  core->SetLeaseManager(&leases);
  drover::LeasesService leases_service(core.get(), &leases, &packages, *token);
  service.SetTimeline(&timeline);

  // Listening on every interface: advertise a real address, not the hostname (which
  // on stock Debian resolves to 127.0.1.1, unreachable from other machines).
  std::string host = bind;
  if (bind == "0.0.0.0") {
    host = drover::FirstNonLoopbackAddress();
    if (host.empty()) host = drover::Hostname();
    DROVER_LOG(INFO) << "advertising " << host << " (pass --advertise HOST:PORT to choose)";
  }
  // /metrics and the dashboard, before the gRPC server: CreateDashboardLogin names it.
  // HTTPS in a TLS cluster, with the scheduler's certificate.
  const drover::TlsFiles& tls_files = drover::ProcessTransport()->files();
  drover::HttpServer http(*token, /*threads=*/8, {tls_files.cert, tls_files.key});
  drover::DashboardAuth dashboard(options.clock);
  std::string http_address;
  if (metrics_port >= 0) {
    drover::ServeMetrics(&http, metrics.Sources());
    drover::ServeDashboard(&http, {core.get(), &leases, &timeline, &dashboard, *token});
    absl::StatusOr<int> http_port = http.Start(bind, metrics_port);
    if (!http_port.ok()) {
      std::cerr << "drover-scheduler: --metrics-port: " << http_port.status().message() << "\n";
      return 2;
    }
    std::string http_host = host;
    if (auto hp = drover::ParseHostPort(advertise); !advertise.empty() && hp.ok()) {
      http_host = hp->host;
    }
    http_address = drover::HttpHostPort(http_host, *http_port);
    service.SetHttp(&dashboard, http_address, http.scheme());
  }
  grpc::ServerBuilder builder;
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> timing;
  timing.push_back(metrics.rpcs().InterceptorFactory());
  builder.experimental().SetInterceptorCreators(std::move(timing));
  int selected_port = 0;
  drover::AddListeningPort(&builder, absl::StrCat(bind, ":", port), &selected_port);
  builder.RegisterService(&service);
  builder.RegisterService(&leases_service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || selected_port == 0) {
    std::cerr << "drover-scheduler: cannot listen on " << bind << ":" << port
              << " (in use? pick another --port)\n";
    return 2;
  }
  const std::string address =
      advertise.empty() ? absl::StrCat(host, ":", selected_port) : advertise;
  core->SetAddress(address);
  if (!http_address.empty()) {
    DROVER_LOG(INFO) << "metrics at " << http.scheme() << "://" << http_address
                     << "/metrics, dashboard at " << http.scheme() << "://" << http_address
                     << "/ (`drover dashboard` prints a login link)";
  }
  DROVER_LOG(INFO) << "serving at " << address << " (state: "
                   << core->ClusterStatus().state_backend() << ", token file " << token_file
                   << (ca ? absl::StrCat(", TLS with the CA in ", ca->cert_path())
                          : std::string(", plain text"))
                   << ")";
  if (!ready_file.empty()) {
    std::string json = absl::StrCat("{\"address\":\"", address, "\",\"pid\":", getpid(),
                                    ",\"token_file\":\"", token_file,
                                    ca ? absl::StrCat("\",\"tls_ca\":\"", ca->cert_path()) : "",
                                    "\",\"metrics_address\":\"", http_address, "\"}\n");
    auto s = drover::WriteFileAtomic(ready_file, json, 0600);
    if (!s.ok()) DROVER_LOG(ERROR) << s;
  }

  int sig = 0;
  sigwait(&stop_signals, &sig);
  DROVER_LOG(INFO) << "received " << strsignal(sig) << "; shutting down";
  http.Stop();
  // First the agents' sessions, so that their end is not taken for the agents' death.
  service.BeginShutdown();
  leases_service.BeginShutdown();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  leases.Stop();
  core->SetLeaseManager(nullptr);
  core->Stop();
  return 0;
}
