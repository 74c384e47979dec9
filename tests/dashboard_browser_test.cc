// The dashboard in a real browser: starts a 2-node cluster with a running job and a
// job that failed on one rank, prints a one-time login link with `drover dashboard`,
// and runs tests/dashboard/browser_test.js (Debian's headless Chromium driven by
// playwright-core from npm, installed into tests/dashboard/node_modules by
// scripts/setup.sh), which checks the pages (see that file). Screenshots go to the
// test's undeclared outputs (bazel-testlogs/tests/dashboard_browser_test/test.outputs).
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/util/test_cluster.h"

namespace drover::testing {
namespace {

TEST(DashboardBrowserTest, PagesShowTheNodesJobsRootCauseAndLiveUpdates) {
  ASSERT_EQ(::access("/usr/bin/chromium", X_OK), 0)
      << "Debian's chromium is missing: run scripts/setup.sh";
  ASSERT_EQ(::access("/usr/bin/node", X_OK), 0) << "node is missing: run scripts/setup.sh";
  auto c = TestCluster::Start(TestClusterOptions{});
  ASSERT_TRUE(c.ok()) << c.status();
  TestCluster& cluster = **c;

  // A job that fails on rank 1 (with a stderr line), and one that runs until told.
  JobSpec failing = TestCluster::JobOf(
      {"sh", "-c",
       "echo hello from rank $RANK; [ \"$RANK\" = 1 ] && { echo disk on fire >&2; exit 3; }; exit 0"},
      2, 1);
  auto failed = cluster.RunJob(failing, absl::Seconds(60));
  ASSERT_TRUE(failed.ok()) << failed.status();
  ASSERT_EQ(failed->state, JobState::kFailed) << failed->reason;
  const std::string go = absl::StrCat(cluster.dir(), "/go-browser");
  auto running = cluster.client().Submit(TestCluster::JobOf(
      {"sh", "-c",
       absl::StrCat("echo started-$RANK; while [ ! -e ", go, " ]; do sleep 0.05; done; echo done-$RANK")},
      2, 1));
  ASSERT_TRUE(running.ok()) << running.status();

  auto status = cluster.client().Status();
  ASSERT_TRUE(status.ok()) << status.status();
  std::vector<std::string> nodes;
  for (const auto& n : status->nodes) nodes.push_back(n.node_id);
  std::string login, err;
  ASSERT_EQ(cluster.RunCli({"dashboard"}, &login, &err), 0) << err;
  login = std::string(absl::StripAsciiWhitespace(login));

  const char* outputs = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  // Chromium's singleton socket lives in TMPDIR: Bazel's is too long for a socket path.
  char tmpl[] = "/tmp/drover-browser-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string scratch = tmpl;
  std::string out;
  const int rc = RunProgram(
      {"/usr/bin/node", Runfile("tests/dashboard/browser_test.js")},
      {absl::StrCat("DASHBOARD_BASE=http://", status->metrics_address),
       "DASHBOARD_LOGIN=" + login, "NODES=" + absl::StrJoin(nodes, ","),
       "RUNNING_JOB=" + running->job_id, "FAILED_JOB=" + failed->job_id, "GO_FILE=" + go,
       absl::StrCat("SCREENSHOT_DIR=", outputs != nullptr ? outputs : scratch),
       "HOME=" + scratch, "TMPDIR=" + scratch},
      scratch, &out, &err);
  std::cout << out << err;
  std::filesystem::remove_all(scratch);
  ASSERT_EQ(rc, 0) << out << err << cluster.DaemonLogs();
  auto done = cluster.client().WaitJob(running->job_id, absl::Seconds(30));
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->state, JobState::kSucceeded);
}

}  // namespace
}  // namespace drover::testing
