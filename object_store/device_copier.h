// DeviceCopier: the one place where tensor bytes move between a device and host memory,
// so device memory never crosses a process boundary. A producer with a device tensor
// copies it ONCE into the object's data section in the shared-memory arena (ToHost) and
// only the object id travels; a consumer that wants it on its device copies from the
// arena into its own device memory (FromHost). See docs/object_store.md.
//
// The object store library depends only on this interface. Implementations:
// - NewHostCopier() (here): host memory only; what a process without a GPU uses.
// - NewCudaCopier() (//gpu:cuda_copier): CUDA; links cudart, so only worker processes
//   may use it (the node agent and scheduler must never create CUDA state).
//
// Ownership: the copier never owns the buffers it is given; the caller keeps them alive
// for the duration of the call. Copies are synchronous: when a call returns OK the
// bytes are in place.
// Thread safety: implementations are safe to call from several threads.
// Errors: FAILED_PRECONDITION when the buffer names a device this process cannot use
// (e.g. no GPU), with the cause; INVALID_ARGUMENT for a malformed buffer (null pointer
// with bytes > 0, device < -1); INTERNAL for a failed device copy.
#ifndef DROVER_OBJECT_STORE_DEVICE_COPIER_H_
#define DROVER_OBJECT_STORE_DEVICE_COPIER_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"

namespace drover::object_store {

inline constexpr int kHostDevice = -1;

// A buffer in some memory space: device kHostDevice (-1) is ordinary host memory,
// device >= 0 is that device's memory (index as seen by this process, i.e. after
// CUDA_VISIBLE_DEVICES). Does not own `ptr`.
struct DeviceBuffer {
  int device = kHostDevice;
  void* ptr = nullptr;
};

class DeviceCopier {
 public:
  virtual ~DeviceCopier() = default;

  // Copies `bytes` from `src` (host or device) into host memory at `host_dst`
  // (typically the data section of an unsealed object).
  virtual absl::Status ToHost(const DeviceBuffer& src, void* host_dst, size_t bytes) = 0;
  // Copies `bytes` from host memory at `host_src` (typically a sealed object's data)
  // into `dst` (host or device).
  virtual absl::Status FromHost(const void* host_src, DeviceBuffer* dst, size_t bytes) = 0;
  // Makes host memory (the arena, mapped once per process) fast for device copies
  // (page-locks it). Idempotent per range. The host copier does nothing; a device
  // copier without a usable device fails with FAILED_PRECONDITION, so callers register
  // only `if (HasDevice())`.
  // REQUIRES: [ptr, ptr + bytes) stays mapped until UnregisterHostMemory(ptr).
  virtual absl::Status RegisterHostMemory(void* ptr, size_t bytes) = 0;
  // Undoes RegisterHostMemory; call before unmapping. OK if it was never registered
  // (including where there is no device), so cleanup paths need no special case.
  virtual absl::Status UnregisterHostMemory(void* ptr) = 0;
  // True if this process can copy to and from at least one device.
  virtual bool HasDevice() = 0;
  // "host memory only (no GPU in this process)", "CUDA 13.0 runtime, 2 devices", ...
  virtual std::string Describe() = 0;
};

// The CPU implementation: host buffers only (memcpy); a buffer on device >= 0 fails
// with FAILED_PRECONDITION. RegisterHostMemory is a no-op.
std::unique_ptr<DeviceCopier> NewHostCopier();

// This process's copier, made at first use and never destroyed: the implementation a
// linked library registered (linking //gpu:cuda_copier registers the CUDA copier), else
// the host copier. The SDK's CopyToDevice and DataLoader pin_memory go through it.
DeviceCopier* ProcessDeviceCopier();
// Sets the factory ProcessDeviceCopier uses. Call from a static initializer, before any
// use; returns true (for `static const bool registered = ...`).
bool RegisterProcessDeviceCopier(std::unique_ptr<DeviceCopier> (*factory)());

// Checks the parts of a copy request every implementation rejects the same way:
// null pointers with bytes > 0 and device < -1 (INVALID_ARGUMENT). `what` names the
// call ("ToHost") for the message.
absl::Status CheckCopyArgs(const char* what, int device, const void* device_ptr,
                           const void* host_ptr, size_t bytes);

}  // namespace drover::object_store

#endif  // DROVER_OBJECT_STORE_DEVICE_COPIER_H_
