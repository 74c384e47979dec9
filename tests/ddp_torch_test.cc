// An unmodified PyTorch DDP script (gloo backend, init_method="env://") started by
// `drover run --nodes 2 --nproc-per-node 2` ends with exactly the same loss as the
// same script started by hand with the torchrun variables set.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <regex>

#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/net.h"
#include "common/spawn.h"
#include "gtest/gtest.h"
#include "tests/util/test_cluster.h"

extern char** environ;

namespace drover::testing {
namespace {

constexpr char kPython[] = "/usr/bin/python3";

bool TorchAvailable() {
  SpawnOptions o;
  o.argv = {kPython, "-c", "import torch.distributed as d; assert d.is_gloo_available()"};
  o.stdout_path = o.stderr_path = "/dev/null";
  auto pid = Spawn(o);
  if (!pid.ok()) return false;
  int status = 0;
  ::waitpid(*pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::string FinalLoss(const std::string& output) {
  std::smatch m;
  if (std::regex_search(output, m, std::regex("final_loss=([0-9.eE+-]+)"))) return m[1];
  return "";
}

TEST(DdpTorchTest, DroverRunMatchesHandStartedRun) {
  if (!TorchAvailable()) {
    GTEST_SKIP() << kPython << " cannot import torch with gloo; `apt-get install python3-torch`";
  }
  const std::string script = Runfile("examples/ddp_train.py");
  TestClusterOptions o;
  o.nodes = 2;
  auto cluster = TestCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::string out, err;
  int rc = (*cluster)->RunCli({"run", "--nodes", "2", "--nproc-per-node", "2", "--env",
                               "STEPS=20", "--", kPython, script},
                              &out, &err);
  ASSERT_EQ(rc, 0) << out << err;
  const std::string via_drover = FinalLoss(out);
  ASSERT_FALSE(via_drover.empty()) << out;
  EXPECT_NE(out.find("[rank3]: rank 3 of 4"), std::string::npos) << out;

  // The same script by hand: 4 processes, torchrun's variables, one shared master.
  auto port = PickFreePort("127.0.0.1");
  ASSERT_TRUE(port.ok());
  std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/by-hand");
  ASSERT_TRUE(MakeDirs(dir).ok());
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 4; ++rank) {
    SpawnOptions p;
    p.argv = {kPython, script};
    for (char** e = environ; *e; ++e) p.env.push_back(*e);
    for (const auto& kv : std::vector<std::pair<std::string, std::string>>{
             {"RANK", absl::StrCat(rank)}, {"LOCAL_RANK", absl::StrCat(rank % 2)},
             {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "2"}, {"GROUP_RANK", absl::StrCat(rank / 2)},
             {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", absl::StrCat(*port)},
             {"STEPS", "20"}, {"OMP_NUM_THREADS", "1"}}) {
      p.env.push_back(kv.first + "=" + kv.second);
    }
    p.stdout_path = absl::StrCat(dir, "/rank", rank, ".out");
    p.stderr_path = absl::StrCat(dir, "/rank", rank, ".err");
    auto pid = Spawn(p);
    ASSERT_TRUE(pid.ok()) << pid.status();
    pids.push_back(*pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << TailFile(absl::StrCat(dir, "/rank0.err"), 0, 2000);
  }
  const std::string by_hand = FinalLoss(ReadFile(dir + "/rank0.out").value_or(""));
  ASSERT_FALSE(by_hand.empty());
  EXPECT_EQ(via_drover, by_hand);
}

}  // namespace
}  // namespace drover::testing
