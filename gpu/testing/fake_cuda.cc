// A stand-in for the CUDA runtime and NCCL entry points drover calls (gpu/cuda_runtime.cc,
// fill_kernel.cu's launch, collective/nccl_group.cc), for tests on machines without a
// GPU. drover loads it in place of libcudart and libnccl (DROVER_CUDA_RUNTIME_LIBRARY and
// DROVER_NCCL_LIBRARY name it; fake_cuda_main.cc also preloads it so that tests can find
// its helpers with dlsym), so drover's real call sites run and their error handling can
// be checked. "Device memory" is host memory; the fill kernel runs on the host. Set by
// the environment, read at every call:
//
//   DROVER_FAKE_CUDA_DEVICES  devices cudaGetDeviceCount reports (default 1)
//   DROVER_FAKE_CUDA_FAIL     "call=code,..." calls that return the error `code`, e.g.
//                             "cudaMalloc=2,ncclAllReduce=1,cudaStreamQuery=700"
//
// Thread safety: the calls may come from any thread; the fake keeps no state but the
// communicators it hands out and each thread's last error.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

// The error `call` is set to return, or 0.
int FailureOf(const char* call) {
  const char* spec = std::getenv("DROVER_FAKE_CUDA_FAIL");
  if (spec == nullptr) return 0;
  const std::string s = spec;
  const std::string key = std::string(call) + "=";
  for (size_t at = 0; (at = s.find(key, at)) != std::string::npos; at += key.size()) {
    if (at == 0 || s[at - 1] == ',') return std::atoi(s.c_str() + at + key.size());
  }
  return 0;
}

struct Dim3 {
  unsigned x, y, z;
};

// As in CUDA, a failed launch is also this thread's last error (cudaGetLastError).
thread_local int last_error = 0;

// The handle cudaLibraryGetKernel gives for drover_fill_float.
char fill_kernel_handle;

int Launch(const void* kernel, void** args) {
  const int e = FailureOf("cudaLaunchKernel");
  if (e != 0) {
    last_error = e;
    return e;
  }
  if (kernel == &fill_kernel_handle) {
    float* p = *static_cast<float**>(args[0]);
    const size_t n = *static_cast<size_t*>(args[1]);
    const float v = *static_cast<float*>(args[2]);
    for (size_t i = 0; i < n; ++i) p[i] = v;
  }
  return 0;
}

struct FakeComm {
  int async_error = 0;
};

}  // namespace

