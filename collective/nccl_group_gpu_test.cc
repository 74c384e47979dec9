// The NCCL backend on a real GPU (tagged "gpu"): a one-rank group meeting through a real
// scheduler's KV, every collective on device buffers checked after a copy back.
#include <fstream>

#include "absl/strings/str_cat.h"
#include "collective/nccl_group.h"
#include "gtest/gtest.h"
#include "tests/util/test_cluster.h"

namespace drover::collective {
namespace {

using drover::testing::TestCluster;
using drover::testing::TestClusterOptions;
using drover::testing::WaitFor;

TEST(NcclGroupGpuTest, OneRankGroupRunsEveryOperationOnDeviceBuffers) {
  TestClusterOptions o;
  o.nodes = 1;
  auto cluster = TestCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::string release = (*cluster)->dir() + "/release";
  JobSpec spec;
  spec.command.push_back("/bin/sh");
  spec.command.push_back("-c");
  spec.command.push_back(absl::StrCat("while [ ! -e ", release, " ]; do sleep 0.02; done"));
  spec.nproc = 1;
  auto job = (*cluster)->client().Submit(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(WaitFor([&] {
    auto j = (*cluster)->client().GetJob(job->job_id);
    return j.ok() && j->state == JobState::kRunning;
  }, absl::Seconds(20)));

  GroupOptions g;
  g.name = "gpu";
  g.job_id = job->job_id;
  g.scheduler_address = (*cluster)->address();
  g.token_file = (*cluster)->token_file();
  g.backend = Backend::kNccl;
  g.timeout = absl::Seconds(20);
  auto runtime = NewCudaRuntime();
  auto group = NewNcclGroup(g, runtime.get());
  ASSERT_TRUE(group.ok()) << group.status();
  const size_t n = 1 << 20;
  auto dev = runtime->Allocate(0, n * sizeof(float));
  ASSERT_TRUE(dev.ok()) << dev.status();
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 97);
  ASSERT_TRUE(runtime->CopyToDevice(0, *dev, host.data(), n * sizeof(float)).ok());
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
    ASSERT_TRUE((*group)->AllReduce(*dev, n, DataType::kFloat32, op).ok());
  }
  ASSERT_TRUE((*group)->Broadcast(*dev, n, DataType::kFloat32, 0).ok());
  ASSERT_TRUE((*group)->Barrier().ok());
  std::vector<float> back(n);
  ASSERT_TRUE(runtime->CopyToHost(0, back.data(), *dev, n * sizeof(float)).ok());
  EXPECT_EQ(back, host);  // one rank: every reduction is the identity
  ASSERT_TRUE(runtime->Free(0, *dev).ok());
  std::ofstream(release).put('x');
}

}  // namespace
}  // namespace drover::collective
