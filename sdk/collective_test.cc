// The collective facade's own parts: options from the environment drover gives a
// process (through the implementation's reader, copied field for field), the dtypes
// reductions take, and op names. The operations themselves run across real processes
// in sdk/tensor_collectives_test and tests/ddp_cpp_test.
#include "drover/collective.h"

#include <cstdlib>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace drover {
namespace {

TEST(CollectiveOptionsTest, FromEnvironmentReadsWhatDroverSets) {
  const std::pair<const char*, const char*> env[] = {
      {"RANK", "3"},
      {"WORLD_SIZE", "4"},
      {"DROVER_JOB_ID", "job-9"},
      {"DROVER_GENERATION", "2"},
      {"DROVER_SCHEDULER_ADDRESS", "10.0.0.1:6390"},
      {"DROVER_TOKEN_FILE", "/tmp/token"},
      {"DROVER_NODE_ID", "node-2"},
      {"GLOO_SOCKET_IFNAME", "eth7"},
      {"DROVER_COLLECTIVE_ALGORITHM", "shm"},
      {"LOCAL_RANK", "1"},
  };
  for (const auto& [k, v] : env) ::setenv(k, v, 1);
  absl::StatusOr<CollectiveOptions> o = CollectiveOptions::FromEnvironment("grads");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->name, "grads");
  EXPECT_EQ(o->rank, 3);
  EXPECT_EQ(o->size, 4);
  EXPECT_EQ(o->job_id, "job-9");
  EXPECT_EQ(o->generation, 2);
  EXPECT_EQ(o->scheduler_address, "10.0.0.1:6390");
  EXPECT_EQ(o->token_file, "/tmp/token");
  EXPECT_EQ(o->node_id, "node-2");
  EXPECT_EQ(o->interface, "eth7");
  EXPECT_EQ(o->algorithm, CollectiveOptions::Algorithm::kShm);
  EXPECT_EQ(o->backend, CollectiveOptions::Backend::kGloo);
  EXPECT_EQ(o->device, 1);
  EXPECT_TRUE(o->watch_generation);

  ::unsetenv("WORLD_SIZE");
  absl::StatusOr<CollectiveOptions> missing = CollectiveOptions::FromEnvironment();
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "WORLD_SIZE")) << missing.status();
  for (const auto& [k, v] : env) ::unsetenv(k);
}

TEST(CollectiveTest, ReductionsTakeTheDTypesTheGroupsComputeOn) {
  for (DType d : {DType::kFloat16, DType::kFloat32, DType::kFloat64, DType::kInt32,
                  DType::kInt64, DType::kUInt8}) {
    EXPECT_TRUE(CheckReduceDType(d).ok()) << DTypeName(d);
  }
  for (DType d : {DType::kBFloat16, DType::kInt8, DType::kInt16, DType::kBool}) {
    absl::Status s = CheckReduceDType(d);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << DTypeName(d);
    EXPECT_TRUE(absl::StrContains(s.message(), "dtype " + DTypeName(d) + " is not supported"))
        << s;
  }
  EXPECT_STREQ(ReduceOpName(ReduceOp::kAvg), "avg");
  EXPECT_STREQ(ReduceOpName(ReduceOp::kMin), "min");
}

}  // namespace
}  // namespace drover
