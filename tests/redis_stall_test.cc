// A Redis that stops answering (SIGSTOP, for longer than the node timeout) while agents
// heartbeat and jobs change: the scheduler keeps serving and no node is declared dead
// (no Redis call is made under its lock), replies that promise durability wait for
// Redis without holding anything up, and once Redis answers again every change is in
// it: a scheduler restarted from Redis sees them all.
#include <hiredis/hiredis.h>
#include <signal.h>

#include <atomic>
#include <map>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/files.h"
#include "common/net.h"
#include "gtest/gtest.h"
#include "scheduler/state_store.h"
#include "tests/util/test_cluster.h"

namespace drover::testing {
namespace {

// The pid of the redis-server at `host:port`, from INFO server (-1 if unknown).
pid_t RedisPid(const std::string& host, int port, const std::string& password) {
  redisContext* c = redisConnect(host.c_str(), port);
  if (c == nullptr || c->err != 0) {
    if (c != nullptr) redisFree(c);
    return -1;
  }
  if (!password.empty()) {
    auto* auth = static_cast<redisReply*>(
        redisCommand(c, "AUTH %b", password.data(), password.size()));
    if (auth != nullptr) freeReplyObject(auth);
  }
  auto* r = static_cast<redisReply*>(redisCommand(c, "INFO server"));
  pid_t pid = -1;
  if (r != nullptr && r->type == REDIS_REPLY_STRING) {
    std::string info(r->str, r->len);
    auto at = info.find("process_id:");
    int parsed = 0;
    if (at != std::string::npos &&
        absl::SimpleAtoi(info.substr(at + 11, info.find('\r', at) - at - 11), &parsed)) {
      pid = parsed;
    }
  }
  if (r != nullptr) freeReplyObject(r);
  redisFree(c);
  return pid;
}

// job id -> (state, version): as Redis stores them, and as the scheduler reports them.
std::map<std::string, std::pair<int, int64_t>> Summary(const std::vector<proto::JobInfo>& jobs) {
  std::map<std::string, std::pair<int, int64_t>> out;
  for (const auto& j : jobs) out[j.job_id()] = {j.state(), j.version()};
  return out;
}
std::map<std::string, std::pair<int, int64_t>> Summary(const std::vector<JobInfo>& jobs) {
  std::map<std::string, std::pair<int, int64_t>> out;
  for (const auto& j : jobs) out[j.job_id] = {static_cast<int>(j.state), j.version};
  return out;
}

TEST(RedisStallTest, NoNodeDiesAndNoChangeIsLostWhileRedisIsStopped) {
  TestClusterOptions o;
  o.nodes = 2;
  o.redis = true;
  o.node_timeout_ms = 2000;
  o.heartbeat_ms = 200;
  o.object_store = false;
  auto started = TestCluster::Start(o);
  ASSERT_TRUE(started.ok()) << started.status();
  TestCluster& cluster = **started;
  Client& client = cluster.client();

  auto status = client.Status();
  ASSERT_TRUE(status.ok()) << status.status();
  const std::string backend = status->state_backend;  // "redis 127.0.0.1:PORT"
  ASSERT_TRUE(absl::StartsWith(backend, "redis ")) << backend;
  auto redis = ParseHostPort(backend.substr(6));
  ASSERT_TRUE(redis.ok()) << redis.status();
  const pid_t redis_pid = RedisPid(redis->host, redis->port, cluster.redis()->password());
  ASSERT_GT(redis_pid, 0);

  const std::string flag = TestTmpDir() + "/redis-stall-go";
  auto forever = client.Submit(TestCluster::JobOf({"sleep", "300"}, 1));
  ASSERT_TRUE(forever.ok()) << forever.status();
  auto waits = client.Submit(TestCluster::JobOf(
      {"sh", "-c", absl::StrCat("while [ ! -e ", flag, " ]; do sleep 0.02; done")}, 2));
  ASSERT_TRUE(waits.ok()) << waits.status();
  ASSERT_TRUE(WaitFor([&] {
    auto j = client.GetJob(waits->job_id);
    return j.ok() && j->state == JobState::kRunning && j->master_port != 0;
  }));

  // Redis stops answering for 4.5 s, well past the 2 s node timeout (and the 2 s a
  // Redis command may take before it times out).
  ASSERT_EQ(kill(redis_pid, SIGSTOP), 0);
  const absl::Time stopped = absl::Now();
  // A job ends (its change is queued for Redis), another is cancelled and a third is
  // submitted: those two replies wait for Redis, each on a client of its own.
  ASSERT_TRUE(WriteFileAtomic(flag, "go").ok());
  absl::StatusOr<JobInfo> cancelled, submitted;
  std::atomic<bool> cancel_done{false}, submit_done{false};
  std::thread canceller([&] {
    auto c = Client::Connect({cluster.address(), cluster.token_file()});
    cancelled = c.ok() ? (*c)->Cancel(forever->job_id) : c.status();
    cancel_done = true;
  });
  std::thread submitter([&] {
    auto c = Client::Connect({cluster.address(), cluster.token_file()});
    submitted = c.ok() ? (*c)->Submit(TestCluster::JobOf({"true"}, 1)) : c.status();
    submit_done = true;
  });
  // Meanwhile the scheduler answers at once, and every node stays alive. (Failures are
  // collected, not asserted, so that Redis is resumed and the threads joined.)
  std::string failure;
  absl::Duration slowest = absl::ZeroDuration();
  bool ended_during_stall = false;
  while (failure.empty() && absl::Now() - stopped < absl::Milliseconds(4500)) {
    const absl::Time asked = absl::Now();
    auto s = client.Status();
    slowest = std::max(slowest, absl::Now() - asked);
    if (!s.ok()) {
      failure = absl::StrCat("status: ", s.status().ToString());
      break;
    }
    for (const auto& n : s->nodes) {
      if (n.state != NodeState::kAlive) failure = absl::StrCat(n.node_id, ": ", n.reason);
    }
    auto j = client.GetJob(waits->job_id);
    if (!j.ok()) failure = absl::StrCat("GetJob: ", j.status().ToString());
    ended_during_stall = ended_during_stall || (j.ok() && j->state == JobState::kSucceeded);
    absl::SleepFor(absl::Milliseconds(100));  // pacing of the probe, not a wait on a condition
  }
  const bool answered_early = cancel_done.load() || submit_done.load();
  kill(redis_pid, SIGCONT);
  canceller.join();
  submitter.join();
  ASSERT_EQ(failure, "") << "while Redis was stopped";
  EXPECT_LT(slowest, absl::Seconds(1)) << "a status call waited on Redis";
  EXPECT_TRUE(ended_during_stall) << "the job's end was held up by Redis";
  EXPECT_FALSE(answered_early) << "a cancel or submit answered before Redis stored it";

  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state, JobState::kCancelled);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  // Both end for good (no process left), so their records change no more.
  for (const auto& id : {forever->job_id, submitted->job_id}) {
    auto done = client.WaitJob(id, absl::Seconds(30));
    ASSERT_TRUE(done.ok()) << id << ": " << done.status();
  }

