// The NCCL backend where no GPU is visible (always runs): creating a group fails at once
// with FAILED_PRECONDITION naming the cause, before any rendezvous.
#include "collective/nccl_group.h"

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace drover::collective {
namespace {

// A runtime with no device, as on a CPU-only node.
class NoGpuRuntime : public GpuRuntime {
 public:
  absl::StatusOr<int> DeviceCount() override { return 0; }
  absl::StatusOr<void*> Allocate(int, size_t) override { return absl::UnimplementedError(""); }
  absl::Status Free(int, void*) override { return absl::UnimplementedError(""); }
  absl::Status CopyToDevice(int, void*, const void*, size_t) override {
    return absl::UnimplementedError("");
  }
  absl::Status CopyToHost(int, void*, const void*, size_t) override {
    return absl::UnimplementedError("");
  }
  absl::Status RegisterHost(void*, size_t) override { return absl::UnimplementedError(""); }
  absl::Status UnregisterHost(void*) override { return absl::UnimplementedError(""); }
  absl::Status Fill(int, float*, size_t, float) override { return absl::UnimplementedError(""); }
  std::string Describe() override { return "no device"; }
};

GroupOptions Options() {
  GroupOptions o;
  o.name = "nccl";
  o.rank = 1;
  o.size = 2;
  o.job_id = "job-x";
  // Nothing listens here: the check must come before any rendezvous.
  o.scheduler_address = "127.0.0.1:1";
  o.backend = Backend::kNccl;
  return o;
}

TEST(NcclGroupTest, NoDeviceFailsAtOnceWithFailedPrecondition) {
  NoGpuRuntime none;
  absl::Time start = absl::Now();
  auto g = NewNcclGroup(Options(), &none);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  ASSERT_EQ(g.status().code(), absl::StatusCode::kFailedPrecondition) << g.status();
  EXPECT_TRUE(absl::StrContains(g.status().message(), "no GPU is visible")) << g.status();
  EXPECT_TRUE(absl::StrContains(g.status().message(), "'nccl'")) << g.status();
}

// Through NewGroup with the real CUDA runtime: the linked backend is registered. On a
// machine without a GPU it must fail at once; with one it proceeds to the rendezvous,
// which fails here (no scheduler) — either way never a hang.
TEST(NcclGroupTest, NewGroupUsesTheLinkedBackend) {
  GroupOptions o = Options();
  o.timeout = absl::Seconds(2);
  absl::Time start = absl::Now();
  auto g = NewGroup(o);
  EXPECT_FALSE(g.ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  if (g.status().code() == absl::StatusCode::kFailedPrecondition) {
    EXPECT_TRUE(absl::StrContains(g.status().message(), "no GPU is visible")) << g.status();
  }
}

}  // namespace
}  // namespace drover::collective
