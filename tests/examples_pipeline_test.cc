// The pipeline examples on a real 2-node cluster: examples/queue_pipeline (producers
// and consumers on different nodes, memory bounded by the queue), examples/hogwild
// (workers train one model in place to a stated loss) and examples/preprocess_to_ddp
// (DataLoader tasks on both nodes feed a 2-node C++ DDP job that ends with the loss of
// the same batches made in one process) and its PyTorch variant, examples/
// preprocess_to_ddp.py (the same C++ tasks feed a 2-node torch DDP job, gloo on CPU,
// through the Python module; its loss equals that of one process on the same batches).
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/files.h"
#include "gtest/gtest.h"
#include "tests/util/driver_program.h"
#include "tests/util/test_cluster.h"

namespace drover::testing {
namespace {

// The value of the line `key=...` in `out` ("" if there is none).
std::string Value(const std::string& out, const std::string& key) {
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    if (absl::ConsumePrefix(&line, key + "=")) return std::string(line);
  }
  return "";
}

double Number(const std::string& s) {
  double v = -1;
  return absl::SimpleAtod(s, &v) ? v : -1;
}

class ExamplesPipelineTest : public TwoNodeClusterTest {
 protected:
  int RunExample(std::vector<std::string> cmd, std::string* out, std::string* err) {
    cmd[0] = Runfile(cmd[0]);
    return RunProgram(cmd, {"DROVER_ADDRESS=" + cluster_->address(), "DROVER_TOKEN_FILE=" + cluster_->token_file()},
                      cluster_->dir(), out, err);
  }
};

TEST_F(ExamplesPipelineTest, QueuePipelineStreamsThroughBoundedMemory) {
  std::string out, err;
  ASSERT_EQ(RunExample({"examples/queue_pipeline", "--frames", "48", "--frame-kib", "1024", "--capacity", "4"}, &out, &err), 0)
      << out << err;
  EXPECT_EQ(Value(out, "frames"), "96") << out;
  EXPECT_EQ(Value(out, "checksum"), "match") << out;
  EXPECT_EQ(Value(out, "bounded"), "yes") << out;
  // Both nodes consumed, and the store never held more than a fraction of the stream.
  EXPECT_TRUE(absl::StrContains(out, "consumer " + cluster_->agent_node_id(0))) << out;
  EXPECT_TRUE(absl::StrContains(out, "consumer " + cluster_->agent_node_id(1))) << out;
  EXPECT_LT(Number(Value(out, "store_peak_bytes")), Number(Value(out, "streamed_bytes")) / 4) << out;
}

TEST_F(ExamplesPipelineTest, HogwildReachesItsTargetLoss) {
  std::string out, err;
  ASSERT_EQ(RunExample({"examples/hogwild", "--workers", "4", "--steps", "1500", "--target", "0.02"}, &out, &err), 0)
      << out << err;
  EXPECT_EQ(Value(out, "reached"), "yes") << out;
  EXPECT_LE(Number(Value(out, "final_loss")), 0.02) << out;
  EXPECT_LT(Number(Value(out, "final_loss")), Number(Value(out, "initial_loss")) / 10) << out;
  EXPECT_EQ(Value(out, "worker_processes"), "4") << out;
  EXPECT_EQ(Value(out, "updates"), "6000") << out;  // every worker's steps landed
}

TEST_F(ExamplesPipelineTest, PreprocessToDdpEndsWithTheOneProcessLoss) {
  std::string local, err;
  ASSERT_EQ(RunExample({"examples/preprocess_to_ddp", "--steps", "40", "--local", "--ranks", "2"}, &local, &err), 0)
      << local << err;
  const std::string result = cluster_->dir() + "/ddp-result.txt";
  std::string out;
  const int code = cluster_->RunCli({"run", "--nodes", "2", "--nproc-per-node", "1", "--",
                                     Runfile("examples/preprocess_to_ddp"), "--steps", "40", "--result-file", result},
                                    &out, &err);
  ASSERT_EQ(code, 0) << out << err;
  const std::string got = ReadFile(result).value_or("");
  EXPECT_EQ(Value(got, "ranks"), "2") << got;
  EXPECT_FALSE(Value(local, "final_loss").empty()) << local;
  EXPECT_EQ(Value(got, "final_loss"), Value(local, "final_loss")) << got << local;
  EXPECT_EQ(Value(got, "final_weights_checksum"), Value(local, "final_weights_checksum")) << got << local;
  // Each rank read its batches from a store (in place, or pulled once to its node).
  EXPECT_TRUE(absl::StrContains(out, "[rank0]: rank 0: 40 batches, 40 read in place")) << out;
  EXPECT_TRUE(absl::StrContains(out, "[rank1]: rank 1: 40 batches, 40 read in place")) << out;
}

TEST_F(ExamplesPipelineTest, PreprocessToDdpInPyTorchEndsWithTheOneProcessLoss) {
  const std::string module = Runfile("python/drover.so");
  const std::string pythonpath = "PYTHONPATH=" + module.substr(0, module.rfind('/'));
  const std::vector<std::string> script = {"/usr/bin/python3", Runfile("examples/preprocess_to_ddp.py"),
                                           "--worker-program", Runfile("examples/preprocess_to_ddp"),
                                           "--steps", "30"};
  std::vector<std::string> local_cmd = script;
  local_cmd.insert(local_cmd.end(), {"--local", "--ranks", "2"});
  std::string local, err;
  ASSERT_EQ(RunProgram(local_cmd,
                       {"DROVER_ADDRESS=" + cluster_->address(), "DROVER_TOKEN_FILE=" + cluster_->token_file(),
                        pythonpath},
                       cluster_->dir(), &local, &err),
            0)
      << local << err;
  const std::string result = cluster_->dir() + "/torch-ddp-result.txt";
  std::vector<std::string> run = {"run", "--nodes", "2", "--nproc-per-node", "1", "--env", pythonpath, "--"};
  run.insert(run.end(), script.begin(), script.end());
  run.insert(run.end(), {"--result-file", result});
  std::string out;
  ASSERT_EQ(cluster_->RunCli(run, &out, &err), 0) << out << err;
  const std::string got = ReadFile(result).value_or("");
  EXPECT_EQ(Value(got, "ranks"), "2") << got;
  EXPECT_FALSE(Value(local, "final_loss").empty()) << local;
  EXPECT_EQ(Value(got, "final_loss"), Value(local, "final_loss")) << got << local;
  EXPECT_EQ(Value(got, "final_weights_checksum"), Value(local, "final_weights_checksum")) << got << local;
  // Each rank's batches were views of a store (in place, or pulled once to its node).
  EXPECT_TRUE(absl::StrContains(out, "[rank0]: rank 0: 30 batches, 30 read in place")) << out;
  EXPECT_TRUE(absl::StrContains(out, "[rank1]: rank 1: 30 batches, 30 read in place")) << out;
}

}  // namespace
}  // namespace drover::testing
