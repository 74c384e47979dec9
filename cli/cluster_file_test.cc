#include "cli/cluster_file.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace drover::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ClusterFileTest, ReadsWhatDroverUpWrites) {
  absl::StatusOr<ClusterRecord> r = ParseClusterRecord(
      R"({"address": "127.0.0.1:4000", "token_file": "/h/token", "dir": "/h/cluster",
          "scheduler_pid": 100, "redis_pid": 101, "agent_pids": [102, 103],
          "redis": "127.0.0.1:6379"})",
      "/h/cluster.json");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->address, "127.0.0.1:4000");
  EXPECT_EQ(r->token_file, "/h/token");
  EXPECT_EQ(r->scheduler_pid, 100);
  EXPECT_EQ(r->redis_pid, 101);
  EXPECT_THAT(r->agent_pids, ElementsAre(102, 103));
}

TEST(ClusterFileTest, ReadsTheCommandLinesThatBringDaemonsBack) {
  absl::StatusOr<ClusterRecord> r = ParseClusterRecord(
      R"({"dir": "/h/cluster", "redis": "127.0.0.1:6379",
          "redis_password_file": "/h/redis.password",
          "scheduler_argv": ["/b/drover-scheduler", "--port", "4000"],
          "redis_argv": ["redis-server", "/h/cluster/redis.conf"],
          "agent_argvs": [["/b/drover-agent", "--dir", "/h/cluster/agent-0"], []]})",
      "f");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->dir, "/h/cluster");
  EXPECT_EQ(r->redis_password_file, "/h/redis.password");
  EXPECT_THAT(r->scheduler_argv, ElementsAre("/b/drover-scheduler", "--port", "4000"));
  EXPECT_THAT(r->redis_argv, ElementsAre("redis-server", "/h/cluster/redis.conf"));
  ASSERT_EQ(r->agent_argvs.size(), 2u);
  EXPECT_THAT(r->agent_argvs[0], ElementsAre("/b/drover-agent", "--dir", "/h/cluster/agent-0"));
  EXPECT_TRUE(r->agent_argvs[1].empty());

  for (const char* bad : {R"({"scheduler_argv": "drover-scheduler"})",
                          R"({"redis_argv": ["redis-server", 3]})",
                          R"({"agent_argvs": [["a"], {"x": 1}]})",
                          R"({"agent_argvs": 7})"}) {
    absl::StatusOr<ClusterRecord> b = ParseClusterRecord(bad, "/h/cluster.json");
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_EQ(b.status().code(), absl::StatusCode::kDataLoss) << b.status();
    EXPECT_THAT(std::string(b.status().message()), HasSubstr("argv")) << b.status();
  }
}

TEST(ClusterFileTest, AbsentKeysStayEmpty) {
  absl::StatusOr<ClusterRecord> r = ParseClusterRecord(R"({"address": "h:1", "x": [1]})", "f");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->scheduler_pid, 0);
  EXPECT_TRUE(r->agent_pids.empty());
}

// Regression (found while fuzzing the cluster file): `drover up` and `drover down` read
// these keys with nlohmann's value()/get<int>(), which throw on a value of another
// type: the CLI died of an uncaught exception. A float pid was cast (undefined for
// a huge one), and a pid of 0 or below must never reach kill(2).
TEST(ClusterFileTest, FieldsOfTheWrongTypeOrRangeAreDataLossNamingThem) {
  struct Case {
    const char* text;
    const char* message;
  } cases[] = {
      {R"({"scheduler_pid": "12"})", "scheduler_pid is \"12\", not a process id"},
      {R"({"scheduler_pid": 1e300})", "scheduler_pid is 1e+300, not a process id"},
      {R"({"redis_pid": 12.5})", "redis_pid is 12.5, not a process id"},
      {R"({"scheduler_pid": -1})", "scheduler_pid is -1, not a process id"},
      {R"({"scheduler_pid": 0})", "scheduler_pid is 0, not a process id"},
      {R"({"redis_pid": 18446744073709551615})", "not a process id"},
      {R"({"agent_pids": 5})", "agent_pids is 5, not a list"},
      {R"({"agent_pids": [7, null]})", "an entry of agent_pids is null, not a process id"},
      {R"({"address": 5})", "address is 5, not a string"},
      {R"({"token_file": ["a"]})", "token_file is [\"a\"], not a string"},
      {R"([1, 2])", "not a JSON object"},
      {R"({"address": )", "not valid JSON"},
      {"", "not valid JSON"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ClusterRecord> r = ParseClusterRecord(c.text, "/h/cluster.json");
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << c.text;
    EXPECT_THAT(r.status().message(), HasSubstr("/h/cluster.json: ")) << c.text;
    EXPECT_THAT(r.status().message(), HasSubstr(c.message)) << c.text;
  }
}

TEST(ClusterFileTest, LongValuesAreCutInMessages) {
  absl::StatusOr<ClusterRecord> r =
      ParseClusterRecord(R"({"address": [)" + std::string(2000, '1') + "]}", "f");
  ASSERT_FALSE(r.ok());
  EXPECT_LT(r.status().message().size(), 200u);
}

}  // namespace
}  // namespace drover::cli
