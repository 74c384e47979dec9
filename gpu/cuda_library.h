// The CUDA runtime (libcudart) and NCCL, loaded with dlopen at first use instead of
// linked, so that every drover binary starts on a machine without them (the daemons
// never touch them; workers find them on the GPU machine: /usr/local/cuda, or the
// copies PyTorch ships) and nothing CUDA is carried with drover.
//
// Where each is looked for, in order (the first that loads wins):
//   CUDA runtime: $DROVER_CUDA_RUNTIME_LIBRARY (a path), libcudart.so.13 (the dynamic
//     loader's search: LD_LIBRARY_PATH, ldconfig), /usr/local/cuda/lib64/libcudart.so.13,
//     /usr/local/cuda/lib64/libcudart.so
//   NCCL: $DROVER_NCCL_LIBRARY (a path, e.g. PyTorch's nvidia/nccl/lib/libnccl.so.2),
//     libnccl.so.2, /usr/local/cuda/lib64/libnccl.so.2, /usr/lib/x86_64-linux-gnu/libnccl.so.2
// When a variable is set, only it is tried (a wrong path is an error, not a silent
// fallback). Tests point both at the stand-in //gpu:libfake_cuda.so.
//
// Each library is loaded once per process (the first call) and never unloaded; the
// tables are then read-only. Thread-safe.
#ifndef DROVER_GPU_CUDA_LIBRARY_H_
#define DROVER_GPU_CUDA_LIBRARY_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "absl/status/statusor.h"

namespace drover::gpu {

#define DROVER_CUDA_FN(name) decltype(&::name) name = nullptr

// The CUDA runtime entry points drover calls.
struct CudaApi {
  std::string path;     // the file that was loaded
  int version = 0;      // cudaRuntimeGetVersion: 13000 for 13.0
  DROVER_CUDA_FN(cudaGetDeviceCount);
  DROVER_CUDA_FN(cudaSetDevice);
  DROVER_CUDA_FN(cudaRuntimeGetVersion);
  DROVER_CUDA_FN(cudaDriverGetVersion);
  // Three have C++ template overloads in cuda_runtime.h: their C signatures, spelled out.
  cudaError_t (*cudaMalloc)(void** ptr, size_t bytes) = nullptr;
  DROVER_CUDA_FN(cudaFree);
  cudaError_t (*cudaMallocHost)(void** ptr, size_t bytes) = nullptr;
  DROVER_CUDA_FN(cudaFreeHost);
  DROVER_CUDA_FN(cudaMemcpy);
  DROVER_CUDA_FN(cudaMemset);
  DROVER_CUDA_FN(cudaHostRegister);
  DROVER_CUDA_FN(cudaHostUnregister);
  DROVER_CUDA_FN(cudaStreamCreateWithFlags);
  DROVER_CUDA_FN(cudaStreamDestroy);
  DROVER_CUDA_FN(cudaStreamQuery);
  DROVER_CUDA_FN(cudaDeviceSynchronize);
  DROVER_CUDA_FN(cudaGetLastError);
  DROVER_CUDA_FN(cudaGetErrorName);
  DROVER_CUDA_FN(cudaGetErrorString);
  DROVER_CUDA_FN(cudaGetDeviceProperties);
  DROVER_CUDA_FN(cudaLibraryLoadData);
  DROVER_CUDA_FN(cudaLibraryGetKernel);
  cudaError_t (*cudaLaunchKernel)(const void* func, dim3 grid, dim3 block, void** args,
                                  size_t shared_mem, cudaStream_t stream) = nullptr;
};

// The NCCL entry points drover calls.
struct NcclApi {
  std::string path;
  int version = 0;  // ncclGetVersion: 22803 for 2.28.3
  DROVER_CUDA_FN(ncclGetVersion);
  DROVER_CUDA_FN(ncclGetUniqueId);
  DROVER_CUDA_FN(ncclCommInitRankConfig);
  DROVER_CUDA_FN(ncclCommGetAsyncError);
  DROVER_CUDA_FN(ncclCommAbort);
  DROVER_CUDA_FN(ncclCommDestroy);
  DROVER_CUDA_FN(ncclGetLastError);
  DROVER_CUDA_FN(ncclGetErrorString);
  DROVER_CUDA_FN(ncclAllReduce);
  DROVER_CUDA_FN(ncclBroadcast);
  DROVER_CUDA_FN(ncclAllGather);
  DROVER_CUDA_FN(ncclReduceScatter);
  DROVER_CUDA_FN(ncclSend);
  DROVER_CUDA_FN(ncclRecv);
};

#undef DROVER_CUDA_FN

// The loaded runtime, or FAILED_PRECONDITION naming every place looked and why each
// failed (a missing file, a missing symbol) and which variable to set.
absl::StatusOr<const CudaApi*> LoadCudaRuntime();
absl::StatusOr<const NcclApi*> LoadNccl();

// "CUDA runtime 13.0 from /usr/local/cuda/lib64/libcudart.so.13" or the load error.
std::string DescribeCudaRuntime();
// "NCCL 2.28.3 from /.../libnccl.so.2" or the load error.
std::string DescribeNccl();

}  // namespace drover::gpu

#endif  // DROVER_GPU_CUDA_LIBRARY_H_
