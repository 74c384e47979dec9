// examples/ddp_train (data-parallel MLP training in C++ over the collective group) as
// real drover jobs on a TestCluster:
//  - correctness: N = 2 and N = 4 ranks end with the same weights as one process trained
//    on the same global batches (within float tolerance), and every rank holds the same
//    weights;
//  - recovery: a rank SIGKILLs itself mid-training; the whole gang is stopped and the
//    restart shows up within 5 s, the job resumes from the last checkpoint and ends with
//    exactly the uninterrupted run's loss and weights.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/files.h"
#include "common/spawn.h"
#include "drover/json.h"
#include "gtest/gtest.h"
#include "tests/util/test_cluster.h"

namespace drover::testing {
namespace {

std::string Tmp(const std::string& name) {
  std::string dir = absl::StrCat(TestTmpDir(), "/", name);
  (void)MakeDirs(dir);
  return dir;
}

// What ddp_train writes to --result-file.
struct Result {
  std::map<std::string, std::string> fields;
  std::vector<double> weights;
  bool ok() const { return fields.count("final_loss") && !weights.empty(); }
  std::string loss() const { return fields.count("final_loss") ? fields.at("final_loss") : ""; }
  std::string operator[](const std::string& k) const {
    return fields.count(k) ? fields.at(k) : "";
  }
};

Result ReadResult(const std::string& path) {
  Result r;
  r.fields = ReadEnvFile(path);
  if (r.fields.count("final_weights")) {
    for (absl::string_view v : absl::StrSplit(r.fields["final_weights"], ',')) {
      double d;
      if (!absl::SimpleAtod(v, &d)) return Result();
      r.weights.push_back(d);
    }
  }
  return r;
}

// Element-wise |a - b| <= 1e-5 * max(|a|, |b|), with a small absolute floor for
// weights near zero. Returns "" or a description of the first mismatch.
std::string CompareWeights(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) {
    return absl::StrCat(got.size(), " weights, expected ", want.size());
  }
  int bad = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); ++i) {
    double tol = 1e-5 * std::max(std::fabs(got[i]), std::fabs(want[i])) + 1e-7;
    if (std::fabs(got[i] - want[i]) > tol) {
      if (bad++ == 0) first = absl::StrCat("weight ", i, " is ", got[i], ", expected ", want[i]);
    }
  }
  return bad ? absl::StrCat(bad, " weights differ; first: ", first) : "";
}

std::string Show(const ExitInfo& e) {
  return absl::StrCat("rank ", e.rank, " on ", e.node_id, " exit ", e.exit_code, " signal ",
                      e.signal, " generation ", e.generation, ": ", e.error, e.stderr_tail);
}

class DdpCppTest : public ::testing::Test {
 protected:
  void StartCluster() {
    TestClusterOptions o;
    o.nodes = 2;
    // The gang is stopped with SIGTERM and, after this grace, SIGKILL: short, so a
    // restart takes well under the 5 s the recovery test allows.
    o.kill_grace_ms = 1000;
    o.object_store = false;
    auto c = TestCluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
  }

