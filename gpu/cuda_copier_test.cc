// Runs everywhere. With the real CUDA runtime it checks the no-device behavior (and
// skips that part where a GPU is visible); with a fake GpuRuntime it checks that the
// adapter routes every call to the right runtime call with the right arguments.
#include "gpu/cuda_copier.h"

#include <chrono>
#include <cstring>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace drover {
namespace {

using object_store::DeviceBuffer;
using object_store::kHostDevice;
using ::testing::HasSubstr;

TEST(CudaCopierTest, WithoutDeviceEveryDeviceCallFailsFastNamingTheCause) {
  auto copier = NewCudaCopier();
  const auto start = std::chrono::steady_clock::now();
  if (copier->HasDevice()) GTEST_SKIP() << "a GPU is visible; see cuda_copier_gpu_test";
  EXPECT_THAT(copier->Describe(), HasSubstr("CUDA"));

  std::vector<char> host(4096, 'x');
  char* fake_device_ptr = host.data();  // never dereferenced: the call fails first
  absl::Status s = copier->ToHost({0, fake_device_ptr}, host.data(), 1024);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("ToHost of 1024 bytes from device 0"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("no CUDA device is visible"));

  DeviceBuffer dst{1, fake_device_ptr};
  s = copier->FromHost(host.data(), &dst, 1024);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("FromHost of 1024 bytes to device 1"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("CUDA_VISIBLE_DEVICES"));

  s = copier->RegisterHostMemory(host.data(), host.size());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("no CUDA device is visible"));
  EXPECT_TRUE(copier->UnregisterHostMemory(host.data()).ok());  // cleanup never fails

  // Many calls stay fast: the device probe is remembered.
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(copier->ToHost({0, fake_device_ptr}, host.data(), 8).code(),
              absl::StatusCode::kFailedPrecondition);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));

  // Host buffers still work: a CPU-only consumer can use the same copier.
  std::vector<char> out(host.size(), 0);
  DeviceBuffer host_dst{kHostDevice, out.data()};
  ASSERT_TRUE(copier->FromHost(host.data(), &host_dst, host.size()).ok());
  EXPECT_EQ(out, host);
}

// A device made of host memory that records what it is asked.
class FakeRuntime : public GpuRuntime {
 public:
  struct Log {
    int device_count_calls = 0;
    int last_device = -99;
    size_t last_bytes = 0;
    void* registered = nullptr;
    size_t registered_bytes = 0;
    bool unregistered = false;
  };
  FakeRuntime(int devices, Log* log) : devices_(devices), log_(log) {}

  absl::StatusOr<int> DeviceCount() override {
    ++log_->device_count_calls;
    if (devices_ == 0) return absl::FailedPreconditionError("no CUDA device is visible (fake)");
    return devices_;
  }
  absl::StatusOr<void*> Allocate(int, size_t) override { return absl::UnimplementedError(""); }
  absl::Status Free(int, void*) override { return absl::UnimplementedError(""); }
  absl::Status CopyToDevice(int device, void* dst, const void* src, size_t bytes) override {
    if (absl::Status s = Check(device); !s.ok()) return s;
    log_->last_device = device;
    log_->last_bytes = bytes;
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status CopyToHost(int device, void* dst, const void* src, size_t bytes) override {
    return CopyToDevice(device, dst, src, bytes);
  }
  absl::Status RegisterHost(void* ptr, size_t bytes) override {
    log_->registered = ptr;
    log_->registered_bytes = bytes;
    return absl::OkStatus();
  }
  absl::Status UnregisterHost(void*) override {
    log_->unregistered = true;
    return absl::OkStatus();
  }
  absl::Status Fill(int, float*, size_t, float) override { return absl::UnimplementedError(""); }
  std::string Describe() override { return "fake runtime"; }

 private:
  absl::Status Check(int device) {
    if (device >= devices_) return absl::InvalidArgumentError("device does not exist (fake)");
    return absl::OkStatus();
  }
  int devices_;
  Log* log_;
};

TEST(CudaCopierTest, RoutesCopiesToTheRuntime) {
  FakeRuntime::Log log;
  auto copier = NewCudaCopier(std::make_unique<FakeRuntime>(2, &log));
  EXPECT_TRUE(copier->HasDevice());
  EXPECT_EQ(copier->Describe(), "CUDA copier: fake runtime");

  std::vector<char> arena(256, 0), device(256, 0), host(256);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<char>(i);
  ASSERT_TRUE(copier->RegisterHostMemory(arena.data(), arena.size()).ok());
  EXPECT_EQ(log.registered, arena.data());
  EXPECT_EQ(log.registered_bytes, 256u);

  // Put: device -> arena. Get: arena -> device.
  std::memcpy(device.data(), host.data(), host.size());
  ASSERT_TRUE(copier->ToHost({1, device.data()}, arena.data(), 256).ok());
  EXPECT_EQ(log.last_device, 1);
  EXPECT_EQ(log.last_bytes, 256u);
  EXPECT_EQ(arena, host);
  std::vector<char> device2(256, 0);
  DeviceBuffer dst{0, device2.data()};
  ASSERT_TRUE(copier->FromHost(arena.data(), &dst, 256).ok());
  EXPECT_EQ(log.last_device, 0);
  EXPECT_EQ(device2, host);

  // A device index the runtime rejects keeps the runtime's code, with context.
  absl::Status s = copier->ToHost({5, device.data()}, arena.data(), 16);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("from device 5"));
  // Malformed buffers never reach the runtime.
  log.last_device = -99;
  EXPECT_EQ(copier->ToHost({-3, device.data()}, arena.data(), 16).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(copier->ToHost({0, nullptr}, arena.data(), 16).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(log.last_device, -99);

  ASSERT_TRUE(copier->UnregisterHostMemory(arena.data()).ok());
  EXPECT_TRUE(log.unregistered);
  EXPECT_EQ(log.device_count_calls, 1);  // probed once
}

TEST(CudaCopierTest, FakeWithoutDeviceFailsEveryDeviceCall) {
  FakeRuntime::Log log;
  auto copier = NewCudaCopier(std::make_unique<FakeRuntime>(0, &log));
  EXPECT_FALSE(copier->HasDevice());
  char a[8] = {}, b[8] = {};
  EXPECT_EQ(copier->ToHost({0, a}, b, 8).code(), absl::StatusCode::kFailedPrecondition);
  DeviceBuffer dst{0, a};
  EXPECT_EQ(copier->FromHost(b, &dst, 8).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(copier->RegisterHostMemory(a, 8).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(copier->UnregisterHostMemory(a).ok());
  EXPECT_EQ(log.last_device, -99);  // no copy reached the runtime
  EXPECT_EQ(log.registered, nullptr);
  EXPECT_EQ(log.device_count_calls, 1);
}

// Linking //gpu:cuda_copier makes it the process's copier, the one the SDK's
// CopyToDevice and DataLoader pin_memory use (they had the host-only copier for good).
TEST(CudaCopierTest, LinkingItMakesItTheProcessCopier) {
  object_store::DeviceCopier* copier = object_store::ProcessDeviceCopier();
  ASSERT_NE(copier, nullptr);
  EXPECT_THAT(copier->Describe(), HasSubstr("CUDA copier"));
  EXPECT_EQ(copier, object_store::ProcessDeviceCopier());
  // Host buffers still copy without touching CUDA.
  const char in[] = "host to host";
  char out[sizeof(in)] = {};
  DeviceBuffer dst{kHostDevice, out};
  ASSERT_TRUE(copier->FromHost(in, &dst, sizeof(in)).ok());
  EXPECT_STREQ(out, in);
}

}  // namespace
}  // namespace drover
