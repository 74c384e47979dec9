// The GPU behind an interface: everything drover does with a device goes through
// GpuRuntime, so the CPU paths are tested for real here and the CUDA path compiles and
// links everywhere but runs only where a device is visible.
//
// Only worker processes may create a runtime: constructing the CUDA implementation and
// calling it creates driver state, which the scheduler and node agent must never have
// (they do not link this library). One process uses the devices in its
// CUDA_VISIBLE_DEVICES for its whole life.
//
// Thread safety: implementations are safe to call from several threads.
// Errors: FAILED_PRECONDITION when no device is visible (says so, and what to check);
// INVALID_ARGUMENT for a device index out of range; INTERNAL for other CUDA errors,
// with the CUDA error name.
#ifndef DROVER_GPU_GPU_RUNTIME_H_
#define DROVER_GPU_GPU_RUNTIME_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace drover {

class GpuRuntime {
 public:
  virtual ~GpuRuntime() = default;

  // Devices visible to this process (after CUDA_VISIBLE_DEVICES).
  virtual absl::StatusOr<int> DeviceCount() = 0;
  // Device memory of `bytes` on `device`. The caller frees it with Free.
  virtual absl::StatusOr<void*> Allocate(int device, size_t bytes) = 0;
  virtual absl::Status Free(int device, void* ptr) = 0;
  // Synchronous copies between host memory and `device`.
  virtual absl::Status CopyToDevice(int device, void* dst, const void* src, size_t bytes) = 0;
  virtual absl::Status CopyToHost(int device, void* dst, const void* src, size_t bytes) = 0;
  // Page-locks host memory (e.g. a shared-memory arena) so copies run at full speed.
  // Idempotent per range; Unregister undoes it.
  virtual absl::Status RegisterHost(void* ptr, size_t bytes) = 0;
  virtual absl::Status UnregisterHost(void* ptr) = 0;
  // Sets `count` floats at device pointer `ptr` to `value` (runs a kernel).
  virtual absl::Status Fill(int device, float* ptr, size_t count, float value) = 0;
  // "CUDA 13.0 runtime, 2 devices" / "CUDA 13.0 runtime, no device: ...".
  virtual std::string Describe() = 0;
};

// The CUDA implementation (links libcudart). Creating it touches nothing; the first
// call initializes CUDA in this process.
std::unique_ptr<GpuRuntime> NewCudaRuntime();

// NCCL's version as "2.28.3" (does not need a device).
std::string NcclVersion();

}  // namespace drover

#endif  // DROVER_GPU_GPU_RUNTIME_H_