  // One process, no cluster and no drover environment: the reference trajectory.
  Result RunReference(const std::vector<std::string>& args, const std::string& dir) {
    SpawnOptions p;
    p.argv = {binary_};
    for (const auto& a : args) p.argv.push_back(a);
    p.argv.push_back("--result-file=" + dir + "/result.txt");
    p.env = {"PATH=/usr/bin:/bin"};
    p.stdout_path = dir + "/stdout";
    p.stderr_path = dir + "/stderr";
    auto pid = Spawn(p);
    EXPECT_TRUE(pid.ok()) << pid.status();
    if (!pid.ok()) return Result();
    int status = 0;
    ::waitpid(*pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << TailFile(dir + "/stderr", 0, 4000);
    Result r = ReadResult(dir + "/result.txt");
    EXPECT_TRUE(r.ok()) << TailFile(dir + "/stdout", 0, 4000);
    return r;
  }

  JobSpec Spec(const std::vector<std::string>& args, int nproc, int ppn,
               const std::string& dir) {
    JobSpec spec;
    spec.command.push_back(binary_);
    for (const auto& a : args) spec.command.push_back(a);
    spec.command.push_back("--result-file=" + dir + "/result{rank}.txt");
    spec.nproc = nproc;
    spec.nproc_per_node = ppn;
    spec.per_process.cpus = 1;
    return spec;
  }

  JobInfo Wait(const std::string& job_id) {
    auto done = cluster_->client().WaitJob(job_id, absl::Seconds(120));
    EXPECT_TRUE(done.ok()) << done.status() << "\n" << cluster_->DaemonLogs();
    return done.ok() ? *done : JobInfo();
  }

  // Every rank's result; they must agree bitwise (each applies the same reduced
  // gradients to the same weights).
  Result RankResults(const std::string& dir, int nproc) {
    Result r0 = ReadResult(dir + "/result0.txt");
    EXPECT_TRUE(r0.ok()) << "rank 0 wrote no result";
    for (int r = 1; r < nproc; ++r) {
      Result rr = ReadResult(absl::StrCat(dir, "/result", r, ".txt"));
      EXPECT_TRUE(rr.ok()) << "rank " << r << " wrote no result";
      EXPECT_EQ(rr["final_weights"], r0["final_weights"]) << "rank " << r << " differs from rank 0";
      EXPECT_EQ(rr.loss(), r0.loss()) << "rank " << r;
    }
    return r0;
  }

  std::string binary_ = Runfile("examples/ddp_train");
  std::unique_ptr<TestCluster> cluster_;
};

TEST_F(DdpCppTest, TwoRanksOnTwoNodesMatchOneProcess) {
  StartCluster();
  const std::vector<std::string> args = {"--steps=100", "--global-batch=64", "--lr=0.05",
                                         "--checkpoint-dir="};
  Result want = RunReference(args, Tmp("ref2"));
  ASSERT_TRUE(want.ok());

  std::string dir = Tmp("n2");
  auto job = cluster_->client().Submit(Spec(args, 2, 1, dir));
  ASSERT_TRUE(job.ok()) << job.status();
  auto done = Wait(job->job_id);
  ASSERT_EQ(done.state, JobState::kSucceeded) << done.reason << "\n" << cluster_->DaemonLogs();
  ASSERT_EQ(done.placement.size(), 2);
  EXPECT_NE(done.placement[0].node_id, done.placement[1].node_id);
  Result got = RankResults(dir, 2);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(CompareWeights(got.weights, want.weights), "");
  double gl, wl;
  ASSERT_TRUE(absl::SimpleAtod(got.loss(), &gl) && absl::SimpleAtod(want.loss(), &wl));
  EXPECT_NEAR(gl, wl, 1e-5 * std::fabs(wl)) << got.loss() << " vs " << want.loss();
}

// Through the CLI, as the README shows it: 2 nodes x 2 processes. A global batch of 30
// does not split evenly over 4 ranks (7, 8, 7, 8).
TEST_F(DdpCppTest, TwoNodesTimesTwoRanksViaDroverRunMatchOneProcess) {
  StartCluster();
  const std::vector<std::string> args = {"--steps=100", "--global-batch=30", "--lr=0.05",
                                         "--checkpoint-dir="};
  Result want = RunReference(args, Tmp("ref4"));
  ASSERT_TRUE(want.ok());

  std::string dir = Tmp("n4");
  std::vector<std::string> cli = {"run", "--nodes", "2", "--nproc-per-node", "2", "--",
                                  binary_};
  for (const auto& a : args) cli.push_back(a);
  cli.push_back("--result-file=" + dir + "/result{rank}.txt");
  std::string out, err;
  int rc = cluster_->RunCli(cli, &out, &err);
  ASSERT_EQ(rc, 0) << out << err << "\n" << cluster_->DaemonLogs();
  EXPECT_TRUE(absl::StrContains(out, "[rank0]: ddp_train: 4 rank(s)")) << out;
  EXPECT_TRUE(absl::StrContains(out, "[rank0]: final_loss=")) << out;
  Result got = RankResults(dir, 4);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(CompareWeights(got.weights, want.weights), "");
  double gl, wl;
  ASSERT_TRUE(absl::SimpleAtod(got.loss(), &gl) && absl::SimpleAtod(want.loss(), &wl));
  EXPECT_NEAR(gl, wl, 1e-5 * std::fabs(wl)) << got.loss() << " vs " << want.loss();
}

TEST_F(DdpCppTest, KilledRankStopsTheGangInSecondsAndTheRestartResumesFromTheCheckpoint) {
  StartCluster();
  const std::vector<std::string> common = {"--steps=120", "--global-batch=64",
                                           "--checkpoint-every=10", "--log-every=10"};
  // The uninterrupted run, same layout (2 nodes x 1).
  std::string clean_dir = Tmp("clean");
  std::vector<std::string> clean_args = common;
  clean_args.push_back("--checkpoint-dir=" + clean_dir + "/ckpt");
  auto clean = cluster_->client().Submit(Spec(clean_args, 2, 1, clean_dir));
  ASSERT_TRUE(clean.ok()) << clean.status();
  auto clean_done = Wait(clean->job_id);
  ASSERT_EQ(clean_done.state, JobState::kSucceeded) << clean_done.reason;
  Result want = RankResults(clean_dir, 2);
  ASSERT_TRUE(want.ok());

  // Rank 1 of generation 0 SIGKILLs itself before step 45: rank 0 is then inside that
  // step's allreduce, and the last checkpoint is step 40's.
  std::string dir = Tmp("killed");
  std::string stamp = dir + "/died-at-ms";
  std::vector<std::string> args = common;
  for (const std::string& a :
       {"--checkpoint-dir=" + dir + "/ckpt", std::string("--die-at-step=45"),
        std::string("--die-rank=1"), std::string("--die-generation=0"), "--die-stamp=" + stamp}) {
    args.push_back(a);
  }
  auto spec = Spec(args, 2, 1, dir);
  spec.max_restarts = 1;
  auto job = cluster_->client().Submit(spec);
  ASSERT_TRUE(job.ok()) << job.status();

  // Follow the job record (GetJob long-polls on its version) until the restart shows:
  // restart_count moves to 1 only once every process of generation 0 has exited.
  JobInfo last = *job;
  ExitInfo cause;  // the root cause while the gang is stopped (cleared on re-placement)
  absl::Time restarted_at;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (absl::Now() < deadline) {
    auto j = cluster_->client().GetJob(job->job_id, last.version, absl::Seconds(1));
    ASSERT_TRUE(j.ok()) << j.status();
    last = *j;
    if (last.root_cause.has_value()) cause = *last.root_cause;
    if (last.restart_count >= 1) {
      restarted_at = absl::Now();
      break;
    }
    ASSERT_FALSE(IsTerminal(last.state)) << "the job ended without a restart: " << ToJson(last);
  }
  ASSERT_GE(last.restart_count, 1) << "no restart within 60 s: " << ToJson(last) << "\n"
                                   << cluster_->DaemonLogs();
  auto died = ReadFile(stamp);
  ASSERT_TRUE(died.ok()) << "rank 1 never reached --die-at-step: " << died.status();
  int64_t died_ms;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(*died), &died_ms)) << *died;
  const absl::Duration stop_time = restarted_at - absl::FromUnixMillis(died_ms);
  EXPECT_LT(stop_time, absl::Seconds(5))
      << "from the kill to the gang stopped and restarted: " << stop_time;
  std::printf("kill -> gang restarted: %s\n", absl::FormatDuration(stop_time).c_str());

  auto done = Wait(job->job_id);
  ASSERT_EQ(done.state, JobState::kSucceeded) << done.reason << "\n" << cluster_->DaemonLogs();
  EXPECT_EQ(done.restart_count, 1);
  // The first exit the scheduler hears of: rank 1's SIGKILL, or rank 0 failing that
  // step's allreduce (the agents report independently, so either may come first).
  if (cause.generation == 0 && !cause.node_id.empty()) {
    if (cause.rank == 1) {
      EXPECT_EQ(cause.signal, SIGKILL) << Show(cause);
    } else {
      EXPECT_TRUE(absl::StrContains(cause.stderr_tail, "AllReduce at step 45"))
          << Show(cause);
    }
  }
  Result got = RankResults(dir, 2);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got["generation"], "1");
  EXPECT_EQ(got["start_step"], "40") << "the restart should resume from step 40's checkpoint";
  // Resumed at a step boundary with the same data order: bitwise the same run.
  EXPECT_EQ(got.loss(), want.loss());
  EXPECT_EQ(got["final_weights"], want["final_weights"]);
}

}  // namespace
}  // namespace drover::testing
