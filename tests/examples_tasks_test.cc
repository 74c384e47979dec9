// The task examples on a real 2-node cluster with a declared GPU per node:
// examples/tasks_quickstart as a plain program and as a process of `drover run`, and
// examples/ensemble_inference (one actor per GPU) checked against one local model.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/util/driver_program.h"
#include "tests/util/test_cluster.h"

namespace drover::testing {
namespace {

class ExamplesTasksTest : public TwoNodeClusterTest {
 protected:
  static void SetUpTestSuite() {
    TestClusterOptions o = TwoNodes();
    o.gpus_per_node = 1;
    StartCluster(o);
  }
  // Runs an example as a plain program against this cluster.
  int RunExample(const std::vector<std::string>& args, std::string* out, std::string* err) {
    std::vector<std::string> cmd = args;
    cmd[0] = Runfile(cmd[0]);
    return RunProgram(cmd, {"DROVER_ADDRESS=" + cluster_->address(),
                            "DROVER_TOKEN_FILE=" + cluster_->token_file()},
                      cluster_->dir(), out, err);
  }
};

TEST_F(ExamplesTasksTest, QuickstartRunsAsAPlainProgram) {
  std::string out, err;
  ASSERT_EQ(RunExample({"examples/tasks_quickstart"}, &out, &err), 0) << out << err;
  EXPECT_TRUE(absl::StrContains(out, "normalized float32[3, 32, 32], first pixel 0.5")) << out;
  EXPECT_TRUE(absl::StrContains(out, "sum of sums 360")) << out;
  // The actor asked for a GPU and was pinned to one.
  EXPECT_TRUE(absl::StrContains(out, "model on cuda:0 weights=w.bin")) << out;
}

TEST_F(ExamplesTasksTest, QuickstartRunsAsAJobProcess) {
  std::string out, err;
  const int code = cluster_->RunCli({"run", "--", Runfile("examples/tasks_quickstart")}, &out, &err);
  ASSERT_EQ(code, 0) << out << err;
  EXPECT_TRUE(absl::StrContains(out, "sum of sums 360")) << out;
}

TEST_F(ExamplesTasksTest, EnsembleUsesOneModelPerGpu) {
  std::string out, err;
  ASSERT_EQ(RunExample({"examples/ensemble_inference", "--batches", "24", "--verify"}, &out, &err), 0)
      << out << err;
  EXPECT_TRUE(absl::StrContains(out, "models=2 predictions=6144")) << out;
  EXPECT_TRUE(absl::StrContains(out, "verified")) << out;
  EXPECT_TRUE(absl::StrContains(out, cluster_->agent_node_id(0) + " gpu 0")) << out;
  EXPECT_TRUE(absl::StrContains(out, cluster_->agent_node_id(1) + " gpu 0")) << out;
}

}  // namespace
}  // namespace drover::testing
