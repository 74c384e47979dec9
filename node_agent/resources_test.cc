#include "node_agent/resources.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "common/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace drover {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

std::string TmpPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

// A machine with nothing to discover: no meminfo, no GPUs, no NVML, limits untouched.
DiscoveryPaths NothingToDiscover() {
  DiscoveryPaths paths;
  paths.meminfo = TmpPath("no-such-meminfo");
  paths.nvidia_gpus_dir = TmpPath("no-such-dir");
  paths.use_nvml = false;
  paths.adjust_nofile = false;
  return paths;
}

TEST(ResourcesTest, ParsesMemTotal) {
  EXPECT_EQ(ParseMemTotal("MemTotal:       16384 kB\nMemFree: 1 kB\n"), 16384 * 1024);
  EXPECT_EQ(ParseMemTotal("MemFree: 1 kB\n"), 0);
}

TEST(ResourcesTest, ShmWarningSaysHowToFix) {
  EXPECT_EQ(ShmWarning(8 * kGiB, 32 * kGiB), "");
  std::string small = ShmWarning(64 << 20, 32 * kGiB);  // docker's default 64 MiB
  EXPECT_NE(small.find("mount -o remount,size="), std::string::npos) << small;
  EXPECT_NE(small.find("--shm-size"), std::string::npos) << small;
  // Above 1 GiB but below 10% of RAM.
  EXPECT_NE(ShmWarning(2 * kGiB, 64 * kGiB), "");
}

TEST(ResourcesTest, DiscoversFromFakeProcTree) {
  std::string root = TmpPath("fakeproc");
  ASSERT_TRUE(MakeDirs(root + "/gpus/0000:01:00.0").ok());
  ASSERT_TRUE(MakeDirs(root + "/gpus/0000:02:00.0").ok());
  ASSERT_TRUE(WriteFileAtomic(root + "/meminfo", "MemTotal: 1048576 kB\n").ok());
  DiscoveryPaths paths;
  paths.meminfo = root + "/meminfo";
  paths.nvidia_gpus_dir = root + "/gpus";
  paths.use_nvml = false;
  paths.adjust_nofile = false;
  ResourceOverrides none;
  NodeResources r = DiscoverResources(none, paths);
  EXPECT_EQ(r.total.memory_bytes(), 1 * kGiB);
  EXPECT_EQ(r.total.gpus(), 2);
  EXPECT_EQ(r.gpu_ids, (std::vector<int>{0, 1}));
  EXPECT_GE(r.total.cpus(), 1);
}

TEST(ResourcesTest, OverridesWin) {
  const DiscoveryPaths paths = NothingToDiscover();
  ResourceOverrides o;
  o.num_cpus = 3;
  o.memory_bytes = 5 * kGiB;
  o.num_gpus = 4;
  o.custom["ssd"] = 2;
  NodeResources r = DiscoverResources(o, paths);
  EXPECT_EQ(r.total.cpus(), 3);
  EXPECT_EQ(r.total.memory_bytes(), 5 * kGiB);
  EXPECT_EQ(r.total.gpus(), 4);
  EXPECT_EQ(r.gpu_ids, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(r.gpu_names, std::vector<std::string>(4, "declared"));
  EXPECT_EQ(r.total.custom().at("ssd"), 2);
}

TEST(ResourcesTest, GpuIdsDeclareTheDevicesWorkersAreGiven) {
  const DiscoveryPaths paths = NothingToDiscover();
  ResourceOverrides o;
  o.num_gpus = 8;  // gpu_ids win
  o.gpu_ids = std::vector<int>{2, 3};
  NodeResources r = DiscoverResources(o, paths);
  EXPECT_EQ(r.total.gpus(), 2);
  EXPECT_EQ(r.gpu_ids, (std::vector<int>{2, 3}));
  o.gpu_ids = std::vector<int>{};
  EXPECT_EQ(DiscoverResources(o, paths).total.gpus(), 0);
}

TEST(ResourcesTest, NoGpusWithoutDriver) {
  DiscoveryPaths paths;
  paths.nvidia_gpus_dir = TmpPath("no-such-dir");
  paths.adjust_nofile = false;
  // NVML is tried for real: on a machine without a driver dlopen fails quietly.
  NodeResources r = DiscoverResources(ResourceOverrides(), paths);
  EXPECT_EQ(r.total.gpus(), static_cast<int>(r.gpu_names.size()));
}

// GPU discovery through the stand-in NVML (node_agent/testing/fake_nvml.cc), loaded by
// the same dlopen path as the real libnvidia-ml.so.1.
class NvmlDiscoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"DROVER_FAKE_NVML_DEVICES", "DROVER_FAKE_NVML_INIT",
                          "DROVER_FAKE_NVML_COUNT", "DROVER_FAKE_NVML_LOST"}) {
      unsetenv(v);
    }
    calls_ = TmpPath("nvml-calls");
    ::unlink(calls_.c_str());
    setenv("DROVER_FAKE_NVML_CALLS", calls_.c_str(), 1);
    proc_ = TmpPath("nvml-proc");
    ASSERT_TRUE(MakeDirs(proc_ + "/gpus/0000:01:00.0").ok());
    paths_.nvidia_gpus_dir = proc_ + "/gpus";  // one GPU, for the fallback
    paths_.adjust_nofile = false;
    paths_.nvml_library = testing::Runfile("node_agent/libfake_nvml.so");
  }

  // The NVML calls made, in order.
  std::vector<std::string> Calls() {
    auto text = ReadFile(calls_);
    if (!text.ok()) return {};
    return absl::StrSplit(*text, '\n', absl::SkipEmpty());
  }
  int Count(const std::string& call) {
    std::vector<std::string> c = Calls();
    return static_cast<int>(std::count(c.begin(), c.end(), call));
  }

  std::string calls_;
  std::string proc_;
  DiscoveryPaths paths_;
};

