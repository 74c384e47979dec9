#include "scheduler/state_store.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/files.h"
#include "common/net.h"
#include "gtest/gtest.h"
#include "tests/util/redis_server.h"

namespace drover {
namespace {

using ::drover::testing::RedisServer;

// A fresh directory under TEST_TMPDIR for one server.
std::string NewServerDir() {
  static std::atomic<int> next{0};
  const char* tmp = std::getenv("TEST_TMPDIR");
  const ::testing::TestInfo* info =
      ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = absl::StrCat(info->test_suite_name(), ".", info->name());
  std::replace(name.begin(), name.end(), '/', '_');
  return absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/redis-", name, "-", next++);
}

proto::JobInfo MakeJob(const std::string& id, const std::string& name,
                       proto::JobState state = proto::PENDING) {
  proto::JobInfo job;
  job.set_job_id(id);
  job.mutable_spec()->set_name(name);
  // Embedded NUL and CR/LF: the record must go through Redis byte for byte.
  job.mutable_spec()->add_command(std::string("echo\0with nul\r\n", 15));
  job.mutable_spec()->set_nproc(4);
  job.set_state(state);
  job.set_submit_time_ms(1700000000123);
  job.set_version(7);
  return job;
}

std::map<std::string, proto::JobInfo> ById(const std::vector<proto::JobInfo>& jobs) {
  std::map<std::string, proto::JobInfo> out;
  for (const auto& j : jobs) out[j.job_id()] = j;
  return out;
}

void ExpectSameJob(const proto::JobInfo& a, const proto::JobInfo& b) {
  EXPECT_EQ(a.SerializeAsString(), b.SerializeAsString())
      << a.DebugString() << "\nvs\n" << b.DebugString();
}

absl::StatusOr<std::unique_ptr<StateStore>> ConnectTo(const RedisServer& server,
                                                      const std::string& prefix) {
  return NewRedisStateStore(server.host(), server.port(), prefix);
}

// ---------------------------------------------------------------------------
// The contract, run against both back ends.

enum class Backend { kMemory, kRedis };

class StateStoreTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    if (GetParam() == Backend::kMemory) {
      store_ = NewMemoryStateStore();
      return;
    }
    auto server = RedisServer::Start(NewServerDir());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    auto store = ConnectTo(*server_, "test:");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }

  std::unique_ptr<RedisServer> server_;
  std::unique_ptr<StateStore> store_;
};

TEST_P(StateStoreTest, PutJobLoadJobsRoundTripAndReplacement) {
  auto empty = store_->LoadJobs();
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->empty());

  proto::JobInfo a = MakeJob("job-1", "train");
  proto::JobInfo b = MakeJob("job-2", "eval");
  ASSERT_TRUE(store_->PutJob(a).ok());
  ASSERT_TRUE(store_->PutJob(b).ok());

  // Replacing job-1 keeps one record with the new contents.
  proto::JobInfo a2 = MakeJob("job-1", "train", proto::RUNNING);
  a2.set_version(8);
  a2.add_succeeded_ranks(0);
  ASSERT_TRUE(store_->PutJob(a2).ok());

  auto loaded = store_->LoadJobs();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->size(), 2u);
  auto by_id = ById(*loaded);
  ExpectSameJob(by_id["job-1"], a2);
  ExpectSameJob(by_id["job-2"], b);
}

// A record older than the stored one (a write that arrived late) changes nothing.
TEST_P(StateStoreTest, PutJobKeepsTheNewestVersion) {
  proto::JobInfo newer = MakeJob("job-1", "newer", proto::RUNNING);
  newer.set_version(9);
  ASSERT_TRUE(store_->PutJob(newer).ok());
  proto::JobInfo older = MakeJob("job-1", "older");
  older.set_version(8);
  ASSERT_TRUE(store_->PutJob(older).ok());
  auto loaded = store_->LoadJobs();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->size(), 1u);
  ExpectSameJob((*loaded)[0], newer);
  newer.set_version(10);
  newer.set_state(proto::SUCCEEDED);
  ASSERT_TRUE(store_->PutJob(newer).ok());
  ExpectSameJob((*store_->LoadJobs())[0], newer);
}