extern "C" {

// ---- CUDA runtime ----

int cudaGetDeviceCount(int* count) {
  if (int e = FailureOf("cudaGetDeviceCount")) return e;
  const char* n = std::getenv("DROVER_FAKE_CUDA_DEVICES");
  *count = n != nullptr && *n != 0 ? std::atoi(n) : 1;
  return *count == 0 ? 100 : 0;  // cudaErrorNoDevice
}
int cudaSetDevice(int) { return FailureOf("cudaSetDevice"); }
int cudaRuntimeGetVersion(int* v) {
  *v = 13000;
  return 0;
}
int cudaMalloc(void** p, size_t bytes) {
  if (int e = FailureOf("cudaMalloc")) return e;
  *p = std::malloc(bytes == 0 ? 1 : bytes);
  return 0;
}
int cudaFree(void* p) {
  if (int e = FailureOf("cudaFree")) return e;
  std::free(p);
  return 0;
}
int cudaMemcpy(void* dst, const void* src, size_t bytes, int /*kind*/) {
  if (int e = FailureOf("cudaMemcpy")) return e;
  std::memmove(dst, src, bytes);
  return 0;
}
int cudaHostRegister(void*, size_t, unsigned) { return FailureOf("cudaHostRegister"); }
int cudaHostUnregister(void*) { return FailureOf("cudaHostUnregister"); }
int cudaStreamCreateWithFlags(void** stream, unsigned) {
  if (int e = FailureOf("cudaStreamCreateWithFlags")) return e;
  *stream = std::malloc(1);
  return 0;
}
int cudaStreamDestroy(void* stream) {
  std::free(stream);
  return 0;
}
std::atomic<long> stream_queries{0};
int cudaStreamQuery(void*) {
  ++stream_queries;
  return FailureOf("cudaStreamQuery");
}
// For tests (found with dlsym): how many times a stream was polled, so a test knows an
// operation is in flight.
long drover_fake_cuda_stream_queries() { return stream_queries.load(); }
int cudaDeviceSynchronize() { return FailureOf("cudaDeviceSynchronize"); }
int cudaGetLastError() {
  const int e = last_error;
  last_error = 0;
  return e;
}
int cudaDriverGetVersion(int* v) {
  *v = 13000;
  return 0;
}
int cudaMallocHost(void** p, size_t bytes) {
  if (int e = FailureOf("cudaMallocHost")) return e;
  *p = std::malloc(bytes == 0 ? 1 : bytes);
  return 0;
}
int cudaFreeHost(void* p) {
  std::free(p);
  return 0;
}
int cudaMemset(void* p, int value, size_t bytes) {
  if (int e = FailureOf("cudaMemset")) return e;
  std::memset(p, value, bytes);
  return 0;
}
// Properties are not faked: callers must cope with the call failing.
int cudaGetDeviceProperties(void*, int) { return 801; }  // cudaErrorNotSupported
// The fill kernel's fat binary: accepted as loaded; only drover_fill_float exists in it.
int cudaLibraryLoadData(void** library, const void*, void*, void*, unsigned, void*, void*,
                        unsigned) {
  if (int e = FailureOf("cudaLibraryLoadData")) return e;
  *library = &fill_kernel_handle;
  return 0;
}
int cudaLibraryGetKernel(void** kernel, void*, const char* name) {
  if (std::strcmp(name, "drover_fill_float") != 0) return 500;  // cudaErrorSymbolNotFound
  *kernel = &fill_kernel_handle;
  return 0;
}
int cudaLaunchKernel(const void* kernel, Dim3, Dim3, void** args, size_t, void*) {
  return Launch(kernel, args);
}
const char* cudaGetErrorName(int e) {
  switch (e) {
    case 0: return "cudaSuccess";
    case 1: return "cudaErrorInvalidValue";
    case 2: return "cudaErrorMemoryAllocation";
    case 35: return "cudaErrorInsufficientDriver";
    case 100: return "cudaErrorNoDevice";
    case 209: return "cudaErrorNoKernelImageForDevice";
    case 500: return "cudaErrorSymbolNotFound";
    case 600: return "cudaErrorNotReady";
    case 700: return "cudaErrorIllegalAddress";
    case 719: return "cudaErrorLaunchFailure";
    case 801: return "cudaErrorNotSupported";
    default: return "cudaErrorUnknown";
  }
}
const char* cudaGetErrorString(int e) { return e == 0 ? "no error" : "fake CUDA error"; }

// ---- NCCL ----

struct NcclUniqueId {
  char internal[128];
};

int ncclGetVersion(int* v) {
  *v = 22803;
  return 0;
}
int ncclGetUniqueId(NcclUniqueId* id) {
  if (int e = FailureOf("ncclGetUniqueId")) return e;
  std::memset(id->internal, 7, sizeof(id->internal));
  return 0;
}
int ncclCommInitRankConfig(void** comm, int, NcclUniqueId, int, void*) {
  if (int e = FailureOf("ncclCommInitRankConfig")) return e;
  auto* c = new FakeComm;
  c->async_error = FailureOf("ncclCommInitAsync");  // failing after it began
  *comm = c;
  return 0;
}
int ncclCommGetAsyncError(void* comm, int* error) {
  *error = static_cast<FakeComm*>(comm)->async_error;
  if (*error == 0) *error = FailureOf("ncclCommGetAsyncError");
  return 0;
}
int ncclCommAbort(void* comm) {
  delete static_cast<FakeComm*>(comm);
  return 0;
}
int ncclCommDestroy(void* comm) {
  delete static_cast<FakeComm*>(comm);
  return 0;
}
const char* ncclGetLastError(void*) { return "(the fake's last error)"; }
const char* ncclGetErrorString(int r) {
  switch (r) {
    case 0: return "no error";
    case 1: return "unhandled cuda error";
    case 2: return "unhandled system error";
    case 3: return "internal error";
    case 6: return "remote process exited or there was a network error";
    case 7: return "NCCL operation in progress";
    default: return "fake NCCL error";
  }
}
int ncclAllReduce(const void*, void*, size_t, int, int, void*, void*) {
  return FailureOf("ncclAllReduce");
}
int ncclBroadcast(const void*, void*, size_t, int, int, void*, void*) {
  return FailureOf("ncclBroadcast");
}
int ncclAllGather(const void*, void*, size_t, int, void*, void*) {
  return FailureOf("ncclAllGather");
}
int ncclReduceScatter(const void*, void*, size_t, int, int, void*, void*) {
  return FailureOf("ncclReduceScatter");
}
int ncclSend(const void*, size_t, int, int, void*, void*) { return FailureOf("ncclSend"); }
int ncclRecv(void*, size_t, int, int, void*, void*) { return FailureOf("ncclRecv"); }

}  // extern "C"
