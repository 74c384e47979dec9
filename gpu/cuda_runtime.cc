#include <cuda_runtime.h>
#include <nccl.h>

#include "absl/strings/str_cat.h"
#include "gpu/gpu_runtime.h"

extern "C" cudaError_t drover_fill_float(float* p, size_t n, float v);

namespace drover {
namespace {

absl::Status CudaError(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  std::string msg = absl::StrCat(what, ": ", cudaGetErrorName(err), " (",
                                 cudaGetErrorString(err), ")");
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver ||
      err == cudaErrorInitializationError) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no CUDA device is visible to this process: ", msg,
        "; check the NVIDIA driver (nvidia-smi) and CUDA_VISIBLE_DEVICES"));
  }
  return absl::InternalError(msg);
}

class CudaRuntime : public GpuRuntime {
 public:
  absl::StatusOr<int> DeviceCount() override {
    int count = 0;  // left unwritten on failure (cudaErrorInsufficientDriver)
    absl::Status s = CudaError(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    if (!s.ok()) return s;
    if (count == 0) {
      return absl::FailedPreconditionError(
          "no CUDA device is visible to this process; check CUDA_VISIBLE_DEVICES");
    }
    return count;
  }

  absl::StatusOr<void*> Allocate(int device, size_t bytes) override {
    if (absl::Status s = Use(device); !s.ok()) return s;
    void* p = nullptr;
    absl::Status s = CudaError(cudaMalloc(&p, bytes), "cudaMalloc");
    if (!s.ok()) return s;
    return p;
  }

  absl::Status Free(int device, void* ptr) override {
    if (absl::Status s = Use(device); !s.ok()) return s;
    return CudaError(cudaFree(ptr), "cudaFree");
  }

  absl::Status CopyToDevice(int device, void* dst, const void* src, size_t bytes) override {
    if (absl::Status s = Use(device); !s.ok()) return s;
    return CudaError(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }

  absl::Status CopyToHost(int device, void* dst, const void* src, size_t bytes) override {
    if (absl::Status s = Use(device); !s.ok()) return s;
    return CudaError(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  }

  absl::Status RegisterHost(void* ptr, size_t bytes) override {
    cudaError_t err = cudaHostRegister(ptr, bytes, cudaHostRegisterDefault);
    if (err == cudaErrorHostMemoryAlreadyRegistered) return absl::OkStatus();
    return CudaError(err, "cudaHostRegister");
  }

  absl::Status UnregisterHost(void* ptr) override {
    cudaError_t err = cudaHostUnregister(ptr);
    if (err == cudaErrorHostMemoryNotRegistered) return absl::OkStatus();
    return CudaError(err, "cudaHostUnregister");
  }

  absl::Status Fill(int device, float* ptr, size_t count, float value) override {
    if (absl::Status s = Use(device); !s.ok()) return s;
    return CudaError(drover_fill_float(ptr, count, value), "fill kernel");
  }

  std::string Describe() override {
    int version = 0;
    cudaRuntimeGetVersion(&version);
    std::string rt = absl::StrCat("CUDA ", version / 1000, ".", (version % 1000) / 10,
                                  " runtime");
    auto n = DeviceCount();
    if (!n.ok()) return absl::StrCat(rt, ", ", n.status().message());
    return absl::StrCat(rt, ", ", *n, *n == 1 ? " device" : " devices");
  }

 private:
  absl::Status Use(int device) {
    auto n = DeviceCount();
    if (!n.ok()) return n.status();
    if (device < 0 || device >= *n) {
      return absl::InvalidArgumentError(absl::StrCat("device ", device, " does not exist; ", *n,
                                                     " visible (CUDA_VISIBLE_DEVICES)"));
    }
    return CudaError(cudaSetDevice(device), "cudaSetDevice");
  }
};

}  // namespace

std::unique_ptr<GpuRuntime> NewCudaRuntime() { return std::make_unique<CudaRuntime>(); }

std::string NcclVersion() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
  return absl::StrCat(v / 10000, ".", (v % 10000) / 100, ".", v % 100);
}

}  // namespace drover
