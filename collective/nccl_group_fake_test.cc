// The NCCL backend's call sites (collective/nccl_group.cc) without a GPU: the test runs
// itself again with the stand-in CUDA and NCCL (gpu/testing/fake_cuda.cc) preloaded, so
// groups are created and operations enqueued through drover's real code, meeting
// through a real scheduler's KV; each CUDA and NCCL call is made to fail as a driver or
// a peer would, and the group must answer with the right code, naming the call.
#include <dlfcn.h>
#include <stdlib.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collective/group_internal.h"
#include "collective/nccl_group.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_cluster.h"

namespace drover::collective {
namespace {

using ::testing::HasSubstr;
using drover::testing::TestCluster;
using drover::testing::TestClusterOptions;
using drover::testing::WaitFor;

class NcclGroupFakeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    TestClusterOptions o;
    o.nodes = 1;
    o.object_store = false;
    auto c = TestCluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = c->release();
    // A job of two ranks whose KV scope the groups below join (its processes wait).
    JobSpec spec = TestCluster::JobOf({"/bin/sh", "-c", "sleep 600"}, 2);
    auto job = cluster_->client().Submit(spec);
    ASSERT_TRUE(job.ok()) << job.status();
    job_id_ = new std::string(job->job_id);
    ASSERT_TRUE(WaitFor([&] {
      auto j = cluster_->client().GetJob(*job_id_);
      return j.ok() && j->state == JobState::kRunning;
    }, absl::Seconds(20)));
  }
  static void TearDownTestSuite() {
    delete cluster_;
    delete job_id_;
  }
  void SetUp() override { unsetenv("DROVER_FAKE_CUDA_FAIL"); }
  void Fail(const std::string& spec) { setenv("DROVER_FAKE_CUDA_FAIL", spec.c_str(), 1); }

  // A new group (a name of its own) of `size` ranks; this is rank `rank`.
  absl::StatusOr<std::unique_ptr<Group>> Make(int rank = 0, int size = 1,
                                              const std::string& name = "") {
    GroupOptions g;
    g.name = name.empty() ? absl::StrCat("g", ++groups_) : name;
    g.rank = rank;
    g.size = size;
    g.job_id = *job_id_;
    g.scheduler_address = cluster_->address();
    g.token_file = cluster_->token_file();
    g.backend = Backend::kNccl;
    g.timeout = absl::Seconds(2);
    g.watch_generation = false;
    return NewNcclGroup(g, runtime_.get());
  }

  static TestCluster* cluster_;
  static std::string* job_id_;
  static int groups_;
  std::unique_ptr<GpuRuntime> runtime_ = NewCudaRuntime();
};

TestCluster* NcclGroupFakeTest::cluster_ = nullptr;
std::string* NcclGroupFakeTest::job_id_ = nullptr;
int NcclGroupFakeTest::groups_ = 0;

TEST_F(NcclGroupFakeTest, EveryOperationRunsOnTheStandIn) {
  auto g = Make();
  ASSERT_TRUE(g.ok()) << g.status() << " (is the stand-in preloaded?)";
  std::vector<float> buf(16, 1.0f), out(16);
  EXPECT_TRUE((*g)->AllReduce(buf.data(), 16, DataType::kFloat32, ReduceOp::kSum).ok());
  EXPECT_TRUE((*g)->Broadcast(buf.data(), 16, DataType::kFloat32, 0).ok());
  EXPECT_TRUE((*g)->AllGather(buf.data(), out.data(), 16, DataType::kFloat32).ok());
  EXPECT_TRUE(
      (*g)->ReduceScatter(buf.data(), out.data(), 16, DataType::kFloat32, ReduceOp::kMax).ok());
  EXPECT_TRUE((*g)->Barrier().ok());
}

TEST_F(NcclGroupFakeTest, CreationFailuresNameTheCall) {
  struct Case {
    std::string fail;
    absl::StatusCode code;
    std::string says;
  } cases[] = {
      {"ncclGetUniqueId=3", absl::StatusCode::kInternal, "ncclGetUniqueId: internal error"},
      {"cudaSetDevice=101", absl::StatusCode::kFailedPrecondition, "cudaSetDevice(0)"},
      {"cudaStreamCreateWithFlags=2", absl::StatusCode::kInternal,
       "creating the stream or scratch buffer failed"},
      {"cudaMalloc=2", absl::StatusCode::kInternal, "creating the stream or scratch buffer"},
      {"ncclCommInitRankConfig=2", absl::StatusCode::kUnavailable,
       "ncclCommInitRank: unhandled system error"},
      {"ncclCommInitAsync=6", absl::StatusCode::kUnavailable,
       "ncclCommInitRank: remote process exited"},
      {"ncclCommGetAsyncError=7", absl::StatusCode::kDeadlineExceeded,
       "ncclCommInitRank did not complete within 2s"},
  };
  for (const Case& c : cases) {
    Fail(c.fail);
    auto g = Make();
    ASSERT_FALSE(g.ok()) << c.fail;
    EXPECT_EQ(g.status().code(), c.code) << c.fail << ": " << g.status();
    EXPECT_THAT(g.status().message(), HasSubstr(c.says)) << c.fail;
    EXPECT_THAT(g.status().message(), HasSubstr("creating NCCL group")) << c.fail;
  }
}

