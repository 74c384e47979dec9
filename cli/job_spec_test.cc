#include "cli/job_spec.h"

#include <cmath>

#include "absl/strings/match.h"
#include "cli/table.h"
#include "gtest/gtest.h"

namespace drover::cli {
namespace {

TEST(ParseBytesTest, UnitsAndErrors) {
  EXPECT_EQ(*ParseBytes("1000"), 1000);
  EXPECT_EQ(*ParseBytes("512M"), 512LL << 20);
  EXPECT_EQ(*ParseBytes("4G"), 4LL << 30);
  EXPECT_EQ(*ParseBytes("1.5GiB"), 3LL << 29);
  EXPECT_EQ(*ParseBytes("2kb"), 2048);
  EXPECT_EQ(*ParseBytes(""), 0);
  auto bad = ParseBytes("lots");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'lots'"), std::string::npos);
  EXPECT_FALSE(ParseBytes("-1G").ok());
}

TEST(BuildSpecTest, NodesTimesProcsPerNode) {
  JobFlags f;
  f.nodes = 2;
  f.nproc_per_node = 4;
  auto spec = BuildSpec(f, {"python3", "train.py"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->nproc, 8);
  EXPECT_EQ(spec->nproc_per_node, 4);
  EXPECT_EQ(spec->command.size(), 2u);
  EXPECT_FALSE(spec->cwd.empty());
  f.nproc = 6;
  EXPECT_FALSE(BuildSpec(f, {"x"}).ok());  // 6 != 2 x 4
}

TEST(BuildSpecTest, NodesAloneSplitsNprocEvenly) {
  JobFlags f;
  f.nodes = 2;
  f.nproc = 6;
  auto spec = BuildSpec(f, {"x"});
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->nproc_per_node, 3);
  f.nproc = 5;
  EXPECT_FALSE(BuildSpec(f, {"x"}).ok());
  JobFlags one;
  EXPECT_EQ(BuildSpec(one, {"x"})->nproc, 1);
  JobFlags per_node;
  per_node.nproc_per_node = 3;
  EXPECT_EQ(BuildSpec(per_node, {"x"})->nproc, 3);
}

TEST(BuildSpecTest, RejectsZeroProcessesMissingCommandAndBadPairs) {
  JobFlags f;
  f.nproc = 0;
  auto zero = BuildSpec(f, {"x"});
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("at least 1"), std::string::npos);
  EXPECT_FALSE(BuildSpec(JobFlags{}, {}).ok());
  JobFlags env;
  env.env = {"NOEQUALS"};
  EXPECT_FALSE(BuildSpec(env, {"x"}).ok());
  JobFlags res;
  res.resources = {"ssd=abc"};
  EXPECT_FALSE(BuildSpec(res, {"x"}).ok());
  res.resources = {"ssd=2"};
  auto ok = BuildSpec(res, {"x"});
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->per_process.custom.at("ssd"), 2);
}

TEST(BuildSpecTest, TimeLimitIsADurationAndBadOnesSayHowToWriteIt) {
  JobFlags f;
  f.time_limit = "1h30m";
  auto ok = BuildSpec(f, {"x"});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->time_limit, absl::Minutes(90));
  EXPECT_EQ(BuildSpec(JobFlags{}, {"x"})->time_limit, absl::ZeroDuration());  // none by default
  for (const char* bad : {"soon", "-5s", "0s", "90"}) {
    f.time_limit = bad;
    auto r = BuildSpec(f, {"x"});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("e.g. 90s"), std::string::npos) << r.status();
  }
}

