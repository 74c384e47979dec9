#include "node_agent/resources.h"

#include <dirent.h>
#include <dlfcn.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/log.h"

namespace drover {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr rlim_t kWantedNofile = 65536;

// The few NVML entry points we use, declared here so nothing links against NVML (the
// types and values are those of nvml.h).
using nvmlReturn_t = int;  // NVML_SUCCESS == 0
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
using NvmlInitFn = nvmlReturn_t (*)();
using NvmlShutdownFn = nvmlReturn_t (*)();
using NvmlGetCountFn = nvmlReturn_t (*)(unsigned int*);
using NvmlGetHandleFn = nvmlReturn_t (*)(unsigned int, nvmlDevice_t*);
using NvmlGetStringFn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int);
using NvmlGetMemoryFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*);
using NvmlErrorStringFn = const char* (*)(nvmlReturn_t);

template <typename Fn>
Fn Symbol(void* lib, const char* name) {
  return reinterpret_cast<Fn>(dlsym(lib, name));
}

std::string HumanBytes(int64_t b) {
  if (b >= kGiB) return absl::StrCat(b / kGiB, " GiB");
  return absl::StrCat(b >> 20, " MiB");
}

}  // namespace

int CountCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  int n = CPU_COUNT(&set);
  return n > 0 ? n : 1;
}

int64_t ParseMemTotal(const std::string& meminfo) {
  std::istringstream in(meminfo);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemTotal:", 0) != 0) continue;
    std::istringstream fields(line.substr(9));
    int64_t value = 0;
    std::string unit;
    fields >> value >> unit;
    if (unit == "kB" || unit == "KB") return value * 1024;
    return value;
  }
  return 0;
}

std::optional<std::vector<GpuInfo>> NvmlGpus(const std::string& library,
                                             std::vector<std::string>* warnings) {
  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return std::nullopt;
  auto init = Symbol<NvmlInitFn>(lib, "nvmlInit_v2");
  auto shutdown = Symbol<NvmlShutdownFn>(lib, "nvmlShutdown");
  auto count_fn = Symbol<NvmlGetCountFn>(lib, "nvmlDeviceGetCount_v2");
  auto handle_fn = Symbol<NvmlGetHandleFn>(lib, "nvmlDeviceGetHandleByIndex_v2");
  auto name_fn = Symbol<NvmlGetStringFn>(lib, "nvmlDeviceGetName");
  // Optional: older libraries may lack them.
  auto uuid_fn = Symbol<NvmlGetStringFn>(lib, "nvmlDeviceGetUUID");
  auto memory_fn = Symbol<NvmlGetMemoryFn>(lib, "nvmlDeviceGetMemoryInfo");
  auto error_fn = Symbol<NvmlErrorStringFn>(lib, "nvmlErrorString");
  auto error = [&](nvmlReturn_t rc) {
    const char* text = error_fn != nullptr ? error_fn(rc) : nullptr;
    return absl::StrCat(text != nullptr ? text : "error", " (NVML code ", rc, ")");
  };
  std::optional<std::vector<GpuInfo>> result;
  nvmlReturn_t rc = -1;
  if (init && count_fn && handle_fn && name_fn && (rc = init()) == 0) {
    unsigned int count = 0;
    if (nvmlReturn_t c = count_fn(&count); c == 0) {
      std::vector<GpuInfo> gpus(count);
      for (unsigned int i = 0; i < count; ++i) {
        GpuInfo& g = gpus[i];
        nvmlDevice_t dev = nullptr;
        char text[96] = {0};  // NVML_DEVICE_NAME_V2_BUFFER_SIZE and the UUID's 80 fit
        nvmlReturn_t h = handle_fn(i, &dev);
        if (h == 0) h = name_fn(dev, text, sizeof(text));
        if (h != 0) {
          g.name = "unknown GPU";
          warnings->push_back(absl::StrCat("GPU ", i, ": NVML cannot describe it: ", error(h),
                                           "; check it with nvidia-smi"));
          continue;
        }
        g.name.assign(text, strnlen(text, sizeof(text)));
        std::memset(text, 0, sizeof(text));
        if (uuid_fn != nullptr && uuid_fn(dev, text, sizeof(text)) == 0) {
          g.uuid.assign(text, strnlen(text, sizeof(text)));
        }
        nvmlMemory_t mem{};
        if (memory_fn != nullptr && memory_fn(dev, &mem) == 0) {
          g.memory_bytes = static_cast<int64_t>(
              std::min<unsigned long long>(mem.total, std::numeric_limits<int64_t>::max()));
        }
      }
      result = std::move(gpus);
    } else {
      warnings->push_back(absl::StrCat("NVML cannot count the GPUs: ", error(c)));
    }
    if (shutdown) shutdown();
  } else if (init && rc != 0) {
    DROVER_LOG(INFO) << "NVML (" << library << ") did not start: " << error(rc)
                     << "; looking for GPUs in /proc";
  }
  dlclose(lib);
  return result;
}

