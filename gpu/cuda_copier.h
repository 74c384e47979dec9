// The CUDA implementation of object_store::DeviceCopier, over GpuRuntime: device
// tensors are copied into the shared-memory arena (ToHost) on put and from it into this
// process's device (FromHost) on get; the arena is page-locked with
// RegisterHostMemory so those copies run at full PCIe speed.
//
// Worker processes only: the first device call initializes CUDA in the process (see
// gpu_runtime.h). Host buffers (device -1) are copied with memmove and never touch
// CUDA. Where no device is visible, HasDevice() is false and every call naming a device
// (and RegisterHostMemory) fails at once with FAILED_PRECONDITION saying why; the
// device probe is done once and remembered.
//
// Linking it (alwayslink) also makes the CUDA copier this process's copier
// (object_store::ProcessDeviceCopier), which the SDK's CopyToDevice and DataLoader
// pin_memory use.
//
// Thread safety: safe to call from several threads (as GpuRuntime is).
#ifndef DROVER_GPU_CUDA_COPIER_H_
#define DROVER_GPU_CUDA_COPIER_H_

#include <memory>

#include "gpu/gpu_runtime.h"
#include "object_store/device_copier.h"

namespace drover {

// A copier over the CUDA runtime (NewCudaRuntime()).
std::unique_ptr<object_store::DeviceCopier> NewCudaCopier();
// A copier over `runtime` (tests pass a fake). REQUIRES: runtime != nullptr.
std::unique_ptr<object_store::DeviceCopier> NewCudaCopier(std::unique_ptr<GpuRuntime> runtime);

}  // namespace drover

#endif  // DROVER_GPU_CUDA_COPIER_H_
