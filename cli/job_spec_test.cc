#include "cli/job_spec.h"

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
  EXPECT_EQ(spec->nproc(), 8);
  EXPECT_EQ(spec->nproc_per_node(), 4);
  EXPECT_EQ(spec->command_size(), 2);
  EXPECT_FALSE(spec->cwd().empty());
  f.nproc = 6;
  EXPECT_FALSE(BuildSpec(f, {"x"}).ok());  // 6 != 2 x 4
}

TEST(BuildSpecTest, NodesAloneSplitsNprocEvenly) {
  JobFlags f;
  f.nodes = 2;
  f.nproc = 6;
  auto spec = BuildSpec(f, {"x"});
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->nproc_per_node(), 3);
  f.nproc = 5;
  EXPECT_FALSE(BuildSpec(f, {"x"}).ok());
  JobFlags one;
  EXPECT_EQ(BuildSpec(one, {"x"})->nproc(), 1);
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
  EXPECT_EQ(ok->per_process().custom().at("ssd"), 2);
}

TEST(BuildSpecTest, TimeLimitIsADurationAndBadOnesSayHowToWriteIt) {
  JobFlags f;
  f.time_limit = "1h30m";
  auto ok = BuildSpec(f, {"x"});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->time_limit_ms(), 90 * 60 * 1000);
  EXPECT_EQ(BuildSpec(JobFlags{}, {"x"})->time_limit_ms(), 0);  // none by default
  for (const char* bad : {"soon", "-5s", "0s", "90"}) {
    f.time_limit = bad;
    auto r = BuildSpec(f, {"x"});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("e.g. 90s"), std::string::npos) << r.status();
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
}  // namespace drover::cli
