// drover-agent: the node agent daemon. Thin, in named steps: parse the flags, build
// the agent's options (checked, with the token), start the NodeAgent, wait for
// SIGTERM/SIGINT, then shut down (stop the workers) and exit 0.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/log.h"
#include "common/spawn.h"
#include "common/tls.h"
#include "common/daemon.h"
#include "node_agent/agent.h"

namespace drover {
namespace {

// The command line as given; BuildOptions checks it.
struct AgentFlags {
  AgentOptions o;
  std::optional<double> num_cpus;
  std::optional<int> num_gpus;
  std::optional<std::vector<int>> gpu_ids;
  std::optional<int64_t> memory_bytes;
  std::optional<int64_t> object_store_memory;
  bool no_object_store = false;
  int64_t kill_grace_ms = 5000;
  double log_retention_hours = 24 * 7;
  std::vector<std::string> custom;
};

// Step 1. Fills `f`; an exit code if the process should end here (--help, a parse
// error: CLI11 has printed why).
std::optional<int> ParseFlags(int argc, char** argv, AgentFlags& f) {
  CLI::App app{"drover-agent: the drover node agent (one per machine)"};
  AgentOptions& o = f.o;
  double num_cpus = 0;
  int num_gpus = 0;
  int64_t memory_bytes = 0;
  std::vector<int> gpu_ids;
  int64_t object_store_memory = 0;
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
  auto* gpu_ids_opt = app.add_option(
      "--gpu-ids", gpu_ids,
      "Offer exactly these GPUs, by device index as workers' CUDA_VISIBLE_DEVICES names "
      "them (e.g. 2,3: the GPUs Slurm assigned); wins over --num-gpus")
      ->delimiter(',');
  auto* mem_opt = app.add_option("--memory-bytes", memory_bytes, "Override the memory size");
  app.add_option("--resource", f.custom, "Custom resource NAME=VALUE (repeatable)");
  app.add_option("--dir", o.dir,
                 "Agent state directory; logs in DIR/logs (default: $DROVER_HOME or "
                 "~/.drover, then /agent-<pid>)");
  app.add_option("--log-retention-hours", f.log_retention_hours,
                 "Delete the logs of jobs with nothing running here once untouched this "
                 "long (checked hourly; 0: keep forever)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kill-grace-ms", f.kill_grace_ms,
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
  app.add_flag("--no-object-store", f.no_object_store,
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (cpus_opt->count() > 0) f.num_cpus = num_cpus;
  if (gpus_opt->count() > 0) f.num_gpus = num_gpus;
  if (gpu_ids_opt->count() > 0) f.gpu_ids = gpu_ids;
  if (mem_opt->count() > 0) f.memory_bytes = memory_bytes;
  if (store_mem_opt->count() > 0) f.object_store_memory = object_store_memory;
  return std::nullopt;
}

// Step 2. The agent's options from the flags, checked (INVALID_ARGUMENT naming the
// flag), with the cluster token read from its file.
absl::StatusOr<AgentOptions> BuildOptions(const AgentFlags& f) {
  AgentOptions o = f.o;
  o.object_store = !f.no_object_store;
  if (f.object_store_memory) {
    if (*f.object_store_memory <= 0) {
      return absl::InvalidArgumentError("--object-store-memory must be > 0 bytes");
    }
    o.object_store_memory = static_cast<uint64_t>(*f.object_store_memory);
  }
  if (f.num_cpus) {
    if (!std::isfinite(*f.num_cpus) || *f.num_cpus <= 0) {
      return absl::InvalidArgumentError("--num-cpus must be a finite number > 0");
    }
    o.resources.num_cpus = *f.num_cpus;
  }
  if (f.num_gpus) {
    if (*f.num_gpus < 0) return absl::InvalidArgumentError("--num-gpus must be >= 0");
    o.resources.num_gpus = *f.num_gpus;
  }
  if (f.gpu_ids) {
    std::set<int> seen;
    for (int id : *f.gpu_ids) {
      if (id < 0 || !seen.insert(id).second) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--gpu-ids must list distinct device indices >= 0 (got ", id, ")"));
      }
    }
    o.resources.gpu_ids = *f.gpu_ids;
  }
  if (f.memory_bytes) {
    if (*f.memory_bytes <= 0) return absl::InvalidArgumentError("--memory-bytes must be > 0");
    o.resources.memory_bytes = *f.memory_bytes;
  }
  for (const auto& r : f.custom) {
    auto eq = r.find('=');
    double value = 0;
    if (eq == std::string::npos || eq == 0 || !absl::SimpleAtod(r.substr(eq + 1), &value) ||
        !std::isfinite(value) || value < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--resource '", r,
          "' is not NAME=VALUE with a finite number VALUE >= 0 (e.g. --resource ssd=1)"));
    }
    o.resources.custom[r.substr(0, eq)] = value;
  }
  if (f.kill_grace_ms < 0) return absl::InvalidArgumentError("--kill-grace-ms must be >= 0");
  o.kill_grace = absl::Milliseconds(f.kill_grace_ms);
  o.log_retention = absl::Hours(f.log_retention_hours);
  absl::StatusOr<std::string> token = ReadTokenFile(o.token_file);
  if (!token.ok()) return token.status();
  o.token = *token;
  return o;
}

// Step 3. The agent registered with the scheduler and serving.
absl::StatusOr<std::unique_ptr<NodeAgent>> StartAgent(const AgentOptions& o) {
  // Plain text unless --tls-ca (not whatever DROVER_TLS_* the agent inherited).
  if (o.tls_ca.empty()) SetProcessTransport(TransportSecurity::Plaintext());
  auto agent = std::make_unique<NodeAgent>(o);
  if (absl::Status s = agent->Start(); !s.ok()) return s;
  return agent;
}

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
  // Before any thread starts, so only the sigwait below sees the stop signals.
  const sigset_t stop_signals = drover::BlockStopSignals();
  drover::SetLogTag("agent");

  drover::AgentFlags flags;
  if (std::optional<int> exit_code = drover::ParseFlags(argc, argv, flags)) return *exit_code;
  absl::StatusOr<drover::AgentOptions> options = drover::BuildOptions(flags);
  if (!options.ok()) {
    std::cerr << "drover-agent: " << options.status().message() << "\n";
    return 2;
  }
  absl::StatusOr<std::unique_ptr<drover::NodeAgent>> agent = drover::StartAgent(*options);
  if (!agent.ok()) {
    DROVER_LOG(ERROR) << "cannot start the node agent: " << agent.status().message();
    return 1;
  }
  const int sig = drover::WaitForStopSignal(stop_signals);
  DROVER_LOG(INFO) << "received " << drover::SignalName(sig);
  // Step 5: stop the workers and the services.
  (*agent)->Shutdown();
  return 0;
}
