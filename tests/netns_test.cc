// Integration test on a real (if small) network: each agent runs in its own Linux
// network namespace with its own address, joined to the host by a veth pair on a
// bridge, so nodes really have distinct addresses and nothing may quietly assume
// 127.0.0.1. The scheduler stays in the host namespace, reached at the bridge address.
//
//   host ns:  bridge drvb<n> 10.213.<k>.1/24  <- drover-scheduler, the CLI, this test
//   ns A:     veth           10.213.<k>.2/24  <- drover-agent 0 and its workers
//   ns B:     veth           10.213.<k>.3/24  <- drover-agent 1 and its workers
//
// Needs root and iproute2 (`ip`), and write access to /var/run/netns: tagged "local"
// so Bazel runs it outside the sandbox. Skips without root or `ip`. Traffic only ever
// goes to the 10.213.<k>.0/24 addresses this test creates (tests/util/netns_network.h).
#include <unistd.h>

#include <chrono>
#include <future>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/files.h"
#include "drover/json.h"
#include "gtest/gtest.h"
#include "tests/util/netns_network.h"
#include "tests/util/test_cluster.h"

namespace drover::testing {
namespace {

std::string TestTmp() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

// Creates the bridge, two namespaces and their veth links (NetnsNetwork) in SetUp and
// removes them in TearDown (also after a failure).
class NetnsTest : public ::testing::Test {
 protected:
  static constexpr int kNodes = 2;

  void SetUp() override {
    auto net = NetnsNetwork::Create(kNodes);
    if (absl::IsFailedPrecondition(net.status())) GTEST_SKIP() << net.status().message();
    ASSERT_TRUE(net.ok()) << net.status();
    net_ = std::move(*net);
    ip_ = net_->ip_tool();
    subnet_ = net_->subnet();
    host_ip_ = net_->host_ip();
    node_ip_ = net_->node_ips();
  }

  void TearDown() override {
    cluster_.reset();  // stop the daemons before their network goes away
    if (net_ == nullptr) return;
    net_->Remove();
    EXPECT_FALSE(net_->AnythingLeft()) << "a namespace, veth or the bridge was left behind";
  }

  void StartCluster() {
    TestClusterOptions o;
    o.nodes = kNodes;
    o.netns = net_->netns();
    o.scheduler_host = host_ip_;
    auto c = TestCluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
  }

  // The address agent i must have registered with (agents register in any order).
  std::map<std::string, std::string> ExpectedNodeIps() {
    std::map<std::string, std::string> ips;
    for (int i = 0; i < kNodes; ++i) ips[cluster_->agent_node_id(i)] = node_ip_[i];
    return ips;
  }

  std::unique_ptr<NetnsNetwork> net_;
  std::string ip_;
  std::string subnet_;  // "10.213.<k>."
  std::string host_ip_;
  std::vector<std::string> node_ip_;
  std::unique_ptr<TestCluster> cluster_;
};

std::string Show(const NodeInfo& n) {
  return absl::StrCat(n.node_id, " ", NodeStateName(n.state), " ip ", n.node_ip, " agent ",
                      n.agent_address);
}

TEST_F(NetnsTest, NodesRegisterWithTheirOwnAddresses) {
  StartCluster();
  auto expected = ExpectedNodeIps();
  auto status = cluster_->client().Status();
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->nodes.size(), kNodes) << ToJson(*status);
  std::set<std::string> seen;
  for (const auto& n : status->nodes) {
    ASSERT_TRUE(expected.count(n.node_id)) << "unknown node " << Show(n);
    const std::string& want = expected[n.node_id];
    EXPECT_EQ(n.state, NodeState::kAlive) << Show(n);
    EXPECT_EQ(n.node_ip, want) << Show(n);
    EXPECT_NE(n.node_ip, "127.0.0.1");
    EXPECT_TRUE(absl::StartsWith(n.agent_address, want + ":")) << Show(n);
    seen.insert(n.node_ip);
  }
  EXPECT_EQ(seen.size(), 2u) << "both nodes reported the same address";