int CountDirEntries(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return 0;
  int n = 0;
  while (struct dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) ++n;
  }
  closedir(d);
  return n;
}

std::string ShmWarning(int64_t shm_bytes, int64_t memory_bytes) {
  if (shm_bytes >= kGiB && shm_bytes * 10 >= memory_bytes) return "";
  int64_t want = std::max<int64_t>(kGiB, memory_bytes / 2);
  int64_t want_gib = (want + kGiB - 1) / kGiB;
  return absl::StrCat(
      "/dev/shm is only ", HumanBytes(shm_bytes), " (", HumanBytes(memory_bytes),
      " RAM); shared-memory objects and NCCL/Gloo may fail. Fix: `mount -o remount,size=",
      want_gib, "G /dev/shm` on the host, or run the container with --shm-size=", want_gib,
      "g (docker) / an emptyDir with medium: Memory (Kubernetes)");
}

std::string CheckNofileLimit(bool adjust) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return "";
  if (rl.rlim_cur >= kWantedNofile) return "";
  if (adjust && rl.rlim_max > rl.rlim_cur) {
    struct rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  if (rl.rlim_cur >= kWantedNofile) return "";
  return absl::StrCat("open-file limit (RLIMIT_NOFILE) is ", rl.rlim_cur, " (hard ",
                      rl.rlim_max,
                      "); workers with many connections may fail. Fix: `ulimit -n 1048576` "
                      "before starting the agent, LimitNOFILE= in its systemd unit, or "
                      "docker --ulimit nofile=1048576:1048576");
}

NodeResources DiscoverResources(const ResourceOverrides& o, const DiscoveryPaths& paths) {
  NodeResources r;
  r.total.set_cpus(o.num_cpus ? *o.num_cpus : CountCpus());

  int64_t meminfo_total = 0;
  if (auto text = ReadFile(paths.meminfo); text.ok()) meminfo_total = ParseMemTotal(*text);
  r.total.set_memory_bytes(o.memory_bytes ? *o.memory_bytes : meminfo_total);

  if (o.gpu_ids) {
    r.gpu_names.assign(o.gpu_ids->size(), "declared");
  } else if (o.num_gpus) {
    for (int i = 0; i < *o.num_gpus; ++i) r.gpu_names.push_back("declared");
  } else {
    std::optional<std::vector<GpuInfo>> gpus;
    if (paths.use_nvml) gpus = NvmlGpus(paths.nvml_library, &r.warnings);
    if (gpus) {
      r.gpus = *std::move(gpus);
      for (const GpuInfo& g : r.gpus) r.gpu_names.push_back(g.name);
    } else {
      int n = CountDirEntries(paths.nvidia_gpus_dir);
      for (int i = 0; i < n; ++i) r.gpu_names.push_back("NVIDIA GPU");
    }
  }
  r.total.set_gpus(static_cast<int>(r.gpu_names.size()));
  if (o.gpu_ids) {
    r.gpu_ids = *o.gpu_ids;
  } else {
    for (int i = 0; i < static_cast<int>(r.gpu_names.size()); ++i) r.gpu_ids.push_back(i);
  }
  for (const auto& [name, value] : o.custom) (*r.total.mutable_custom())[name] = value;

  // Host checks compare /dev/shm with the machine's real RAM, not an override.
  struct statvfs vfs;
  if (statvfs(paths.shm_dir.c_str(), &vfs) == 0) {
    int64_t shm = static_cast<int64_t>(vfs.f_blocks) * vfs.f_frsize;
    std::string w = ShmWarning(shm, meminfo_total > 0 ? meminfo_total
                                                      : r.total.memory_bytes());
    if (!w.empty()) r.warnings.push_back(w);
  } else {
    r.warnings.push_back(absl::StrCat(paths.shm_dir,
                                      " is missing: shared memory will not work. Fix: "
                                      "mount a tmpfs there (mount -t tmpfs tmpfs /dev/shm)"));
  }
  std::string nofile = CheckNofileLimit(paths.adjust_nofile);
  if (!nofile.empty()) r.warnings.push_back(nofile);
  return r;
}

}  // namespace drover
