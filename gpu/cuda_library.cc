#include "gpu/cuda_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace drover::gpu {
namespace {

// Opens the first of `candidates` that loads (only $env_var's value when it is set),
// or says what was tried.
absl::StatusOr<void*> Open(const char* what, const char* env_var,
                           const std::vector<std::string>& candidates, std::string* path) {
  std::vector<std::string> tried;
  std::vector<std::string> names;
  const char* env = std::getenv(env_var);
  if (env != nullptr && *env != '\0') {
    names.push_back(env);
  } else {
    names = candidates;
  }
  for (const std::string& name : names) {
    void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h != nullptr) {
      *path = name;
      return h;
    }
    const char* err = dlerror();
    tried.push_back(absl::StrCat(name, " (", err ? err : "not loadable", ")"));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      what, " could not be loaded; looked for ",
      env != nullptr && *env != '\0' ? absl::StrCat("$", env_var, "=") : std::string(),
      absl::StrJoin(tried, ", "), ". Set ", env_var,
      " to the library's path (on a GPU machine: /usr/local/cuda/lib64, or the copy in "
      "PyTorch's site-packages/nvidia/)"));
}

// dlsym of `name` into `fn`, remembering the first missing one.
template <typename F>
void Resolve(void* h, const char* name, F* fn, std::string* missing) {
  *fn = reinterpret_cast<F>(dlsym(h, name));
  if (*fn == nullptr && missing->empty()) *missing = name;
}

// The file a loaded symbol lives in: the real path behind a bare soname.
std::string FileOf(const void* symbol, const std::string& fallback) {
  Dl_info info;
  if (symbol != nullptr && dladdr(symbol, &info) != 0 && info.dli_fname != nullptr) {
    return info.dli_fname;
  }
  return fallback;
}

#define DROVER_RESOLVE(api, name) Resolve(h, #name, &(api).name, &missing)

absl::StatusOr<const CudaApi*> LoadCudaOnce() {
  std::string path;
  absl::StatusOr<void*> opened =
      Open("the CUDA runtime (libcudart)", "DROVER_CUDA_RUNTIME_LIBRARY",
           {"libcudart.so.13", "/usr/local/cuda/lib64/libcudart.so.13",
            "/usr/local/cuda/lib64/libcudart.so"},
           &path);
  if (!opened.ok()) return opened.status();
  void* h = *opened;
  auto* api = new CudaApi;
  std::string missing;
  DROVER_RESOLVE(*api, cudaGetDeviceCount);
  DROVER_RESOLVE(*api, cudaSetDevice);
  DROVER_RESOLVE(*api, cudaRuntimeGetVersion);
  DROVER_RESOLVE(*api, cudaDriverGetVersion);
  DROVER_RESOLVE(*api, cudaMalloc);
  DROVER_RESOLVE(*api, cudaFree);
  DROVER_RESOLVE(*api, cudaMallocHost);
  DROVER_RESOLVE(*api, cudaFreeHost);
  DROVER_RESOLVE(*api, cudaMemcpy);
  DROVER_RESOLVE(*api, cudaMemset);
  DROVER_RESOLVE(*api, cudaHostRegister);
  DROVER_RESOLVE(*api, cudaHostUnregister);
  DROVER_RESOLVE(*api, cudaStreamCreateWithFlags);
  DROVER_RESOLVE(*api, cudaStreamDestroy);
  DROVER_RESOLVE(*api, cudaStreamQuery);
  DROVER_RESOLVE(*api, cudaDeviceSynchronize);
  DROVER_RESOLVE(*api, cudaGetLastError);
  DROVER_RESOLVE(*api, cudaGetErrorName);
  DROVER_RESOLVE(*api, cudaGetErrorString);
  DROVER_RESOLVE(*api, cudaGetDeviceProperties);
  DROVER_RESOLVE(*api, cudaLibraryLoadData);
  DROVER_RESOLVE(*api, cudaLibraryGetKernel);
  DROVER_RESOLVE(*api, cudaLaunchKernel);
  if (!missing.empty()) {
    delete api;
    return absl::FailedPreconditionError(absl::StrCat(
        "the CUDA runtime at ", path, " has no ", missing,
        " (drover needs CUDA 12 or later; set DROVER_CUDA_RUNTIME_LIBRARY to another)"));
  }
  api->path = FileOf(reinterpret_cast<const void*>(api->cudaMalloc), path);
  api->cudaRuntimeGetVersion(&api->version);
  return api;
}

absl::StatusOr<const NcclApi*> LoadNcclOnce() {
  std::string path;
  absl::StatusOr<void*> opened =
      Open("NCCL (libnccl)", "DROVER_NCCL_LIBRARY",
           {"libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2",
            "/usr/lib/x86_64-linux-gnu/libnccl.so.2"},
           &path);
  if (!opened.ok()) return opened.status();
  void* h = *opened;
  auto* api = new NcclApi;
  std::string missing;
  DROVER_RESOLVE(*api, ncclGetVersion);
  DROVER_RESOLVE(*api, ncclGetUniqueId);
  DROVER_RESOLVE(*api, ncclCommInitRankConfig);
  DROVER_RESOLVE(*api, ncclCommGetAsyncError);
  DROVER_RESOLVE(*api, ncclCommAbort);
  DROVER_RESOLVE(*api, ncclCommDestroy);
  DROVER_RESOLVE(*api, ncclGetLastError);
  DROVER_RESOLVE(*api, ncclGetErrorString);
  DROVER_RESOLVE(*api, ncclAllReduce);
  DROVER_RESOLVE(*api, ncclBroadcast);
  DROVER_RESOLVE(*api, ncclAllGather);
  DROVER_RESOLVE(*api, ncclReduceScatter);
  DROVER_RESOLVE(*api, ncclSend);
  DROVER_RESOLVE(*api, ncclRecv);
  if (!missing.empty()) {
    delete api;
    return absl::FailedPreconditionError(
        absl::StrCat("NCCL at ", path, " has no ", missing,
                     " (drover needs NCCL 2.18 or later; set DROVER_NCCL_LIBRARY to another)"));
  }
  api->path = FileOf(reinterpret_cast<const void*>(api->ncclGetVersion), path);
  api->ncclGetVersion(&api->version);
  return api;
}

#undef DROVER_RESOLVE

}  // namespace

absl::StatusOr<const CudaApi*> LoadCudaRuntime() {
  static const absl::StatusOr<const CudaApi*>* loaded =
      new absl::StatusOr<const CudaApi*>(LoadCudaOnce());
  return *loaded;
}

absl::StatusOr<const NcclApi*> LoadNccl() {
  static const absl::StatusOr<const NcclApi*>* loaded =
      new absl::StatusOr<const NcclApi*>(LoadNcclOnce());
  return *loaded;
}

std::string DescribeCudaRuntime() {
  absl::StatusOr<const CudaApi*> api = LoadCudaRuntime();
  if (!api.ok()) return std::string(api.status().message());
  return absl::StrCat("CUDA runtime ", (*api)->version / 1000, ".", ((*api)->version % 1000) / 10,
                      " from ", (*api)->path);
}

std::string DescribeNccl() {
  absl::StatusOr<const NcclApi*> api = LoadNccl();
  if (!api.ok()) return std::string(api.status().message());
  const int v = (*api)->version;
  return absl::StrCat("NCCL ", v / 10000, ".", (v % 10000) / 100, ".", v % 100, " from ",
                      (*api)->path);
}

}  // namespace drover::gpu