  // The CLI shows the same, and can reach each agent across the bridge.
  std::string out, err;
  ASSERT_EQ(cluster_->RunCli({"status"}, &out, &err), 0) << err;
  for (int i = 0; i < kNodes; ++i) {
    EXPECT_TRUE(absl::StrContains(out, node_ip_[i] + ":")) << out;
  }
  EXPECT_FALSE(absl::StrContains(out, "127.0.0.1")) << out;
}

TEST_F(NetnsTest, RanksMeetAtTheAddressOfRankZerosNode) {
  StartCluster();
  auto expected = ExpectedNodeIps();
  std::string dir = TestTmp() + "/ranks";
  ASSERT_TRUE(MakeDirs(dir).ok());
  // Each rank records its environment and the addresses its own namespace has.
  JobSpec spec;
  spec.command.push_back("/bin/sh");
  spec.command.push_back("-c");
  spec.command.push_back(absl::StrCat("env > ", dir, "/rank$RANK.env && ", ip_,
                                      " -4 -o addr show > ", dir, "/rank$RANK.addr"));
  spec.nproc = 2;
  spec.nproc_per_node = 1;
  spec.per_process.cpus = 1;
  auto submitted = cluster_->client().Submit(spec);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  auto job = cluster_->client().WaitJob(submitted->job_id, absl::Seconds(60));
  ASSERT_TRUE(job.ok()) << job.status() << "\n" << cluster_->DaemonLogs();
  ASSERT_EQ(job->state, JobState::kSucceeded) << job->reason << "\n" << cluster_->DaemonLogs();
  ASSERT_EQ(job->placement.size(), 2);
  EXPECT_NE(job->placement[0].node_id, job->placement[1].node_id);

  const std::string master = job->placement[0].node_ip;
  EXPECT_EQ(master, expected[job->placement[0].node_id]);
  std::set<std::string> rendezvous;
  for (int r = 0; r < 2; ++r) {
    const auto& p = job->placement[r];
    SCOPED_TRACE(absl::StrCat("rank ", r, " on ", p.node_id, " at ", p.node_ip));
    EXPECT_EQ(p.node_ip, expected[p.node_id]);
    auto env = ReadEnvFile(absl::StrCat(dir, "/rank", r, ".env"));
    ASSERT_FALSE(env.empty()) << "rank " << r << " wrote nothing";
    EXPECT_EQ(env["RANK"], absl::StrCat(r));
    EXPECT_EQ(env["DROVER_NODE_ID"], p.node_id);
    EXPECT_EQ(env["MASTER_ADDR"], master);
    EXPECT_NE(env["MASTER_ADDR"], "127.0.0.1");
    EXPECT_TRUE(env["MASTER_ADDR"] == node_ip_[0] || env["MASTER_ADDR"] == node_ip_[1])
        << env["MASTER_ADDR"];
    EXPECT_NE(env["MASTER_PORT"], "");
    EXPECT_NE(env["MASTER_PORT"], "0");
    rendezvous.insert(env["MASTER_ADDR"] + ":" + env["MASTER_PORT"]);
    // Workers that call back into the cluster must get an address they can reach.
    EXPECT_TRUE(absl::StartsWith(env["DROVER_SCHEDULER_ADDRESS"], host_ip_ + ":"))
        << env["DROVER_SCHEDULER_ADDRESS"];
    // The rank really ran inside its node's namespace: it sees that address, not the other.
    std::string addrs = ReadFile(absl::StrCat(dir, "/rank", r, ".addr")).value_or("");
    EXPECT_TRUE(absl::StrContains(addrs, p.node_ip + "/24")) << addrs;
    for (const auto& other : node_ip_) {
      if (other != p.node_ip) {
        EXPECT_FALSE(absl::StrContains(addrs, other + "/")) << addrs;
      }
    }
  }
  EXPECT_EQ(rendezvous.size(), 1u) << "the ranks got different MASTER_ADDR:PORT";
}

TEST_F(NetnsTest, DdpTrainingRanksMeetAcrossNamespaces) {
  const std::string python = "/usr/bin/python3";
  CmdResult torch =
      RunCmd({python, "-c", "import torch.distributed as d; assert d.is_gloo_available()"});
  if (torch.code != 0) {
    GTEST_SKIP() << python << " cannot import torch with gloo (install Debian's python3-torch): "
                 << torch.output;
  }
  StartCluster();
  const std::string script = Runfile("examples/ddp_train.py");
  std::string out, err;
  // Gloo does not use MASTER_ADDR's route: each rank advertises the address its
  // *hostname* resolves to, and here (as on stock Debian) that is loopback, so ranks on
  // other nodes would dial 127.0.0.1 and fail ("connect [127.0.0.1]:N: Connection
  // refused"). The agent sets GLOO_SOCKET_IFNAME to its node's interface; the job here
  // sets nothing, so this test fails if the agent stops doing that.
  //
  // `drover run` returns when the job ends; if the ranks never meet, cancel the job after
  // a deadline so the run returns and the test fails with the logs instead of hanging.
  auto run = std::async(std::launch::async, [&] {
    return cluster_->RunCli(
        {"run", "--nodes", "2", "--nproc-per-node", "1", "--env", "STEPS=5", "--", python,
         script},
        &out, &err);
  });
  if (run.wait_for(std::chrono::seconds(180)) != std::future_status::ready) {
    ADD_FAILURE() << "drover run did not finish in 180 s; cancelling\n" << cluster_->DaemonLogs();
    auto jobs = cluster_->client().ListJobs();
    if (jobs.ok()) {
      for (const auto& j : *jobs) (void)cluster_->client().Cancel(j.job_id);
    }
  }
  int rc = run.get();
  EXPECT_EQ(rc, 0) << "stdout:\n" << out << "\nstderr:\n" << err << "\n" << cluster_->DaemonLogs();
  EXPECT_TRUE(absl::StrContains(out, "met the group at " + subnet_)) << out;
  EXPECT_TRUE(absl::StrContains(out, "final_loss=")) << out;
  EXPECT_FALSE(absl::StrContains(out, "met the group at 127.")) << out;

  auto jobs = cluster_->client().ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1u);
  const auto& job = jobs->front();
  EXPECT_EQ(job.state, JobState::kSucceeded) << job.reason;
  ASSERT_EQ(job.placement.size(), 2);
  EXPECT_NE(job.placement[0].node_ip, job.placement[1].node_ip);
  EXPECT_TRUE(absl::StrContains(out, "met the group at " + job.placement[0].node_ip + ":"))
      << out;
}

}  // namespace
}  // namespace drover::testing
