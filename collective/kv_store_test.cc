// KvClient and GlooKvStore against a real drover-scheduler: a one-node TestCluster runs a
// job whose processes block until released, so the job's generation-0 KV scope is live.
#include "collective/kv_store.h"

#include <atomic>
#include <fstream>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/net.h"
#include "gloo/common/error.h"
#include "gtest/gtest.h"
#include "tests/util/test_cluster.h"

namespace drover::collective {
namespace {

using drover::testing::TestCluster;
using drover::testing::TestClusterOptions;
using drover::testing::WaitFor;

class KvStoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    TestClusterOptions o;
    o.nodes = 1;
    auto c = TestCluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = c->release();
    release_ = absl::StrCat(cluster_->dir(), "/release");
    JobSpec spec;
    spec.command.push_back("/bin/sh");
    spec.command.push_back("-c");
    spec.command.push_back(absl::StrCat("while [ ! -e ", release_, " ]; do sleep 0.02; done"));
    spec.nproc = 1;
    spec.per_process.cpus = 1;
    auto job = cluster_->client().Submit(spec);
    ASSERT_TRUE(job.ok()) << job.status();
    job_id_ = new std::string(job->job_id);
    ASSERT_TRUE(WaitFor(
        [] {
          auto j = cluster_->client().GetJob(*job_id_);
          return j.ok() && j->state == JobState::kRunning;
        },
        absl::Seconds(20)))
        << cluster_->DaemonLogs();
  }

  static void TearDownTestSuite() {
    if (cluster_ != nullptr) {
      std::ofstream(release_).put('x');
      if (job_id_ != nullptr) (void)cluster_->client().WaitJob(*job_id_, absl::Seconds(20));
      delete cluster_;
      cluster_ = nullptr;
    }
  }

  void SetUp() override { ASSERT_NE(job_id_, nullptr); }

  KvClientOptions Options(int generation = 0) {
    KvClientOptions o;
    o.scheduler_address = cluster_->address();
    auto token = ReadTokenFile(cluster_->token_file());
    EXPECT_TRUE(token.ok()) << token.status();
    o.token = token.ok() ? *token : "";
    o.job_id = *job_id_;
    o.generation = generation;
    return o;
  }

  std::unique_ptr<KvClient> Client(int generation = 0) {
    auto c = KvClient::Create(Options(generation));
    EXPECT_TRUE(c.ok()) << c.status();
    return std::move(*c);
  }

  static TestCluster* cluster_;
  static std::string release_;
  static std::string* job_id_;
};

TestCluster* KvStoreTest::cluster_ = nullptr;
std::string KvStoreTest::release_;
std::string* KvStoreTest::job_id_ = nullptr;

TEST_F(KvStoreTest, SetGetOverwriteAndAbsent) {
  auto kv = Client();
  ASSERT_TRUE(kv->Set("a", "1").ok());
  ASSERT_TRUE(kv->Set("a", std::string("2\0x", 3)).ok());
  auto v = kv->Get("a");
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_TRUE(v->has_value());
  EXPECT_EQ(**v, std::string("2\0x", 3));
  auto missing = kv->Get("never-set");
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_FALSE(missing->has_value());
}

TEST_F(KvStoreTest, GetWaitsForAConcurrentSet) {
  auto kv = Client();
  absl::StatusOr<std::optional<std::string>> got;
  std::atomic<bool> started{false};
  std::thread reader([&] {
    started = true;
    got = kv->Get("late", absl::Seconds(10));
  });
  ASSERT_TRUE(WaitFor([&] { return started.load(); }));
  auto other = Client();
  ASSERT_TRUE(other->Set("late", "here").ok());
  reader.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(**got, "here");
}

TEST_F(KvStoreTest, GetWaitTimesOutNamingKeyAndJob) {
  auto kv = Client();
  absl::Time start = absl::Now();
  auto v = kv->Get("never-appears", absl::Milliseconds(300));
  absl::Duration took = absl::Now() - start;
  ASSERT_EQ(v.status().code(), absl::StatusCode::kDeadlineExceeded) << v.status();
  EXPECT_TRUE(absl::StrContains(v.status().message(), "'never-appears'")) << v.status();
  EXPECT_TRUE(absl::StrContains(v.status().message(), *job_id_)) << v.status();
  // DEADLINE_EXCEEDED (not found=false) says it waited; no lower bound on wall time.
  EXPECT_LT(took, absl::Seconds(5));
}

