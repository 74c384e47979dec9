// drover/tensor_collectives.h across real processes: tensor_collectives_worker runs as a
// drover job on a TestCluster (real scheduler, agents and their object stores) and
// checks every operation and dtype on object-store tensors against a local reference,
// reads other ranks' results by id, and checks the documented errors (leaving no object
// behind). Layouts: one node x 2 ranks (shared memory) and 2 nodes x 2 ranks
// (hierarchical; the agents are two nodes even on one machine).
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "gtest/gtest.h"
#include "tests/util/test_cluster.h"

namespace drover {
namespace {

using drover::testing::Runfile;
using drover::testing::TestCluster;
using drover::testing::TestClusterOptions;

// The file's contents; empty if it is missing (a rank that never reported).
std::string ReadAll(const std::string& path) { return ReadFile(path).value_or(""); }

class TensorCollectivesTest : public ::testing::Test {
 protected:
  // Runs `nproc` workers, `ppn` per node, on a cluster of `nodes`; returns the job and
  // checks that every rank reported success.
  JobInfo Run(int nodes, int nproc, int ppn) {
    TestClusterOptions o;
    o.nodes = nodes;
    auto c = TestCluster::Start(o);
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return {};
    cluster_ = std::move(*c);
    const std::string out = absl::StrCat(cluster_->dir(), "/reports");
    EXPECT_TRUE(MakeDirs(out).ok());
    auto done = cluster_->RunJob(
        TestCluster::JobOf({Runfile("sdk/tensor_collectives_worker"), "--out=" + out}, nproc,
                           ppn),
        absl::Seconds(180));
    EXPECT_TRUE(done.ok()) << done.status();
    std::string reports;
    for (int r = 0; r < nproc; ++r) {
      std::string report = ReadAll(absl::StrCat(out, "/rank", r, ".txt"));
      reports += absl::StrCat("--- rank ", r, "\n", report);
      EXPECT_TRUE(absl::StrContains(report, "all checks passed")) << "rank " << r << ":\n"
                                                                 << report;
    }
    std::printf("%s", reports.c_str());
    if (!done.ok()) return {};
    EXPECT_EQ(done->state, JobState::kSucceeded) << done->reason << "\n" << reports << "\n"
                                                 << cluster_->DaemonLogs();
    return *done;
  }

  std::unique_ptr<TestCluster> cluster_;
};

TEST_F(TensorCollectivesTest, OneNodeTwoRanks) {
  auto job = Run(1, 2, 0);
  ASSERT_EQ(job.placement.size(), 2u);
  EXPECT_EQ(job.placement[0].node_id, job.placement[1].node_id);
}

TEST_F(TensorCollectivesTest, TwoNodesTimesTwoRanks) {
  auto job = Run(2, 4, 2);
  ASSERT_EQ(job.placement.size(), 4u);
  std::set<std::string> nodes;
  for (const auto& p : job.placement) nodes.insert(p.node_id);
  EXPECT_EQ(nodes.size(), 2u);
  EXPECT_EQ(job.placement[0].node_id, job.placement[1].node_id);
  EXPECT_NE(job.placement[0].node_id, job.placement[2].node_id);
}

}  // namespace
}  // namespace drover