// Actors' records (opaque bytes here) are kept per id, the newest version winning, and
// apart from jobs.
TEST_P(StateStoreTest, PutActorKeepsTheNewestRecordPerActor) {
  ASSERT_TRUE(store_->PutActor("actor-1", 3, "one at 3").ok());
  ASSERT_TRUE(store_->PutActor("actor-2", 1, std::string("two\0bytes", 9)).ok());
  ASSERT_TRUE(store_->PutActor("actor-1", 2, "one at 2, late").ok());
  ASSERT_TRUE(store_->PutActor("actor-2", 4, "two at 4").ok());
  EXPECT_FALSE(store_->PutActor("", 1, "x").ok());
  auto loaded = store_->LoadActors();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::sort(loaded->begin(), loaded->end());
  EXPECT_EQ(*loaded, (std::vector<std::string>{"one at 3", "two at 4"}));
  EXPECT_TRUE(store_->LoadJobs()->empty());
}

TEST_P(StateStoreTest, ReserveIdsHandsOutBlocks) {
  auto last = store_->ReserveIds("job", 32);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(*last, 32);
  EXPECT_EQ(*store_->NextId("job"), 33);
  EXPECT_EQ(*store_->ReserveIds("job", 10), 43);
  EXPECT_EQ(store_->ReserveIds("job", 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(StateStoreTest, PutJobRejectsEmptyId) {
  EXPECT_EQ(store_->PutJob(proto::JobInfo()).code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(StateStoreTest, NextIdCountsFromOneIndependentlyPerCounter) {
  for (int64_t want = 1; want <= 3; ++want) {
    auto id = store_->NextId("job");
    ASSERT_TRUE(id.ok()) << id.status();
    EXPECT_EQ(*id, want);
  }
  auto node = store_->NextId("node");
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ(*node, 1);
  auto job = store_->NextId("job");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(*job, 4);
}

TEST_P(StateStoreTest, NextIdIsAtomicAcrossThreads) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 50;
  std::vector<std::vector<int64_t>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        auto id = store_->NextId("job");
        got[t].push_back(id.ok() ? *id : -1);
      }
    });
  }
  for (auto& t : threads) t.join();
  std::set<int64_t> all;
  for (const auto& ids : got) all.insert(ids.begin(), ids.end());
  EXPECT_EQ(all.size(), size_t{kThreads * kPerThread});
  EXPECT_EQ(*all.begin(), 1);
  EXPECT_EQ(*all.rbegin(), kThreads * kPerThread);
}

TEST_P(StateStoreTest, Describe) {
  if (GetParam() == Backend::kMemory) {
    EXPECT_EQ(store_->Describe(), "memory");
  } else {
    EXPECT_EQ(store_->Describe(), absl::StrCat("redis 127.0.0.1:", server_->port()));
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, StateStoreTest,
                         ::testing::Values(Backend::kMemory, Backend::kRedis),
                         [](const ::testing::TestParamInfo<Backend>& info) {
                           return info.param == Backend::kMemory ? "Memory" : "Redis";
                         });

// ---------------------------------------------------------------------------
// Redis only: sharing, durability, failures.

TEST(MemoryStateStoreTest, WithoutJobsKeepsCountersOnly) {
  // drover-scheduler's store without --redis: nothing reloads job records.
  std::unique_ptr<StateStore> store = NewMemoryStateStore(/*keep_jobs=*/false);
  proto::JobInfo job;
  job.set_job_id("job-1");
  EXPECT_TRUE(store->PutJob(job).ok());
  EXPECT_EQ(store->PutJob(proto::JobInfo()).code(), absl::StatusCode::kInvalidArgument);
  auto loaded = store->LoadJobs();
  ASSERT_TRUE(loaded.ok());
  EXPECT_TRUE(loaded->empty());
  EXPECT_EQ(*store->ReserveIds("job", 10), 10);
  EXPECT_EQ(*store->NextId("job"), 11);
}

TEST(RedisStateStoreTest, KeyPrefixesIsolateStoresOnOneServer) {
  auto server = RedisServer::Start(NewServerDir());
  ASSERT_TRUE(server.ok()) << server.status();
  auto one = ConnectTo(**server, "cluster-a:");
  auto two = ConnectTo(**server, "cluster-b:");
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_TRUE(two.ok()) << two.status();

  ASSERT_TRUE((*one)->PutJob(MakeJob("job-1", "from a")).ok());
  ASSERT_TRUE((*two)->PutJob(MakeJob("job-1", "from b")).ok());
  ASSERT_TRUE((*two)->PutJob(MakeJob("job-2", "from b")).ok());
  EXPECT_EQ(*(*one)->NextId("job"), 1);
  EXPECT_EQ(*(*one)->NextId("job"), 2);
  EXPECT_EQ(*(*two)->NextId("job"), 1);

  auto a = (*one)->LoadJobs();
  auto b = (*two)->LoadJobs();
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), 1u);
  EXPECT_EQ((*a)[0].spec().name(), "from a");
  ASSERT_EQ(b->size(), 2u);
  for (const auto& job : *b) EXPECT_EQ(job.spec().name(), "from b");
}