TEST_F(KvStoreTest, CompareAndSetUnderConcurrency) {
  auto kv = Client();
  // Only one of several racing creators wins expect-absent.
  std::atomic<int> winners{0};
  {
    std::vector<std::thread> ts;
    for (int i = 0; i < 4; ++i) {
      ts.emplace_back([&, i] {
        auto r = kv->CompareAndSet("leader", std::nullopt, absl::StrCat(i));
        ASSERT_TRUE(r.ok()) << r.status();
        ASSERT_TRUE(r->current.has_value());
        if (r->swapped) {
          ++winners;
          EXPECT_EQ(*r->current, absl::StrCat(i));
        }
      });
    }
    for (auto& t : ts) t.join();
  }
  EXPECT_EQ(winners.load(), 1);

  // A counter incremented only through compare-and-set loses no update.
  ASSERT_TRUE(kv->Set("counter", "0").ok());
  constexpr int kThreads = 4, kEach = 25;
  std::vector<std::thread> ts;
  for (int i = 0; i < kThreads; ++i) {
    ts.emplace_back([&] {
      auto mine = Client();
      for (int k = 0; k < kEach; ++k) {
        while (true) {
          auto cur = mine->Get("counter");
          ASSERT_TRUE(cur.ok() && cur->has_value()) << cur.status();
          int n = 0;
          ASSERT_TRUE(absl::SimpleAtoi(**cur, &n));
          auto r = mine->CompareAndSet("counter", **cur, absl::StrCat(n + 1));
          ASSERT_TRUE(r.ok()) << r.status();
          if (r->swapped) break;
        }
      }
    });
  }
  for (auto& t : ts) t.join();
  auto final_value = kv->Get("counter");
  ASSERT_TRUE(final_value.ok() && final_value->has_value());
  EXPECT_EQ(**final_value, absl::StrCat(kThreads * kEach));
}

TEST_F(KvStoreTest, AddIsAtomicAndReturnsDistinctSums) {
  constexpr int kThreads = 4, kEach = 50;
  std::mutex mu;
  std::set<int64_t> seen;
  std::vector<std::thread> ts;
  for (int i = 0; i < kThreads; ++i) {
    ts.emplace_back([&] {
      auto kv = Client();
      for (int k = 0; k < kEach; ++k) {
        auto v = kv->Add("adds", 1);
        ASSERT_TRUE(v.ok()) << v.status();
        std::lock_guard<std::mutex> l(mu);
        EXPECT_TRUE(seen.insert(*v).second) << "sum " << *v << " returned twice";
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(seen.size(), size_t{kThreads * kEach});
  EXPECT_EQ(*seen.rbegin(), kThreads * kEach);
  auto kv = Client();
  auto neg = kv->Add("adds", -10);
  ASSERT_TRUE(neg.ok());
  EXPECT_EQ(*neg, kThreads * kEach - 10);
}

TEST_F(KvStoreTest, WrongGenerationFailsNamingJobAndKey) {
  auto kv = Client(/*generation=*/7);
  absl::Status s = kv->Set("k", "v");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "'k'")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), *job_id_)) << s;
}

TEST_F(KvStoreTest, UnavailableIsRetriedThenReportedNamingKey) {
  auto port = PickFreePort();
  ASSERT_TRUE(port.ok());
  KvClientOptions o = Options();
  o.scheduler_address = absl::StrCat("127.0.0.1:", *port);
  o.retry_for = absl::Milliseconds(400);
  auto kv = KvClient::Create(o);
  ASSERT_TRUE(kv.ok());
  absl::Time start = absl::Now();
  auto v = (*kv)->Add("k", 1);
  absl::Duration took = absl::Now() - start;
  ASSERT_EQ(v.status().code(), absl::StatusCode::kUnavailable) << v.status();
  EXPECT_TRUE(absl::StrContains(v.status().message(), "'k'")) << v.status();
  EXPECT_TRUE(absl::StrContains(v.status().message(), "times over")) << v.status();
  // "times over" says it was retried; no lower bound on wall time.
  EXPECT_LT(took, absl::Seconds(5));
}

TEST_F(KvStoreTest, GlooStoreSetGetWaitWithPrefixes) {
  auto kv = Client();
  GlooKvStore a(kv.get(), MakeGroupPrefix("a", 0, 0), std::chrono::milliseconds(2000));
  GlooKvStore b(kv.get(), MakeGroupPrefix("b", 0, 0), std::chrono::milliseconds(2000));
  a.set("0", {'x', 'y'});
  b.set("0", {'z'});
  a.wait({"0"});
  EXPECT_EQ(a.get("0"), (std::vector<char>{'x', 'y'}));
  EXPECT_EQ(b.get("0"), (std::vector<char>{'z'}));
  // The key lives under the prefix in the job's KV.
  auto raw = kv->Get("collective/a/g0/i0/0");
  ASSERT_TRUE(raw.ok() && raw->has_value());
  EXPECT_EQ(**raw, "xy");
  // A key that never comes: Gloo's exception, with the drover status kept.
  absl::Time start = absl::Now();
  EXPECT_THROW(a.wait({"0", "1"}, std::chrono::milliseconds(300)), ::gloo::IoException);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(a.last_error().code(), absl::StatusCode::kDeadlineExceeded) << a.last_error();
  EXPECT_TRUE(absl::StrContains(a.last_error().message(), "collective/a/g0/i0/1"))
      << a.last_error();
}

}  // namespace
}  // namespace drover::collective
