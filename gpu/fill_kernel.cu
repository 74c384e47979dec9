// The one kernel drover ships: proves the nvcc wiring and gives tests something to run
// on a device. Launched through drover_fill_float (plain C ABI, so the caller is
// compiled by the host compiler).
#include <cuda_runtime.h>

namespace {

__global__ void FillKernel(float* p, size_t n, float v) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (; i < n; i += stride) p[i] = v;
}

}  // namespace

extern "C" cudaError_t drover_fill_float(float* p, size_t n, float v) {
  if (n == 0) return cudaSuccess;
  const int threads = 256;
  size_t blocks = (n + threads - 1) / threads;
  if (blocks > 4096) blocks = 4096;
  FillKernel<<<static_cast<unsigned>(blocks), threads>>>(p, n, v);
  cudaError_t launch = cudaGetLastError();
  if (launch != cudaSuccess) return launch;
  return cudaDeviceSynchronize();
}