TEST(RedisStateStoreTest, JobsAndCountersSurviveServerRestartWithAppendOnly) {
  auto server = RedisServer::Start(NewServerDir(), /*appendonly=*/true);
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<proto::JobInfo> written;
  {
    auto store = ConnectTo(**server, "durable:");
    ASSERT_TRUE(store.ok()) << store.status();
    for (int i = 0; i < 20; ++i) {
      auto id = (*store)->NextId("job");
      ASSERT_TRUE(id.ok()) << id.status();
      written.push_back(MakeJob(absl::StrCat("job-", *id), "durable", proto::RUNNING));
      ASSERT_TRUE((*store)->PutJob(written.back()).ok());
    }
  }
  ASSERT_TRUE((*server)->Restart().ok());

  // A new store, as a restarted scheduler would create it.
  auto store = ConnectTo(**server, "durable:");
  ASSERT_TRUE(store.ok()) << store.status();
  auto loaded = (*store)->LoadJobs();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->size(), written.size());
  auto by_id = ById(*loaded);
  for (const auto& job : written) ExpectSameJob(by_id[job.job_id()], job);
  auto next = (*store)->NextId("job");
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*next, 21);
}

TEST(RedisStateStoreTest, NewStoreFailsUnavailableWhenNothingListens) {
  auto port = PickFreePort();
  ASSERT_TRUE(port.ok());
  absl::Time start = absl::Now();
  auto store = NewRedisStateStore("127.0.0.1", *port, "x:");
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kUnavailable) << store.status();
  EXPECT_NE(store.status().message().find(absl::StrCat("redis 127.0.0.1:", *port)),
            std::string::npos)
      << store.status();
  EXPECT_NE(store.status().message().find("is redis-server running?"), std::string::npos)
      << store.status();
}

TEST(RedisStateStoreTest, UnavailableWhileStoppedThenReconnectsAfterRestart) {
  auto server = RedisServer::Start(NewServerDir(), /*appendonly=*/true);
  ASSERT_TRUE(server.ok()) << server.status();
  auto store = ConnectTo(**server, "t:");
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->PutJob(MakeJob("job-1", "before")).ok());
  ASSERT_EQ(*(*store)->NextId("job"), 1);

  (*server)->Stop();
  const std::string address = absl::StrCat("redis 127.0.0.1:", (*server)->port());
  absl::Time start = absl::Now();
  absl::Status put = (*store)->PutJob(MakeJob("job-2", "while down"));
  auto load = (*store)->LoadJobs();
  auto id = (*store)->NextId("job");
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "calls must fail fast, not hang";
  for (const absl::Status& s : {put, load.status(), id.status()}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_NE(s.message().find(address), std::string::npos) << s;
  }

  ASSERT_TRUE((*server)->Restart().ok());
  // Same store object: it reconnects by itself; no call fails after the restart.
  auto next = (*store)->NextId("job");
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*next, 2);
  ASSERT_TRUE((*store)->PutJob(MakeJob("job-2", "after")).ok());
  auto loaded = (*store)->LoadJobs();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->size(), 2u);
}

TEST(RedisStateStoreTest, StaleConnectionIsReplacedWithoutFailingIncr) {
  // Redis restarts between two calls (no failed call in between): the store notices
  // the closed connection before sending, so even INCR succeeds on the first try.
  auto server = RedisServer::Start(NewServerDir(), /*appendonly=*/true);
  ASSERT_TRUE(server.ok()) << server.status();
  auto store = ConnectTo(**server, "t:");
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_EQ(*(*store)->NextId("job"), 1);
  ASSERT_TRUE((*server)->Restart().ok());
  auto next = (*store)->NextId("job");
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*next, 2);
}

