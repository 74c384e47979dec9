#include "gpu/cuda_copier.h"

#include <cstring>
#include <mutex>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace drover {
namespace {

using object_store::CheckCopyArgs;
using object_store::DeviceBuffer;
using object_store::kHostDevice;

// Same code, with what was being done in front of the runtime's message.
absl::Status WithContext(const absl::Status& s, absl::string_view what) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
}

class CudaCopier : public object_store::DeviceCopier {
 public:
  explicit CudaCopier(std::unique_ptr<GpuRuntime> runtime) : rt_(std::move(runtime)) {}

  absl::Status ToHost(const DeviceBuffer& src, void* host_dst, size_t bytes) override {
    if (absl::Status s = CheckCopyArgs("ToHost", src.device, src.ptr, host_dst, bytes); !s.ok())
      return s;
    if (src.device == kHostDevice) {
      if (bytes > 0) std::memmove(host_dst, src.ptr, bytes);
      return absl::OkStatus();
    }
    const std::string what =
        absl::StrCat("ToHost of ", bytes, " bytes from device ", src.device);
    if (absl::Status s = Probe(); !s.ok()) return WithContext(s, what);
    return WithContext(rt_->CopyToHost(src.device, host_dst, src.ptr, bytes), what);
  }

  absl::Status FromHost(const void* host_src, DeviceBuffer* dst, size_t bytes) override {
    if (dst == nullptr) return absl::InvalidArgumentError("FromHost: destination buffer is null");
    if (absl::Status s = CheckCopyArgs("FromHost", dst->device, dst->ptr, host_src, bytes);
        !s.ok())
      return s;
    if (dst->device == kHostDevice) {
      if (bytes > 0) std::memmove(dst->ptr, host_src, bytes);
      return absl::OkStatus();
    }
    const std::string what =
        absl::StrCat("FromHost of ", bytes, " bytes to device ", dst->device);
    if (absl::Status s = Probe(); !s.ok()) return WithContext(s, what);
    return WithContext(rt_->CopyToDevice(dst->device, dst->ptr, host_src, bytes), what);
  }

  absl::Status RegisterHostMemory(void* ptr, size_t bytes) override {
    const std::string what = absl::StrCat("RegisterHostMemory of ", bytes, " bytes");
    if (ptr == nullptr && bytes > 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": null pointer"));
    }
    if (absl::Status s = Probe(); !s.ok()) return WithContext(s, what);
    return WithContext(rt_->RegisterHost(ptr, bytes), what);
  }

  absl::Status UnregisterHostMemory(void* ptr) override {
    if (!Probe().ok()) return absl::OkStatus();  // nothing can have been registered
    return WithContext(rt_->UnregisterHost(ptr), "UnregisterHostMemory");
  }

  bool HasDevice() override { return Probe().ok(); }

  std::string Describe() override { return absl::StrCat("CUDA copier: ", rt_->Describe()); }

 private:
  // Asks the runtime for devices once; a process's visible devices never change.
  absl::Status Probe() {
    std::call_once(probed_, [this] {
      absl::StatusOr<int> n = rt_->DeviceCount();
      probe_ = n.ok() ? absl::OkStatus() : n.status();
    });
    return probe_;
  }

  const std::unique_ptr<GpuRuntime> rt_;
  std::once_flag probed_;
  absl::Status probe_;  // written once under probed_
};

}  // namespace

std::unique_ptr<object_store::DeviceCopier> NewCudaCopier() {
  return NewCudaCopier(NewCudaRuntime());
}

std::unique_ptr<object_store::DeviceCopier> NewCudaCopier(std::unique_ptr<GpuRuntime> runtime) {
  return std::make_unique<CudaCopier>(std::move(runtime));
}

namespace {
// Linking this library makes the CUDA copier the process's (object_store::
// ProcessDeviceCopier): it touches CUDA only when a device buffer is first copied.
std::unique_ptr<object_store::DeviceCopier> MakeProcessCopier() { return NewCudaCopier(); }
const bool kRegistered = object_store::RegisterProcessDeviceCopier(&MakeProcessCopier);
}  // namespace

}  // namespace drover
