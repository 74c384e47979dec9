// drover-scheduler: the head daemon. Parses flags, builds the core and service, serves
// until SIGTERM/SIGINT.
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
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

  CLI::App app{"drover-scheduler: the head of a drover cluster"};
  std::string bind = "127.0.0.1", advertise, token_file, redis, redis_prefix = "drover:",
              ready_file, package_dir;
  int port = 0, metrics_port = 0;
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
  app.add_option("--abort-notice-ms", abort_notice_ms,
                 "after a failure, how long processes that watch their job generation "
                 "(collective groups) get to abort and exit on their own before SIGTERM")
      ->check(CLI::Range(int64_t{0}, int64_t{600000}));
  app.add_option("--ready-file", ready_file, "write {\"address\":...} here once serving");
  app.add_option("--package-dir", package_dir,
                 "where task programs uploaded by drivers are kept (default: beside the token "
                 "file, in packages/)");
  CLI11_PARSE(app, argc, argv);

  if (token_file.empty()) token_file = drover::DroverHome() + "/token";
  auto token = drover::LoadOrCreateTokenFile(token_file);
  if (!token.ok()) {
    std::cerr << "drover-scheduler: " << token.status().message() << "\n";
    return 2;
  }

  std::unique_ptr<drover::StateStore> store;
  if (redis.empty()) {
    store = drover::NewMemoryStateStore();
  } else {
    auto hp = drover::ParseHostPort(redis);
    if (!hp.ok()) {
      std::cerr << "drover-scheduler: --redis: " << hp.status().message() << "\n";
      return 2;
    }
    // A Redis started beside the head (a service manager starts both at once) may not
    // listen yet: retry what may pass by itself, for --redis-wait-ms.
    const absl::Time give_up = absl::Now() + absl::Milliseconds(redis_wait_ms);
    auto r = drover::NewRedisStateStore(hp->host, hp->port, redis_prefix);
    if (!r.ok() && absl::IsUnavailable(r.status()) && absl::Now() < give_up) {
      DROVER_LOG(WARNING) << r.status().message() << "; waiting up to "
                          << absl::FormatDuration(absl::Milliseconds(redis_wait_ms))
                          << " for it (--redis-wait-ms)";
      while (!r.ok() && absl::IsUnavailable(r.status()) && absl::Now() < give_up) {
        absl::SleepFor(absl::Milliseconds(200));
        r = drover::NewRedisStateStore(hp->host, hp->port, redis_prefix);
      }
    }
    if (!r.ok()) {
      std::cerr << "drover-scheduler: " << r.status().message() << "\n";
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
  drover::JobTimeline timeline(options.clock);
  options.timeline = &timeline;
  auto core = std::make_unique<drover::SchedulerCore>(options, std::move(store),
                                                      drover::NewGrpcAgentClient(*token));
  drover::LeaseManager leases(core->resource_book(), drover::NewGrpcWorkerClient(*token));
  leases.SetTimeline(&timeline);
  drover::SchedulerMetrics metrics(core.get(), &leases);
  timeline.SetListener(metrics.TimelineListener());
  absl::Status started = core->Start();
  if (!started.ok()) {
    std::cerr << "drover-scheduler: cannot load state: " << started.message() << "\n";
    return 2;
  }
  drover::SchedulerService service(core.get(), *token);
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
  drover::HttpServer http(*token, /*threads=*/8);
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
    service.SetHttp(&dashboard, http_address);
  }
  grpc::ServerBuilder builder;
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> timing;
  timing.push_back(metrics.rpcs().InterceptorFactory());
  builder.experimental().SetInterceptorCreators(std::move(timing));
  int selected_port = 0;
  builder.AddListeningPort(absl::StrCat(bind, ":", port), grpc::InsecureServerCredentials(),
                           &selected_port);
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
    DROVER_LOG(INFO) << "metrics at http://" << http_address
                     << "/metrics, dashboard at http://" << http_address
                     << "/ (`drover dashboard` prints a login link)";
  }
  DROVER_LOG(INFO) << "serving at " << address << " (state: "
                   << core->ClusterStatus().state_backend() << ", token file " << token_file
                   << ")";
  if (!ready_file.empty()) {
    std::string json = absl::StrCat("{\"address\":\"", address, "\",\"pid\":", getpid(),
                                    ",\"token_file\":\"", token_file,
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
