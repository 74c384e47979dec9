// GPU paths without a GPU: a real cluster whose agents discover GPUs through the
// stand-in NVML (//node_agent:libfake_nvml.so, loaded by the agents' own dlopen path via
// DROVER_NVML_LIBRARY). Checks discovery end to end (the scheduler's node table and
// `drover status`), and GPU pinning: ranks asking for GPUs get distinct
// CUDA_VISIBLE_DEVICES on each node, matching their placement.
#include <stdlib.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_cluster.h"

namespace drover::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kModel[] = "NVIDIA A100-SXM4-80GB";

class FakeGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The agents inherit this environment: two GPUs each.
    setenv("DROVER_NVML_LIBRARY", Runfile("node_agent/libfake_nvml.so").c_str(), 1);
    setenv("DROVER_FAKE_NVML_DEVICES",
           absl::StrCat(kModel, "|85899345920|GPU-0a0a0a0a-0000-0000-0000-000000000000;", kModel,
                        "|85899345920|GPU-1b1b1b1b-1111-1111-1111-111111111111")
               .c_str(),
           1);
    TestClusterOptions o;
    o.nodes = 2;
    o.gpus_per_node = -1;  // discover
    o.object_store = false;
    auto c = TestCluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = *std::move(c);
  }

  std::unique_ptr<TestCluster> cluster_;
};

TEST_F(FakeGpuTest, AgentsReportTheGpusNvmlNamesAndStatusShowsThem) {
  absl::StatusOr<ClusterStatus> s = cluster_->client().Status();
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->nodes.size(), 2u);
  for (const NodeInfo& n : s->nodes) {
    EXPECT_EQ(n.total.gpus, 2) << n.node_id;
    EXPECT_EQ(n.gpu_names, (std::vector<std::string>{kModel, kModel})) << n.node_id;
  }
  std::string out, err;
  ASSERT_EQ(cluster_->RunCli({"status"}, &out, &err), 0) << err;
  EXPECT_THAT(out, HasSubstr(absl::StrCat("2/2 2x ", kModel))) << out;
  // The agent's log names each GPU with its memory and UUID.
  EXPECT_THAT(cluster_->DaemonLogs(),
              HasSubstr("GPU 1: NVIDIA A100-SXM4-80GB, 81920 MiB, GPU-1b1b1b1b"));
}

TEST_F(FakeGpuTest, RanksAskingForGpusArePinnedToDistinctDiscoveredGpus) {
  const std::string dir = cluster_->dir();
  JobSpec spec = TestCluster::JobOf(
      {"/bin/sh", "-c",
       absl::StrCat("echo \"$DROVER_NODE_ID $CUDA_VISIBLE_DEVICES\" > ", dir, "/gpu-$RANK")},
      4, 2);
  spec.per_process.gpus = 1;
  absl::StatusOr<JobInfo> job = cluster_->RunJob(spec, absl::Seconds(60));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->state, JobState::kSucceeded) << job->reason;
  std::set<std::string> node_gpu;
  for (int r = 0; r < 4; ++r) {
    absl::StatusOr<std::string> line = ReadFile(absl::StrCat(dir, "/gpu-", r));
    ASSERT_TRUE(line.ok()) << line.status();
    std::vector<std::string> f = absl::StrSplit(absl::StripTrailingAsciiWhitespace(*line), ' ');
    ASSERT_EQ(f.size(), 2u) << *line;
    EXPECT_EQ(f[0], job->placement[r].node_id);
    ASSERT_EQ(job->placement[r].gpu_ids.size(), 1u);
    EXPECT_EQ(f[1], absl::StrCat(job->placement[r].gpu_ids[0]));
    EXPECT_TRUE(f[1] == "0" || f[1] == "1") << f[1];
    node_gpu.insert(*line);
  }
  EXPECT_EQ(node_gpu.size(), 4u) << "two ranks share a GPU";

  // Three GPUs per process never fit on a node that found two.
  spec.nproc = 1;
  spec.nproc_per_node = 0;
  spec.per_process.gpus = 3;
  absl::StatusOr<JobInfo> too_big = cluster_->client().Submit(spec);
  ASSERT_FALSE(too_big.ok());
  EXPECT_THAT(too_big.status().message(), HasSubstr("GPU")) << too_big.status();
}

}  // namespace
}  // namespace drover::testing
