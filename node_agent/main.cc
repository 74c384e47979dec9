// drover-agent: the node agent daemon. Thin: parse flags, build the NodeAgent, run
// until SIGTERM/SIGINT, then stop the workers and exit 0.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/log.h"
#include "common/spawn.h"
#include "common/tls.h"
#include "common/daemon.h"
#include "node_agent/agent.h"

int main(int argc, char** argv) {
  // Before any thread starts, so only the sigwait below sees the stop signals.
  sigset_t stop_signals = drover::BlockStopSignals();
  drover::SetLogTag("agent");

  CLI::App app{"drover-agent: the drover node agent (one per machine)"};
  drover::AgentOptions o;
  double num_cpus = 0;
  int num_gpus = 0;
  int64_t memory_bytes = 0;
  int64_t kill_grace_ms = 5000;
  double log_retention_hours = 24 * 7;
  std::vector<std::string> custom;
  app.add_option("--scheduler", o.scheduler_address, "Scheduler address HOST:PORT")->required();
  app.add_option("--token-file", o.token_file, "Cluster token file (mode 0600)")->required();
  app.add_option("--bind-ip", o.bind_ip,
                 "Address to listen on (default: the local address used to reach the "
                 "scheduler)");
  app.add_option("--port", o.port, "Port to listen on (default 0: any free port)");
  app.add_option("--node-ip", o.node_ip,
                 "Address other nodes reach this one at; MASTER_ADDR for jobs whose rank 0 "
                 "runs here (default: the bind ip)");
  auto* cpus_opt = app.add_option("--num-cpus", num_cpus, "Override the CPU count");
  auto* gpus_opt =
      app.add_option("--num-gpus", num_gpus, "Declare N GPUs (named \"declared\") instead of "
                                             "discovering them");
  std::vector<int> gpu_ids;
  auto* gpu_ids_opt = app.add_option(
      "--gpu-ids", gpu_ids,
      "Offer exactly these GPUs, by device index as workers' CUDA_VISIBLE_DEVICES names "
      "them (e.g. 2,3: the GPUs Slurm assigned); wins over --num-gpus")
      ->delimiter(',');
  auto* mem_opt = app.add_option("--memory-bytes", memory_bytes, "Override the memory size");
  app.add_option("--resource", custom, "Custom resource NAME=VALUE (repeatable)");
  app.add_option("--dir", o.dir,
                 "Agent state directory; logs in DIR/logs (default: $DROVER_HOME or "
                 "~/.drover, then /agent-<pid>)");
  app.add_option("--log-retention-hours", log_retention_hours,
                 "Delete the logs of jobs with nothing running here once untouched this "
                 "long (checked hourly; 0: keep forever)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kill-grace-ms", kill_grace_ms,
                 "Time between SIGTERM and SIGKILL when stopping workers");
  app.add_option("--ready-file", o.ready_file,
                 "After the first registration, write {\"node_id\",\"address\",\"pid\"} "
                 "JSON here");
  app.add_option("--metrics-port", o.metrics_port,
                 "Port of the HTTP server for Prometheus' /metrics (needs the cluster token); "
                 "0 picks a free one, -1 serves none")
      ->check(CLI::Range(-1, 65535));
  app.add_option("--launcher", o.launcher_path,
                 "Path of drover-launch (default: next to this binary)");
  if (const char* nvml = std::getenv("DROVER_NVML_LIBRARY"); nvml != nullptr && *nvml != 0) {
    o.discovery.nvml_library = nvml;
  }
  app.add_option("--nvml-library", o.discovery.nvml_library,
                 "NVML library to discover GPUs with (a name the loader finds, or a path; "
                 "default: $DROVER_NVML_LIBRARY, else libnvidia-ml.so.1)");
  bool no_object_store = false;
  int64_t object_store_memory = 0;
  app.add_flag("--no-object-store", no_object_store,
               "Run no object store on this node (workers get no DROVER_OBJECT_STORE_SOCKET; "
               "objects cannot be served or pulled here)");
  auto* store_mem_opt = app.add_option(
      "--object-store-memory", object_store_memory,
      "Bytes of shared memory for this node's object store (default: the store chooses, "
      "min(30% of RAM, what /dev/shm can hold)); DROVER_OBJECT_STORE_MEMORY sets it too, "
      "for agents that `drover up` starts")->envname("DROVER_OBJECT_STORE_MEMORY");
  app.add_option("--tls-ca", o.tls_ca,
                 "TLS cluster: the cluster CA's certificate (a copy of the head's "
                 "tls/ca.crt); the agent gets its own certificate from the head at start");
  CLI11_PARSE(app, argc, argv);
  o.object_store = !no_object_store;
  if (store_mem_opt->count() > 0) {
    if (object_store_memory <= 0) {
      std::cerr << "drover-agent: --object-store-memory must be > 0 bytes\n";
      return 2;
    }
    o.object_store_memory = static_cast<uint64_t>(object_store_memory);
  }

  if (cpus_opt->count() > 0) {
    if (!std::isfinite(num_cpus) || num_cpus <= 0) {
      std::cerr << "drover-agent: --num-cpus must be a finite number > 0\n";
      return 2;
    }
    o.resources.num_cpus = num_cpus;
  }
  if (gpus_opt->count() > 0) {
    if (num_gpus < 0) {
      std::cerr << "drover-agent: --num-gpus must be >= 0\n";
      return 2;
    }
    o.resources.num_gpus = num_gpus;
  }
  if (gpu_ids_opt->count() > 0) {
    std::set<int> seen;
    for (int id : gpu_ids) {
      if (id < 0 || !seen.insert(id).second) {
        std::cerr << "drover-agent: --gpu-ids must list distinct device indices >= 0 (got "
                  << id << ")\n";
        return 2;
      }
    }
    o.resources.gpu_ids = gpu_ids;
  }
  if (mem_opt->count() > 0) {
    if (memory_bytes <= 0) {
      std::cerr << "drover-agent: --memory-bytes must be > 0\n";
      return 2;
    }
    o.resources.memory_bytes = memory_bytes;
  }
  for (const auto& r : custom) {
    auto eq = r.find('=');
    double value = 0;
    if (eq == std::string::npos || eq == 0 || !absl::SimpleAtod(r.substr(eq + 1), &value) ||
        !std::isfinite(value) || value < 0) {
      std::cerr << "drover-agent: --resource '" << r
                << "' is not NAME=VALUE with a finite number VALUE >= 0 (e.g. --resource "
                   "ssd=1)\n";
      return 2;
    }
    o.resources.custom[r.substr(0, eq)] = value;
  }
  if (kill_grace_ms < 0) {
    std::cerr << "drover-agent: --kill-grace-ms must be >= 0\n";
    return 2;
  }
  o.kill_grace = absl::Milliseconds(kill_grace_ms);
  o.log_retention = absl::Hours(log_retention_hours);

  auto token = drover::ReadTokenFile(o.token_file);
  if (!token.ok()) {
    std::cerr << "drover-agent: " << token.status().message() << "\n";
    return 2;
  }
  o.token = *token;

  // Plain text unless --tls-ca (not whatever DROVER_TLS_* the agent inherited).
  if (o.tls_ca.empty()) drover::SetProcessTransport(drover::TransportSecurity::Plaintext());
  drover::NodeAgent agent(o);
  if (absl::Status s = agent.Start(); !s.ok()) {
    DROVER_LOG(ERROR) << "cannot start the node agent: " << s.message();
    return 1;
  }
  int sig = 0;
  while (sigwait(&stop_signals, &sig) != 0) {
  }
  DROVER_LOG(INFO) << "received " << drover::SignalName(sig);
  agent.Shutdown();
  return 0;
}
