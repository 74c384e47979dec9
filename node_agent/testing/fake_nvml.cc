// A stand-in for NVML (libnvidia-ml.so.1) for tests on machines without a GPU: a
// shared library exporting the entry points the agent's GPU discovery dlopens
// (node_agent/resources.cc), with the signatures and return codes of nvml.h, and the
// devices it reports set by the environment of the process that loads it:
//
//   DROVER_FAKE_NVML_DEVICES   "NAME|MEMORY_BYTES|UUID;..." one entry per GPU;
//                              empty or unset: no GPU (a count of 0)
//   DROVER_FAKE_NVML_INIT      nvmlInit_v2's return code (9: NVML_ERROR_DRIVER_NOT_LOADED)
//   DROVER_FAKE_NVML_COUNT     nvmlDeviceGetCount_v2's return code
//   DROVER_FAKE_NVML_LOST      index of a GPU whose handle query fails with
//                              NVML_ERROR_GPU_IS_LOST (15), as a fallen-off-the-bus GPU does
//   DROVER_FAKE_NVML_CALLS     a file each call appends its name to (to check that every
//                              successful init is shut down)
//
// nvmlDeviceGetName and nvmlDeviceGetUUID answer NVML_ERROR_INSUFFICIENT_SIZE (7) for a
// buffer too small for the text and its NUL, as the real library does. Calls before a
// successful init answer NVML_ERROR_UNINITIALIZED (1). Not thread-safe (discovery runs
// once, on one thread).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int kSuccess = 0;
constexpr int kUninitialized = 1;
constexpr int kInvalidArgument = 2;
constexpr int kInsufficientSize = 7;
constexpr int kGpuIsLost = 15;

struct Device {
  std::string name;
  unsigned long long memory = 0;
  std::string uuid;
};

std::vector<Device>* devices = nullptr;  // set by a successful init
int inits = 0;

void Record(const char* call) {
  const char* path = std::getenv("DROVER_FAKE_NVML_CALLS");
  if (path == nullptr) return;
  if (FILE* f = std::fopen(path, "a")) {
    std::fprintf(f, "%s\n", call);
    std::fclose(f);
  }
}

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != 0 ? std::atoi(v) : fallback;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end - start));
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

std::vector<Device> ParseDevices() {
  std::vector<Device> out;
  const char* spec = std::getenv("DROVER_FAKE_NVML_DEVICES");
  if (spec == nullptr || *spec == 0) return out;
  for (const std::string& entry : Split(spec, ';')) {
    std::vector<std::string> f = Split(entry, '|');
    Device d;
    d.name = f[0];
    if (f.size() > 1) d.memory = std::strtoull(f[1].c_str(), nullptr, 10);
    if (f.size() > 2) d.uuid = f[2];
    out.push_back(d);
  }
  return out;
}

// The device a handle points at (handles are 1-based indices), or nullptr.
const Device* Find(void* handle) {
  const size_t i = reinterpret_cast<size_t>(handle);
  if (devices == nullptr || i == 0 || i > devices->size()) return nullptr;
  return &(*devices)[i - 1];
}

int CopyText(const std::string& text, char* out, unsigned int length) {
  if (out == nullptr) return kInvalidArgument;
  if (text.size() + 1 > length) return kInsufficientSize;
  std::memcpy(out, text.c_str(), text.size() + 1);
  return kSuccess;
}

}  // namespace

extern "C" {

struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

int nvmlInit_v2() {
  Record("nvmlInit_v2");
  const int rc = EnvInt("DROVER_FAKE_NVML_INIT", kSuccess);
  if (rc != kSuccess) return rc;
  if (inits++ == 0) devices = new std::vector<Device>(ParseDevices());
  return kSuccess;
}

int nvmlShutdown() {
  Record("nvmlShutdown");
  if (inits == 0) return kUninitialized;
  if (--inits == 0) {
    delete devices;
    devices = nullptr;
  }
  return kSuccess;
}

int nvmlDeviceGetCount_v2(unsigned int* count) {
  Record("nvmlDeviceGetCount_v2");
  if (devices == nullptr) return kUninitialized;
  if (count == nullptr) return kInvalidArgument;
  const int rc = EnvInt("DROVER_FAKE_NVML_COUNT", kSuccess);
  if (rc != kSuccess) return rc;
  *count = static_cast<unsigned int>(devices->size());
  return kSuccess;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  Record("nvmlDeviceGetHandleByIndex_v2");
  if (devices == nullptr) return kUninitialized;
  if (device == nullptr || index >= devices->size()) return kInvalidArgument;
  if (static_cast<int>(index) == EnvInt("DROVER_FAKE_NVML_LOST", -1)) return kGpuIsLost;
  *device = reinterpret_cast<void*>(static_cast<size_t>(index) + 1);
  return kSuccess;
}

int nvmlDeviceGetName(void* device, char* name, unsigned int length) {
  const Device* d = Find(device);
  if (d == nullptr) return devices == nullptr ? kUninitialized : kInvalidArgument;
  return CopyText(d->name, name, length);
}

int nvmlDeviceGetUUID(void* device, char* uuid, unsigned int length) {
  const Device* d = Find(device);
  if (d == nullptr) return devices == nullptr ? kUninitialized : kInvalidArgument;
  return CopyText(d->uuid, uuid, length);
}

int nvmlDeviceGetMemoryInfo(void* device, nvmlMemory_t* memory) {
  const Device* d = Find(device);
  if (d == nullptr) return devices == nullptr ? kUninitialized : kInvalidArgument;
  if (memory == nullptr) return kInvalidArgument;
  memory->total = d->memory;
  memory->used = d->memory / 16;
  memory->free = d->memory - memory->used;
  return kSuccess;
}

const char* nvmlErrorString(int result) {
  switch (result) {
    case kSuccess: return "Success";
    case kUninitialized: return "Uninitialized";
    case kInvalidArgument: return "Invalid Argument";
    case kInsufficientSize: return "Insufficient Size";
    case 9: return "Driver Not Loaded";
    case kGpuIsLost: return "GPU is lost";
    default: return "Unknown Error";
  }
}

}  // extern "C"