TEST(RedisStateStoreTest, CorruptRecordIsSkippedNotFatal) {
  auto server = RedisServer::Start(NewServerDir());
  ASSERT_TRUE(server.ok()) << server.status();
  auto store = ConnectTo(**server, "t:");
  ASSERT_TRUE(store.ok()) << store.status();
  proto::JobInfo good = MakeJob("job-1", "good");
  ASSERT_TRUE((*store)->PutJob(good).ok());

  // Write two bad records behind the store's back: bytes that are not a JobInfo, and
  // a valid JobInfo filed under another id.
  redisContext* c = redisConnect((*server)->host().c_str(), (*server)->port());
  ASSERT_TRUE(c != nullptr && c->err == 0);
  const std::string garbage = "\xff\xff\xff\xff not a proto";
  auto* r = static_cast<redisReply*>(
      redisCommand(c, "HSET t:jobs job-bad %b", garbage.data(), garbage.size()));
  ASSERT_NE(r, nullptr);
  freeReplyObject(r);
  const std::string other = MakeJob("job-9", "misfiled").SerializeAsString();
  r = static_cast<redisReply*>(
      redisCommand(c, "HSET t:jobs job-3 %b", other.data(), other.size()));
  ASSERT_NE(r, nullptr);
  freeReplyObject(r);
  redisFree(c);

  auto loaded = (*store)->LoadJobs();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->size(), 1u);
  ExpectSameJob((*loaded)[0], good);
}

TEST(RedisStateStoreTest, WrongTypeKeyIsFailedPrecondition) {
  auto server = RedisServer::Start(NewServerDir());
  ASSERT_TRUE(server.ok()) << server.status();
  auto store = ConnectTo(**server, "t:");
  ASSERT_TRUE(store.ok()) << store.status();
  redisContext* c = redisConnect((*server)->host().c_str(), (*server)->port());
  ASSERT_TRUE(c != nullptr && c->err == 0);
  freeReplyObject(redisCommand(c, "SET t:jobs a-string"));
  redisFree(c);
  absl::Status s = (*store)->PutJob(MakeJob("job-1", "x"));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("WRONGTYPE"), std::string::npos) << s;
  // The connection is still usable after an error reply.
  EXPECT_TRUE((*store)->NextId("job").ok());
}

// Issue 19, item 5: a Redis with a password (as `drover up --redis` starts it) refuses
// every connection that has not proven it, so a local user cannot read the jobs'
// command lines and environments; the store AUTHs on each connection it opens.
TEST(RedisStateStoreTest, PasswordProtectedRedisRefusesOthersAndServesTheStore) {
  auto server = RedisServer::Start(NewServerDir(), /*appendonly=*/true, /*with_password=*/true);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string password = (*server)->password();
  ASSERT_FALSE(password.empty());

  // Anyone without the password: NOAUTH, the jobs hash unread.
  redisContext* c = redisConnect((*server)->host().c_str(), (*server)->port());
  ASSERT_TRUE(c != nullptr && c->err == 0);
  auto* r = static_cast<redisReply*>(redisCommand(c, "HLEN drover:jobs"));
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->type, REDIS_REPLY_ERROR);
  EXPECT_EQ(std::string(r->str, r->len).rfind("NOAUTH", 0), 0u) << r->str;
  freeReplyObject(r);
  redisFree(c);

  // A store without the password, or with a wrong one, is refused with a message that
  // says what to pass; neither is worth retrying.
  auto none = NewRedisStateStore((*server)->host(), (*server)->port(), "t:");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition) << none.status();
  EXPECT_NE(none.status().message().find("--redis-password-file"), std::string::npos)
      << none.status();
  auto wrong = NewRedisStateStore((*server)->host(), (*server)->port(), "t:", "not-it");
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kFailedPrecondition) << wrong.status();

  // With it, the store works, and again on the new connection after a Redis restart.
  auto store = NewRedisStateStore((*server)->host(), (*server)->port(), "t:", password);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->PutJob(MakeJob("job-1", "secret")).ok());
  ASSERT_TRUE((*server)->Restart().ok());
  ASSERT_TRUE((*store)->PutJob(MakeJob("job-2", "secret")).ok());
  auto loaded = (*store)->LoadJobs();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->size(), 2u);

  // The password is nowhere on redis-server's command line.
  auto cmdline = ReadFile(absl::StrCat("/proc/", (*server)->pid(), "/cmdline"));
  ASSERT_TRUE(cmdline.ok());
  EXPECT_EQ(cmdline->find(password), std::string::npos);
}

}  // namespace
}  // namespace drover
