#include <mutex>

#include "absl/strings/str_cat.h"
#include "gpu/cuda_library.h"
#include "gpu/gpu_runtime.h"

namespace drover {
namespace gpu {
extern const unsigned char kFillKernelFatbin[];
extern const size_t kFillKernelFatbinSize;
}  // namespace gpu

namespace {

using gpu::CudaApi;

constexpr char kNoDevice[] = "no CUDA device is visible to this process: ";

class CudaRuntime : public GpuRuntime {
 public:
  absl::StatusOr<int> DeviceCount() override {
    absl::StatusOr<const CudaApi*> api = gpu::LoadCudaRuntime();
    if (!api.ok()) {
      // No runtime library is no device, for callers; the message says what was tried.
      return absl::FailedPreconditionError(absl::StrCat(kNoDevice, api.status().message()));
    }
    int count = 0;  // left unwritten on failure (cudaErrorInsufficientDriver)
    absl::Status s = CudaError((*api)->cudaGetDeviceCount(&count), "cudaGetDeviceCount");
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
    absl::Status s = CudaError(cu()->cudaMalloc(&p, bytes), "cudaMalloc");
    if (!s.ok()) return s;
    return p;
  }

  absl::Status Free(int device, void* ptr) override {
    if (absl::Status s = Use(device); !s.ok()) return s;
    return CudaError(cu()->cudaFree(ptr), "cudaFree");
  }

  absl::Status CopyToDevice(int device, void* dst, const void* src, size_t bytes) override {
    if (absl::Status s = Use(device); !s.ok()) return s;
    return CudaError(cu()->cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }

  absl::Status CopyToHost(int device, void* dst, const void* src, size_t bytes) override {
    if (absl::Status s = Use(device); !s.ok()) return s;
    return CudaError(cu()->cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  }

  absl::Status RegisterHost(void* ptr, size_t bytes) override {
    if (absl::Status s = Loaded(); !s.ok()) return s;
    cudaError_t err = cu()->cudaHostRegister(ptr, bytes, cudaHostRegisterDefault);
    if (err == cudaErrorHostMemoryAlreadyRegistered) return absl::OkStatus();
    return CudaError(err, "cudaHostRegister");
  }

  absl::Status UnregisterHost(void* ptr) override {
    if (absl::Status s = Loaded(); !s.ok()) return s;
    cudaError_t err = cu()->cudaHostUnregister(ptr);
    if (err == cudaErrorHostMemoryNotRegistered) return absl::OkStatus();
    return CudaError(err, "cudaHostUnregister");
  }

  absl::Status Fill(int device, float* ptr, size_t count, float value) override {
    if (absl::Status s = Use(device); !s.ok()) return s;
    if (count == 0) return absl::OkStatus();
    absl::StatusOr<cudaKernel_t> kernel = FillKernel();
    if (!kernel.ok()) return kernel.status();
    const unsigned threads = 256;
    size_t blocks = (count + threads - 1) / threads;
    if (blocks > 4096) blocks = 4096;
    void* args[] = {&ptr, &count, &value};
    cudaError_t err = cu()->cudaLaunchKernel(reinterpret_cast<const void*>(*kernel),
                                            dim3(static_cast<unsigned>(blocks)), dim3(threads),
                                            args, 0, nullptr);
    if (err == cudaSuccess) err = cu()->cudaDeviceSynchronize();
    return CudaError(err, "fill kernel");
  }

  std::string Describe() override {
    absl::StatusOr<const CudaApi*> api = gpu::LoadCudaRuntime();
    if (!api.ok()) return absl::StrCat(kNoDevice, api.status().message());
    const int version = (*api)->version;
    std::string rt = absl::StrCat("CUDA ", version / 1000, ".", (version % 1000) / 10,
                                  " runtime (", (*api)->path, ")");
    auto n = DeviceCount();
    if (!n.ok()) return absl::StrCat(rt, ", ", n.status().message());
    return absl::StrCat(rt, ", ", *n, *n == 1 ? " device" : " devices");
  }

 private:
  absl::Status CudaError(cudaError_t err, const char* what) {
    if (err == cudaSuccess) return absl::OkStatus();
    std::string msg = absl::StrCat(what, ": ", cu()->cudaGetErrorName(err), " (",
                                   cu()->cudaGetErrorString(err), ")");
    if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver ||
        err == cudaErrorInitializationError) {
      return absl::FailedPreconditionError(absl::StrCat(
          kNoDevice, msg, "; check the NVIDIA driver (nvidia-smi) and CUDA_VISIBLE_DEVICES"));
    }
    return absl::InternalError(msg);
  }

  // Loads the runtime library (once per process).
  absl::Status Loaded() {
    absl::StatusOr<const CudaApi*> api = gpu::LoadCudaRuntime();
    if (!api.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(kNoDevice, api.status().message()));
    }
    return absl::OkStatus();
  }

  absl::Status Use(int device) {
    if (absl::Status s = Loaded(); !s.ok()) return s;
    auto n = DeviceCount();
    if (!n.ok()) return n.status();
    if (device < 0 || device >= *n) {
      return absl::InvalidArgumentError(absl::StrCat("device ", device, " does not exist; ", *n,
                                                     " visible (CUDA_VISIBLE_DEVICES)"));
    }
    return CudaError(cu()->cudaSetDevice(device), "cudaSetDevice");
  }

  // The fill kernel from the embedded fat binary, loaded once (a CUDA library is not
  // tied to a device: it is loaded into each device's context when launched there).
  absl::StatusOr<cudaKernel_t> FillKernel() {
    std::call_once(kernel_once_, [this] {
      cudaLibrary_t lib = nullptr;
      cudaError_t err = cu()->cudaLibraryLoadData(&lib, gpu::kFillKernelFatbin, nullptr, nullptr,
                                                 0, nullptr, nullptr, 0);
      if (err == cudaSuccess) err = cu()->cudaLibraryGetKernel(&kernel_, lib, "drover_fill_float");
      kernel_status_ = CudaError(err, "fill kernel: loading it");
    });
    if (!kernel_status_.ok()) return kernel_status_;
    return kernel_;
  }

  // The loaded runtime. REQUIRES: Loaded() returned OK (every caller checks first).
  static const CudaApi* cu() { return *gpu::LoadCudaRuntime(); }

  std::once_flag kernel_once_;
  cudaKernel_t kernel_ = nullptr;  // written once under kernel_once_
  absl::Status kernel_status_;
};

}  // namespace

std::unique_ptr<GpuRuntime> NewCudaRuntime() { return std::make_unique<CudaRuntime>(); }

std::string NcclVersion() {
  absl::StatusOr<const gpu::NcclApi*> api = gpu::LoadNccl();
  if (!api.ok()) return "unknown";
  const int v = (*api)->version;
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
  return absl::StrCat(v / 10000, ".", (v % 10000) / 100, ".", v % 100);
}

}  // namespace drover