TEST_F(NvmlDiscoveryTest, ReportsNamesMemoryAndUuidsOfEveryDevice) {
  setenv("DROVER_FAKE_NVML_DEVICES",
         "NVIDIA A100-SXM4-80GB|85899345920|GPU-11111111-2222-3333-4444-555555555555;"
         "NVIDIA H100 80GB HBM3|85520809984|GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
         1);
  NodeResources r = DiscoverResources(ResourceOverrides(), paths_);
  EXPECT_EQ(r.total.gpus(), 2);
  EXPECT_EQ(r.gpu_ids, (std::vector<int>{0, 1}));
  EXPECT_EQ(r.gpu_names,
            (std::vector<std::string>{"NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"}));
  ASSERT_EQ(r.gpus.size(), 2u);
  EXPECT_EQ(r.gpus[0].memory_bytes, 85899345920);
  EXPECT_EQ(r.gpus[1].uuid, "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee");
  // NVML is shut down after use, once per successful init.
  EXPECT_EQ(Count("nvmlInit_v2"), 1);
  EXPECT_EQ(Count("nvmlShutdown"), 1);
  EXPECT_EQ(Calls().back(), "nvmlShutdown");
}

TEST_F(NvmlDiscoveryTest, DriverNotLoadedFallsBackToProcWithoutShutdown) {
  setenv("DROVER_FAKE_NVML_DEVICES", "NVIDIA A100|1|GPU-1", 1);
  setenv("DROVER_FAKE_NVML_INIT", "9", 1);  // NVML_ERROR_DRIVER_NOT_LOADED
  NodeResources r = DiscoverResources(ResourceOverrides(), paths_);
  EXPECT_EQ(r.gpu_names, std::vector<std::string>{"NVIDIA GPU"});  // from /proc
  EXPECT_TRUE(r.gpus.empty());
  EXPECT_EQ(Count("nvmlInit_v2"), 1);
  EXPECT_EQ(Count("nvmlShutdown"), 0);
}

TEST_F(NvmlDiscoveryTest, ACountOfZeroMeansNoGpuEvenIfProcListsOne) {
  setenv("DROVER_FAKE_NVML_DEVICES", "", 1);
  NodeResources r = DiscoverResources(ResourceOverrides(), paths_);
  EXPECT_EQ(r.total.gpus(), 0);
  EXPECT_TRUE(r.gpu_ids.empty());
  EXPECT_EQ(Count("nvmlShutdown"), 1);
}

TEST_F(NvmlDiscoveryTest, ALostDeviceIsKeptUnnamedWithAWarning) {
  setenv("DROVER_FAKE_NVML_DEVICES", "NVIDIA T4|16106127360|GPU-a;NVIDIA T4|16106127360|GPU-b", 1);
  setenv("DROVER_FAKE_NVML_LOST", "1", 1);
  NodeResources r = DiscoverResources(ResourceOverrides(), paths_);
  EXPECT_EQ(r.gpu_names, (std::vector<std::string>{"NVIDIA T4", "unknown GPU"}));
  ASSERT_EQ(r.gpus.size(), 2u);
  EXPECT_EQ(r.gpus[1].uuid, "");
  EXPECT_THAT(r.warnings, ::testing::Contains(::testing::AllOf(
                              ::testing::HasSubstr("GPU 1: NVML cannot describe it"),
                              ::testing::HasSubstr("GPU is lost (NVML code 15)"))));
  EXPECT_EQ(Count("nvmlShutdown"), 1);
}

TEST_F(NvmlDiscoveryTest, ANameTooLongForTheBufferIsInsufficientSize) {
  setenv("DROVER_FAKE_NVML_DEVICES", (std::string(120, 'X') + "|1|GPU-x").c_str(), 1);
  NodeResources r = DiscoverResources(ResourceOverrides(), paths_);
  EXPECT_EQ(r.gpu_names, std::vector<std::string>{"unknown GPU"});
  EXPECT_THAT(r.warnings, ::testing::Contains(::testing::HasSubstr("Insufficient Size")));
}

TEST_F(NvmlDiscoveryTest, AFailingCountFallsBackToProcWithAWarning) {
  setenv("DROVER_FAKE_NVML_DEVICES", "NVIDIA A100|1|GPU-1", 1);
  setenv("DROVER_FAKE_NVML_COUNT", "999", 1);  // NVML_ERROR_UNKNOWN
  NodeResources r = DiscoverResources(ResourceOverrides(), paths_);
  EXPECT_EQ(r.gpu_names, std::vector<std::string>{"NVIDIA GPU"});
  EXPECT_THAT(r.warnings, ::testing::Contains(::testing::HasSubstr("NVML cannot count")));
  EXPECT_EQ(Count("nvmlShutdown"), 1);
}

TEST_F(NvmlDiscoveryTest, AMissingLibraryFallsBackToProc) {
  paths_.nvml_library = TmpPath("no-such-libnvidia-ml.so");
  NodeResources r = DiscoverResources(ResourceOverrides(), paths_);
  EXPECT_EQ(r.gpu_names, std::vector<std::string>{"NVIDIA GPU"});
  EXPECT_TRUE(Calls().empty());
}

TEST_F(NvmlDiscoveryTest, DeclaredGpusSkipNvml) {
  setenv("DROVER_FAKE_NVML_DEVICES", "NVIDIA A100|1|GPU-1", 1);
  ResourceOverrides o;
  o.num_gpus = 3;
  NodeResources r = DiscoverResources(o, paths_);
  EXPECT_EQ(r.gpu_names, std::vector<std::string>(3, "declared"));
  EXPECT_TRUE(Calls().empty());
}

}  // namespace
}  // namespace drover
