#include "object_store/device_copier.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace drover::object_store {
namespace {

class HostCopier : public DeviceCopier {
 public:
  absl::Status ToHost(const DeviceBuffer& src, void* host_dst, size_t bytes) override {
    if (absl::Status s = CheckCopyArgs("ToHost", src.device, src.ptr, host_dst, bytes); !s.ok())
      return s;
    DROVER_RETURN_IF_ERROR(HostOnly("ToHost", src.device));
    if (bytes > 0) std::memmove(host_dst, src.ptr, bytes);
    return absl::OkStatus();
  }

  absl::Status FromHost(const void* host_src, DeviceBuffer* dst, size_t bytes) override {
    if (dst == nullptr) return absl::InvalidArgumentError("FromHost: destination buffer is null");
    if (absl::Status s = CheckCopyArgs("FromHost", dst->device, dst->ptr, host_src, bytes);
        !s.ok())
      return s;
    DROVER_RETURN_IF_ERROR(HostOnly("FromHost", dst->device));
    if (bytes > 0) std::memmove(dst->ptr, host_src, bytes);
    return absl::OkStatus();
  }

  absl::Status RegisterHostMemory(void*, size_t) override { return absl::OkStatus(); }
  absl::Status UnregisterHostMemory(void*) override { return absl::OkStatus(); }
  bool HasDevice() override { return false; }
  std::string Describe() override { return "host memory only (no GPU in this process)"; }

 private:
  static absl::Status HostOnly(const char* what, int device) {
    if (device == kHostDevice) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": buffer is on device ", device,
        ", but there is no GPU in this process; this process uses the host-only copier "
        "(link //gpu:cuda_copier and use NewCudaCopier() in a worker that owns a GPU), "
        "or pass a host buffer (device -1)"));
  }
};

}  // namespace

absl::Status CheckCopyArgs(const char* what, int device, const void* device_ptr,
                           const void* host_ptr, size_t bytes) {
  if (device < kHostDevice) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": device ", device, " is not a device index (-1 = host memory)"));
  }
  if (bytes > 0 && (device_ptr == nullptr || host_ptr == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": null ", device_ptr == nullptr ? "buffer" : "host", " pointer for ",
                     bytes, " bytes"));
  }
  return absl::OkStatus();
}

std::unique_ptr<DeviceCopier> NewHostCopier() { return std::make_unique<HostCopier>(); }

namespace {
// A function-local static: registration runs in other files' static initializers.
std::unique_ptr<DeviceCopier> (*&ProcessFactory())() {
  static std::unique_ptr<DeviceCopier> (*factory)() = &NewHostCopier;
  return factory;
}
}  // namespace

bool RegisterProcessDeviceCopier(std::unique_ptr<DeviceCopier> (*factory)()) {
  ProcessFactory() = factory;
  return true;
}

DeviceCopier* ProcessDeviceCopier() {
  static DeviceCopier* copier = ProcessFactory()().release();
  return copier;
}

}  // namespace drover::object_store
