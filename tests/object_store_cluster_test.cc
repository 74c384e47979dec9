// The object store across a real cluster: a scheduler and two agents as processes,
// each agent hosting its own drover-object-store. A job's rank 0 puts a tensor on one
// node; rank 1 on the other node gets it (pulled agent to agent); the directory then
// lists both nodes. A Get of an object put later, on the other node or the same one,
// returns soon after the put (event-driven, not polled). An agent's store never
// outlives the agent.
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/files.h"
#include "common/rpc.h"
#include "gtest/gtest.h"
#include "proto/scheduler.grpc.pb.h"
#include "tests/util/proc_stat.h"
#include "tests/util/test_cluster.h"

namespace drover::testing {
namespace {

// The parent pid and the state letter of a process, from /proc/PID/stat.
// Live (not zombie) drover-object-store processes whose parent is `parent` (comm is cut
// at 15 characters).
std::vector<pid_t> StoresOf(pid_t parent) { return RunningChildren(parent, "drover-object"); }

// True while `pid` runs (a zombie has finished running).
bool Running(pid_t pid) {
  const std::optional<ProcStat> p = ReadProcStat(pid);
  return p && p->state != 'Z' && absl::StartsWith(p->comm, "drover-object");
}

class ObjectStoreClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = TestCluster::Start(TestClusterOptions{});
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
    auto token = ReadTokenFile(cluster_->token_file());
    ASSERT_TRUE(token.ok()) << token.status();
    token_ = *token;
    scheduler_ = proto::Scheduler::NewStub(MakeChannel(cluster_->address()));
  }

  std::set<std::string> Holders(const std::string& id) {
    proto::GetObjectLocationsRequest req;
    req.set_object_id(id);
    proto::GetObjectLocationsReply reply;
    grpc::ClientContext ctx;
    PrepareContext(&ctx, token_);
    std::set<std::string> nodes;
    if (!scheduler_->GetObjectLocations(&ctx, req, &reply).ok()) return nodes;
    for (const auto& l : reply.locations()) nodes.insert(l.node_id());
    return nodes;
  }

  // The number after `key ` in `out` (-1 if absent).
  static int64_t Field(const std::string& out, const std::string& key) {
    const size_t at = out.find(key + " ");
    int64_t v = -1;
    if (at == std::string::npos) return v;
    const size_t begin = at + key.size() + 1;
    const size_t end = out.find_first_not_of("0123456789", begin);
    if (!absl::SimpleAtoi(out.substr(begin, end - begin), &v)) return -1;
    return v;
  }

