// What this machine offers (CPUs, memory, GPUs, custom resources) and what is wrong
// with it (small /dev/shm, low open-file limit).
//
// GPUs are found WITHOUT creating a CUDA context: NVML is loaded with dlopen (never
// linked), falling back to counting /proc/driver/nvidia/gpus/*. The agent must never
// call the CUDA runtime or driver API.
//
// Thread-compatible free functions; call them once at agent start.
#ifndef DROVER_NODE_AGENT_RESOURCES_H_
#define DROVER_NODE_AGENT_RESOURCES_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "proto/common.pb.h"

namespace drover {

// Operator overrides (flags). Unset fields are discovered.
struct ResourceOverrides {
  std::optional<double> num_cpus;
  std::optional<int64_t> memory_bytes;
  // Declared GPUs (named "declared"): how GPU scheduling is tested without a GPU.
  std::optional<int> num_gpus;
  // The GPUs this node offers by device index, as workers' CUDA_VISIBLE_DEVICES names
  // them (e.g. those a batch system assigned: Slurm's CUDA_VISIBLE_DEVICES); declared,
  // not discovered. Wins over num_gpus.
  std::optional<std::vector<int>> gpu_ids;
  std::map<std::string, double> custom;
};

// Where discovery looks; tests point these at a fake tree.
struct DiscoveryPaths {
  std::string meminfo = "/proc/meminfo";
  std::string nvidia_gpus_dir = "/proc/driver/nvidia/gpus";
  std::string shm_dir = "/dev/shm";
  // Try NVML (dlopen of `nvml_library`) before the /proc fallback.
  bool use_nvml = true;
  // The NVML library to dlopen: a name the dynamic loader searches for, or a path.
  // The agent's --nvml-library (or DROVER_NVML_LIBRARY) sets it; tests point it at a
  // stand-in (node_agent/testing/fake_nvml.cc).
  std::string nvml_library = "libnvidia-ml.so.1";
  // Raise RLIMIT_NOFILE's soft limit to the hard limit if it is low.
  bool adjust_nofile = true;
};

// One GPU as NVML describes it.
struct GpuInfo {
  std::string name;          // "NVIDIA A100-SXM4-80GB"; "unknown GPU" if NVML could not say
  std::string uuid;          // "GPU-8f4e..."; "" if unknown
  int64_t memory_bytes = 0;  // 0 if unknown
};

struct NodeResources {
  proto::Resources total;
  std::vector<int> gpu_ids;
  std::vector<std::string> gpu_names;
  // From NVML (empty for declared GPUs and the /proc fallback), in gpu_ids order.
  std::vector<GpuInfo> gpus;
  std::vector<std::string> warnings;
};

// Discovers resources, applies overrides, and runs the host checks.
NodeResources DiscoverResources(const ResourceOverrides& overrides,
                                const DiscoveryPaths& paths = DiscoveryPaths());

// CPUs this process may run on (sched_getaffinity), at least 1.
int CountCpus();

// MemTotal from the text of /proc/meminfo, in bytes; 0 if absent.
int64_t ParseMemTotal(const std::string& meminfo);

// The GPUs NVML (loaded from `library` with dlopen) reports, or std::nullopt when NVML
// is unavailable: no library, a library without the entry points, init failing (no
// driver: NVML_ERROR_DRIVER_NOT_LOADED) or the count failing. A device NVML counts but
// cannot describe is kept (it exists) as "unknown GPU", and `*warnings` says which and
// why; a missing memory size or UUID is left empty.
std::optional<std::vector<GpuInfo>> NvmlGpus(const std::string& library,
                                             std::vector<std::string>* warnings);

// Number of entries in `dir` (e.g. /proc/driver/nvidia/gpus); 0 if it is missing.
int CountDirEntries(const std::string& dir);

// A warning (with how to fix it) if /dev/shm of `shm_bytes` is below 1 GiB or below
// 10% of `memory_bytes`; "" if it is fine.
std::string ShmWarning(int64_t shm_bytes, int64_t memory_bytes);

// Raises the RLIMIT_NOFILE soft limit to the hard limit if below 65536 (when `adjust`);
// returns a warning if it is still low, else "".
std::string CheckNofileLimit(bool adjust);

}  // namespace drover

#endif  // DROVER_NODE_AGENT_RESOURCES_H_
