// Object store clients that survive a store restart (issue 19, item 2), with real
// processes: a one-node cluster whose agent hosts drover-object-store, and a driver
// (tests/store_restart_program) that keeps a Put and a task's result in the store and
// then puts and gets in a loop. The test SIGKILLs the store; the agent restarts it on
// the same socket. The driver must connect again by itself within 1 s of the store
// answering, without a storm of errors meanwhile; the Put made before the kill must
// fail its Get with NOT_FOUND naming the restart; the task's result must be made
// again by its task; `drover status` must show the restart.
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/auth.h"
#include "common/files.h"
#include "common/rpc.h"
#include "gtest/gtest.h"
#include "object_store/client.h"
#include "proto/lease.grpc.pb.h"
#include "tests/util/driver_program.h"
#include "tests/util/test_cluster.h"

namespace drover::testing {
namespace {

// Live drover-object-store processes whose parent is `parent` (from /proc).
std::vector<pid_t> StoresOf(pid_t parent) {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    const pid_t pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    absl::StatusOr<std::string> stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
    if (!stat.ok()) continue;
    const size_t open = stat->find('('), close = stat->rfind(')');
    if (open == std::string::npos || close == std::string::npos || close + 4 > stat->size()) continue;
    const std::string comm = stat->substr(open + 1, close - open - 1);
    const char state = (*stat)[close + 2];
    const pid_t ppid = std::atoi(stat->c_str() + close + 4);
    // comm is cut at 15 characters.
    if (ppid == parent && state != 'Z' && absl::StartsWith(comm, "drover-object")) {
      out.push_back(pid);
    }
  }
  closedir(d);
  return out;
}

// The node's store socket, as its agent describes it.
std::string StoreSocket(TestCluster& cluster) {
  absl::StatusOr<ClusterStatus> st = cluster.client().Status();
  if (!st.ok() || st->nodes.empty()) return "";
  absl::StatusOr<std::string> token = ReadTokenFile(cluster.token_file());
  if (!token.ok()) return "";
  auto workers = proto::Workers::NewStub(MakeChannel(st->nodes[0].agent_address));
  grpc::ClientContext ctx;
  PrepareContext(&ctx, *token);
  proto::DescribeNodeReply d;
  if (!workers->DescribeNode(&ctx, proto::DescribeNodeRequest(), &d).ok()) return "";
  return d.store_socket();
}

TEST(StoreRestartTest, DriverReconnectsLostObjectsNamedTaskResultRebuilt) {
  TestClusterOptions o;
  o.nodes = 1;
  o.cpus_per_node = 4;
  auto c = TestCluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  TestCluster& cluster = **c;
  const std::string socket = StoreSocket(cluster);
  ASSERT_FALSE(socket.empty()) << cluster.DaemonLogs();
  const std::string go = absl::StrCat(cluster.dir(), "/store-restart.go");
  BackgroundDriver driver(cluster, "tests/store_restart_program", {go});
  ASSERT_EQ(driver.WaitFor("ready", absl::Seconds(90)), "1") << driver.Output().All()
                                                              << cluster.DaemonLogs();

  const std::vector<pid_t> before = StoresOf(cluster.agent_pid(0));
  ASSERT_EQ(before.size(), 1u);
  ASSERT_EQ(::kill(before[0], SIGKILL), 0);
  // Gone (a zombie until the agent reaps it) before `go`: every round started after
  // `go` runs against the restarted store.
  ASSERT_TRUE(WaitFor([&] { return StoresOf(cluster.agent_pid(0)) != before; }, absl::Seconds(10)));
  ASSERT_TRUE(WriteFileAtomic(go, "go").ok());
  // When the restarted store answers on the same socket.
  ASSERT_TRUE(WaitFor([&] { return object_store::Client::Connect(socket).ok(); },
                      absl::Seconds(30)))
      << cluster.DaemonLogs();
  const int64_t back_ms = absl::ToUnixMillis(absl::Now());

  DriverRun run = driver.Finish(absl::Seconds(240));
  ASSERT_EQ(run.code, 0) << run.All() << cluster.DaemonLogs();
  EXPECT_EQ(run.Get("rounds_after_kill"), "20") << run.All();
  int64_t recovered_ms = 0;
  ASSERT_TRUE(absl::SimpleAtoi(run.Get("recovered_ms"), &recovered_ms)) << run.All();
  EXPECT_LE(recovered_ms - back_ms, 1000)
      << "the driver's first put and get on the restarted store came "
      << recovered_ms - back_ms << " ms after the store answered\n" << run.All();
  std::cout << "store restart: first put+get on the restarted store " << recovered_ms - back_ms
            << " ms after it answered; failed rounds: " << run.Get("errors")
            << "; the lost Put's Get: " << run.Get("put_after") << std::endl;
  // Calls made while the store was away waited for it: no storm of errors.
  int errors = -1;
  ASSERT_TRUE(absl::SimpleAtoi(run.Get("errors"), &errors)) << run.All();
  EXPECT_LE(errors, 2) << run.All();
  // The Put made before the kill is lost, and Get says where and why, with the store
  // full (the answer must not depend on free space: the campaign saw RESOURCE_EXHAUSTED).
  EXPECT_EQ(run.Get("fill"), "RESOURCE_EXHAUSTED") << run.All();
  const std::string put_after = run.Get("put_after");
  EXPECT_TRUE(absl::StartsWith(put_after, "NOT_FOUND")) << run.All();
  EXPECT_TRUE(absl::StrContains(put_after, "lost when the object store of node " +
                                               cluster.agent_node_id(0) + " restarted at"))
      << run.All();
  // Said by the driver's own store client, which connected again to the restarted
  // store, not by the scheduler ("restart N of that store"): the scheduler hears of a
  // restart from the agent's heartbeats and may hear late (an agent cut off from it, as
  // before the chaos campaign's store-102, where a Get of such an object is thought to
  // have retried until its 30 s deadline).
  EXPECT_TRUE(absl::StrContains(put_after, "when this process found it gone")) << run.All();
  // The task's result is made again by its task.
  EXPECT_EQ(run.Get("made_after"), "rebuilt") << run.All() << cluster.DaemonLogs();

  // `drover status` shows the restart (sent with the agent's heartbeats).
  std::string out;
  EXPECT_TRUE(WaitFor([&] {
    out.clear();
    return cluster.RunCli({"status"}, &out) == 0 && absl::StrContains(out, "object store restarts=1");
  }, absl::Seconds(10))) << out;
}

}  // namespace
}  // namespace drover::testing