  // Every change reaches Redis: what it stores is what the scheduler says.
  auto store = NewRedisStateStore(redis->host, redis->port, "drover:", cluster.redis()->password());
  ASSERT_TRUE(store.ok()) << store.status();
  std::map<std::string, std::pair<int, int64_t>> live, stored;
  ASSERT_TRUE(WaitFor([&] {
    auto l = client.ListJobs();
    auto s = (*store)->LoadJobs();
    if (!l.ok() || !s.ok()) return false;
    live = Summary(*l);
    stored = Summary(*s);
    return live == stored;
  })) << "Redis lags the scheduler";
  EXPECT_EQ(live.size(), 3u);
  EXPECT_EQ(live[forever->job_id].first, static_cast<int>(JobState::kCancelled));
  EXPECT_EQ(live[waits->job_id].first, static_cast<int>(JobState::kSucceeded));

  // A scheduler restarted from Redis sees every change; no node was declared dead.
  ASSERT_TRUE(cluster.RestartScheduler().ok());
  auto reloaded = client.ListJobs();
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  for (const auto& j : *reloaded) {
    EXPECT_EQ(static_cast<int>(j.state), stored[j.job_id].first) << j.job_id;
    EXPECT_FALSE(absl::StrContains(j.reason, "declared dead")) << j.job_id << ": " << j.reason;
  }
  EXPECT_EQ(reloaded->size(), stored.size());
}

}  // namespace
}  // namespace drover::testing