  // Rank 1 Gets an object that rank 0 puts 300 ms after rank 1 began waiting, the two
  // ranks spread over `nodes` nodes: the Get must return within 150 ms of the put (a
  // Get that polled with a back-off of up to 500 ms could take a good part of that).
  void ExpectGetReturnsSoonAfterALatePut(int nodes, const std::string& id) {
    std::string out, err;
    int rc = cluster_->RunCli({"run", "--nproc", "2", "--nodes", absl::StrCat(nodes), "--",
                               Runfile("tests/object_worker"), "--id", id, "--late-put-ms", "300"},
                              &out, &err);
    ASSERT_EQ(rc, 0) << out << err << cluster_->DaemonLogs();
    std::cout << out;
    const int64_t put_us = Field(out, "put_us");
    const int64_t started_us = Field(out, "started_us");
    const int64_t returned_us = Field(out, "returned_us");
    ASSERT_GT(put_us, 0) << out;
    ASSERT_GT(started_us, 0) << out;
    ASSERT_GT(returned_us, 0) << out;
    EXPECT_GE(put_us - started_us, 300'000) << "the Get was not waiting long before the put";
    EXPECT_LT(returned_us - put_us, 150'000)
        << "the Get returned " << (returned_us - put_us) / 1000 << " ms after the put";
    std::cout << "late put on " << nodes << " node(s): Get returned "
              << (returned_us - put_us) / 1000.0 << " ms after the put\n";
  }

  std::unique_ptr<TestCluster> cluster_;
  std::string token_;
  std::unique_ptr<proto::Scheduler::Stub> scheduler_;
};

TEST_F(ObjectStoreClusterTest, TensorPutOnOneNodeIsReadOnTheOther) {
  const std::string id = "tensor-32mib";
  std::string out, err;
  int rc = cluster_->RunCli({"run", "--nproc", "2", "--nodes", "2", "--",
                             Runfile("tests/object_worker"), "--id", id, "--mib", "32"},
                            &out, &err);
  ASSERT_EQ(rc, 0) << out << err << cluster_->DaemonLogs();
  std::cout << out;  // rank 1 says how long the cross-node get took
  EXPECT_TRUE(absl::StrContains(out, "[rank0]: put tensor-32mib 33554432 bytes")) << out;
  EXPECT_TRUE(absl::StrContains(out, "[rank1]: got tensor-32mib 33554432 bytes")) << out;

  // Both nodes hold it now, and the directory says so.
  std::set<std::string> both = {cluster_->agent_node_id(0), cluster_->agent_node_id(1)};
  std::set<std::string> holders;
  EXPECT_TRUE(WaitFor([&] { return (holders = Holders(id)) == both; }))
      << "holders: " << holders.size() << "\n" << cluster_->DaemonLogs();
  EXPECT_EQ(Holders(id + ".sum"), both);
  EXPECT_TRUE(Holders("never-put").empty());
}

// An object larger than the whole store is refused naming the flag the user sets, the
// agent's --object-store-memory (it named the store's own --capacity, which the agent
// sets from it).
TEST_F(ObjectStoreClusterTest, AnObjectLargerThanTheStoreIsRefusedNamingTheAgentsFlag) {
  std::string out, err;
  int rc = cluster_->RunCli({"run", "--", Runfile("tests/object_worker"), "--id", "too-big",
                             "--mib", "300"},  // the stores hold 256 MiB
                            &out, &err);
  EXPECT_NE(rc, 0) << out << err;
  EXPECT_TRUE(absl::StrContains(err, "--object-store-memory")) << out << err;
  EXPECT_TRUE(absl::StrContains(err, "more than the whole store holds (268435456 bytes)"))
      << out << err;
}

TEST_F(ObjectStoreClusterTest, GetReturnsSoonAfterAPutOnAnotherNode) {
  ExpectGetReturnsSoonAfterALatePut(2, "late-remote");
}

TEST_F(ObjectStoreClusterTest, GetReturnsSoonAfterAPutOnTheSameNode) {
  ExpectGetReturnsSoonAfterALatePut(1, "late-local");
}

TEST_F(ObjectStoreClusterTest, KilledAgentLeavesNoStoreBehind) {
  pid_t agent0 = cluster_->agent_pid(0);
  pid_t agent1 = cluster_->agent_pid(1);
  std::vector<pid_t> stores0 = StoresOf(agent0);
  std::vector<pid_t> stores1 = StoresOf(agent1);
  ASSERT_EQ(stores0.size(), 1u) << "agent 0 must run exactly one store";
  ASSERT_EQ(stores1.size(), 1u) << "agent 1 must run exactly one store";

  // SIGKILL: the agent runs no code, the store notices its parent's death by itself.
  cluster_->SignalAgent(0, SIGKILL);
  EXPECT_TRUE(WaitFor([&] { return !Running(stores0[0]); }))
      << "store " << stores0[0] << " outlived its SIGKILLed agent";

  // SIGTERM: the agent stops its store and reaps it before it exits.
  cluster_->SignalAgent(1, SIGTERM);
  EXPECT_FALSE(Running(stores1[0])) << "store " << stores1[0] << " outlived its stopped agent";
}

}  // namespace
}  // namespace drover::testing