TEST_F(NcclGroupFakeTest, AFailedEnqueueBreaksTheGroupNamingTheOperation) {
  std::vector<float> buf(16, 1.0f), out(16);
  struct Case {
    std::string fail;
    std::string op;
    std::function<absl::Status(Group&)> run;
  } cases[] = {
      {"ncclAllReduce=1", "AllReduce",
       [&](Group& g) { return g.AllReduce(buf.data(), 16, DataType::kFloat32, ReduceOp::kSum); }},
      {"ncclBroadcast=1", "Broadcast",
       [&](Group& g) { return g.Broadcast(buf.data(), 16, DataType::kFloat32, 0); }},
      {"ncclAllGather=1", "AllGather",
       [&](Group& g) { return g.AllGather(buf.data(), out.data(), 16, DataType::kFloat32); }},
      {"ncclReduceScatter=1", "ReduceScatter",
       [&](Group& g) {
         return g.ReduceScatter(buf.data(), out.data(), 16, DataType::kFloat32, ReduceOp::kMin);
       }},
      {"ncclAllReduce=1", "Barrier", [&](Group& g) { return g.Barrier(); }},
  };
  for (const Case& c : cases) {
    unsetenv("DROVER_FAKE_CUDA_FAIL");
    auto g = Make();
    ASSERT_TRUE(g.ok()) << g.status();
    Fail(c.fail);
    absl::Status s = c.run(**g);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << c.fail << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(c.op)) << s;
    EXPECT_THAT(s.message(), HasSubstr("unhandled cuda error (the fake's last error)")) << s;
    // The communicator was aborted: the group is unusable, and says so.
    unsetenv("DROVER_FAKE_CUDA_FAIL");
    absl::Status again = (*g)->Barrier();
    EXPECT_FALSE(again.ok()) << c.op;
  }
}

TEST_F(NcclGroupFakeTest, SendAndRecvFailuresNameThePeer) {
  auto r0 = Make(0, 2, "pair");
  ASSERT_TRUE(r0.ok()) << r0.status();
  auto r1 = Make(1, 2, "pair");
  ASSERT_TRUE(r1.ok()) << r1.status();
  std::vector<char> buf(64);
  Fail("ncclSend=2");
  absl::Status s = (*r0)->Send(buf.data(), buf.size(), 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("Send to rank 1"));
  EXPECT_THAT(s.message(), HasSubstr("unhandled system error"));
  Fail("ncclRecv=2");
  s = (*r1)->Recv(buf.data(), buf.size(), 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("Recv from rank 0"));
}

TEST_F(NcclGroupFakeTest, ErrorsWhileAnOperationRunsAreReported) {
  std::vector<float> buf(16, 1.0f);
  struct Case {
    std::string fail;
    absl::StatusCode code;
    std::string says;
  } cases[] = {
      {"ncclCommGetAsyncError=6", absl::StatusCode::kUnavailable,
       "a peer failed or a connection broke: remote process exited"},
      {"cudaStreamQuery=700", absl::StatusCode::kInternal, "CUDA error cudaErrorIllegalAddress"},
      // The stream never finishes: the operation times out and aborts the communicator.
      {"cudaStreamQuery=600", absl::StatusCode::kDeadlineExceeded, "timed out after 2s"},
  };
  for (const Case& c : cases) {
    unsetenv("DROVER_FAKE_CUDA_FAIL");
    auto g = Make();
    ASSERT_TRUE(g.ok()) << g.status();
    Fail(c.fail);
    absl::Status s = (*g)->AllReduce(buf.data(), 16, DataType::kFloat32, ReduceOp::kSum);
    EXPECT_EQ(s.code(), c.code) << c.fail << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(c.says)) << c.fail;
  }
}

// The cluster's failure notice (here Abort, as the generation watcher calls it) aborts
// the communicator from another thread while an operation waits on its stream.
TEST_F(NcclGroupFakeTest, AnAbortInterruptsTheOperationInFlight) {
  auto g = Make();
  ASSERT_TRUE(g.ok()) << g.status();
  auto* base = dynamic_cast<internal::GroupBase*>(g->get());
  ASSERT_NE(base, nullptr);
  // The stand-in counts stream polls: the abort comes once the operation is waiting.
  auto polls = reinterpret_cast<long (*)()>(
      dlsym(RTLD_DEFAULT, "drover_fake_cuda_stream_queries"));
  ASSERT_NE(polls, nullptr);
  const long before = polls();
  Fail("cudaStreamQuery=600");  // the stream never finishes
  std::vector<float> buf(16, 1.0f);
  absl::Status s;
  const absl::Time start = absl::Now();
  std::thread op(
      [&] { s = (*g)->AllReduce(buf.data(), 16, DataType::kFloat32, ReduceOp::kSum); });
  EXPECT_TRUE(WaitFor([&] { return polls() > before; }, absl::Seconds(1)));
  base->Abort(absl::AbortedError("rank 1 on node n2 was killed by SIGKILL"));
  op.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1.5)) << "waited for the 2 s timeout";
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_THAT(s.message(), HasSubstr("killed by SIGKILL")) << s;
}

}  // namespace
}  // namespace drover::collective
