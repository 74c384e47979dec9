#include "node_agent/resources.h"

#include <sys/stat.h>

#include <cstdlib>
#include <string>

#include "common/files.h"
#include "gtest/gtest.h"

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

}  // namespace
}  // namespace drover
