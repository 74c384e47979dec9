// The one kernel drover ships: proves the nvcc wiring and gives tests something to run
// on a device. Built as a fat binary (no host code, no link to libcudart) that
// cuda_runtime.cc loads with cudaLibraryLoadData and launches by name, so drover
// binaries start on machines without CUDA.
#include <cstddef>

extern "C" __global__ void drover_fill_float(float* p, size_t n, float v) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (; i < n; i += stride) p[i] = v;
}