// Issue 13: `drover run --nproc -1` and `--nodes 0` were accepted (-1 and 0 meant "not
// given") and ran one process. Every number out of its range is refused, naming the flag.
TEST(BuildSpecTest, RefusesOutOfRangeNumbers) {
  struct Case {
    const char* what;
    void (*set)(JobFlags*);
    const char* message;
  };
  const Case cases[] = {
      {"nproc -1", [](JobFlags* f) { f->nproc = -1; }, "--nproc -1: a job needs at least 1"},
      {"nodes 0", [](JobFlags* f) { f->nodes = 0; }, "--nodes 0: a job runs on at least 1 node"},
      {"nodes -2", [](JobFlags* f) { f->nodes = -2; }, "--nodes -2"},
      {"nproc-per-node 0", [](JobFlags* f) { f->nproc_per_node = 0; }, "--nproc-per-node 0"},
      {"cpus -1", [](JobFlags* f) { f->cpus_per_proc = -1; }, "--cpus-per-proc -1"},
      {"cpus nan", [](JobFlags* f) { f->cpus_per_proc = std::nan(""); }, "--cpus-per-proc"},
      {"gpus -1", [](JobFlags* f) { f->gpus_per_proc = -1; }, "--gpus-per-proc -1"},
      {"restarts -1", [](JobFlags* f) { f->max_restarts = -1; }, "--max-restarts -1"},
      {"resource -1", [](JobFlags* f) { f->resources = {"ssd=-1"}; }, "--resource -1"},
      {"memory -1G", [](JobFlags* f) { f->memory_per_proc = "-1G"; }, "'-1G'"},
      {"memory nan", [](JobFlags* f) { f->memory_per_proc = "nan"; }, "'nan'"},
      {"memory 1e30G", [](JobFlags* f) { f->memory_per_proc = "1e30G"; }, "'1e30G'"},
      {"strategy", [](JobFlags* f) { f->strategy = "random"; }, "--strategy random"},
      {"time limit 0s", [](JobFlags* f) { f->time_limit = "0s"; }, "--time-limit '0s'"},
      {"time limit -1m", [](JobFlags* f) { f->time_limit = "-1m"; }, "--time-limit '-1m'"},
      {"time limit inf", [](JobFlags* f) { f->time_limit = "inf"; }, "--time-limit 'inf'"},
      // Found by //fuzz:cli_flags: went to the scheduler, which refused it.
      {"nproc 3 nproc-per-node 2",
       [](JobFlags* f) {
         f->nproc = 3;
         f->nproc_per_node = 2;
       },
       "--nproc 3 is not a multiple of --nproc-per-node 2"},
      {"nodes x ppn overflow",
       [](JobFlags* f) {
         f->nodes = 1 << 20;
         f->nproc_per_node = 1 << 20;
       },
       "too many processes"},
  };
  for (const Case& c : cases) {
    JobFlags f;
    c.set(&f);
    absl::StatusOr<JobSpec> spec = BuildSpec(f, {"/bin/true"});
    ASSERT_FALSE(spec.ok()) << c.what << " was accepted";
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_NE(spec.status().message().find(c.message), std::string::npos)
        << c.what << ": " << spec.status();
  }
  // The smallest values of each range are fine.
  JobFlags f;
  f.nproc = 1;
  f.nodes = 1;
  f.cpus_per_proc = 0;
  f.gpus_per_proc = 0;
  f.max_restarts = 0;
  f.resources = {"ssd=0"};
  EXPECT_TRUE(BuildSpec(f, {"/bin/true"}).ok());
}

TEST(BuildSpecTest, RequestIdBecomesTheIdempotencyKeyAndBadOnesAreNamed) {
  JobFlags f;
  f.request_id = "nightly-42";
  auto spec = BuildSpec(f, {"x"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->idempotency_key, "nightly-42");
  for (const std::string bad : {std::string("a b"), std::string(129, 'x'), std::string("\x01")}) {
    f.request_id = bad;
    auto refused = BuildSpec(f, {"x"});
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(absl::StrContains(refused.status().message(), "--request-id")) << refused.status();
  }
}

TEST(TableTest, AlignsColumnsAndCutsLongCells) {
  Table t({"A", "LONGER"});
  t.AddRow({"x", "1"});
  t.AddRow({"yyyy", std::string(100, 'z')});
  std::ostringstream out;
  t.Print(out, 10);
  EXPECT_EQ(out.str(), "A     LONGER\nx     1\nyyyy  zzzzzzz...\n");
  EXPECT_EQ(HumanDuration(59000), "59s");
  EXPECT_EQ(HumanDuration(192000), "3m12s");
  EXPECT_EQ(HumanBytes(3.0 * (1 << 30)), "3.0 GiB");
}

}  // namespace
TEST(TableTest, GpuModelsCountsEachModelAndSkipsDeclaredGpus) {
  EXPECT_EQ(GpuModels({}), "");
  EXPECT_EQ(GpuModels({"declared", "declared"}), "");
  EXPECT_EQ(GpuModels({"NVIDIA A100", "NVIDIA A100"}), "2x NVIDIA A100");
  EXPECT_EQ(GpuModels({"NVIDIA T4", "NVIDIA L4", "NVIDIA L4"}), "NVIDIA T4, 2x NVIDIA L4");
}

}  // namespace drover::cli
