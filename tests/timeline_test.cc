// A job's timeline with what only the cluster's processes see, on a real 2-node
// cluster: task and actor-call spans naming the worker and node that ran them (reported
// by the workers), a pull across nodes (reported by the agent that pulled), an opt-in
// collective job's allreduce with its size (reported by the ranks), the same in
// `drover timeline`'s Chrome trace, and the bounds (what is not kept is counted).
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/auth.h"
#include "common/files.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "tests/util/driver_program.h"
#include "tests/util/test_cluster.h"

namespace drover::testing {
namespace {

using nlohmann::json;

// tests/task_program running a scenario as a driver of the cluster, in the background.
class Driver : public BackgroundDriver {
 public:
  Driver(TestCluster* cluster, const std::vector<std::string>& args,
         const std::vector<std::string>& env = {})
      : BackgroundDriver(*cluster, "tests/task_program", args, env) {}
};

class TimelineTest : public TwoNodeClusterTest {
 protected:
  static constexpr int kReportedPerJob = 300;

  static void SetUpTestSuite() {
    TestClusterOptions o = TwoNodes();
    o.scheduler_args = {"--timeline-reported-per-job", absl::StrCat(kReportedPerJob)};
    StartCluster(o);
  }

  // The job's timeline once `done` holds for it (or the last one read after `timeout`).
  template <typename Done>
  JobTimeline TimelineWhen(const std::string& job, Done done,
                           absl::Duration timeout = absl::Seconds(30)) {
    JobTimeline t;
    testing::WaitFor(
        [&] {
          auto got = cluster_->client().Timeline(job);
          if (got.ok()) t = *std::move(got);
          return got.ok() && done(t);
        },
        timeout);
    return t;
  }

  // The dashboard's JSON for the job's page (GET /api/job), with the cluster token.
  static json JobPage(const std::string& job) {
    auto status = cluster_->client().Status();
    if (!status.ok()) return json();
    httplib::Client http("http://" + status->metrics_address);
    const std::string token = ReadTokenFile(cluster_->token_file()).value_or("");
    auto res = http.Get(("/api/job?id=" + job).c_str(), {{"Authorization", "Bearer " + token}});
    if (!res || res->status != 200) return json();
    return json::parse(res->body, nullptr, false);
  }
  // How many of the page's timeline events are of `kind` ("TIMELINE_TASK").
  static int PageEvents(const json& page, const std::string& kind) {
    int n = 0;
    if (!page.is_object() || !page.contains("timeline")) return -1;
    for (const auto& e : page["timeline"]["events"]) n += e["kind"] == kind ? 1 : 0;
    return n;
  }

  static std::vector<TimelineEvent> OfKind(const JobTimeline& t, TimelineEventKind kind) {
    std::vector<TimelineEvent> out;
    for (const auto& e : t.events) {
      if (e.kind == kind) out.push_back(e);
    }
    return out;
  }

  std::string Go(const std::string& name) { return absl::StrCat(cluster_->dir(), "/go-", name); }
};

// "w-3@node-1" -> {"w-3", "node-1"}.
std::pair<std::string, std::string> WorkerAndNode(const std::string& s) {
  std::vector<std::string> p = absl::StrSplit(s, absl::MaxSplits('@', 1));
  return p.size() == 2 ? std::make_pair(p[0], p[1]) : std::make_pair(s, std::string());
}

// A trace's thread and process names by (pid, tid) and pid.
struct TraceNames {
  std::map<std::pair<int, int>, std::string> tracks;
  std::map<int, std::string> processes;
  explicit TraceNames(const json& trace) {
    for (const auto& m : trace["traceEvents"]) {
      if (m["ph"] != "M") continue;
      if (m["name"] == "thread_name") tracks[{m["pid"], m["tid"]}] = m["args"]["name"];
      if (m["name"] == "process_name") processes[m["pid"]] = m["args"]["name"];
    }
  }
  std::string Track(const json& x) const {
    auto it = tracks.find({x["pid"], x["tid"]});
    return it == tracks.end() ? "" : it->second;
  }
  std::string Process(const json& x) const {
    auto it = processes.find(x["pid"]);
    return it == processes.end() ? "" : it->second;
  }
};

TEST_F(TimelineTest, TasksActorCallsAndAPullShowTheWorkerAndNodeTheyRanOn) {
  const std::string a = cluster_->agent_node_id(0), b = cluster_->agent_node_id(1);
  const std::string go = Go("spans");
  Driver driver(cluster_, {"timeline", a, b, go});
  ASSERT_EQ(driver.WaitFor("ready"), "yes") << driver.Output().All() << cluster_->DaemonLogs();
  const DriverRun printed = driver.Output();
  auto kv = printed.kv;
  ASSERT_EQ(kv["pulled"], "yes") << printed.All();
  const std::string job = kv["job"], blob = kv["blob"], actor = kv["actor"];
  const std::string worker_a = WorkerAndNode(kv["worker_a"]).first;
  const std::string worker_b = WorkerAndNode(kv["worker_b"]).first;
  const std::string actor_worker = WorkerAndNode(kv["actor_worker"]).first;
  ASSERT_EQ(WorkerAndNode(kv["worker_a"]).second, a) << printed.All();
  ASSERT_EQ(WorkerAndNode(kv["worker_b"]).second, b) << printed.All();
  ASSERT_EQ(WorkerAndNode(kv["actor_worker"]).second, a) << printed.All();

  auto has = [](const JobTimeline& t, auto pred) {
    for (const auto& e : t.events) {
      if (pred(e)) return true;
    }
    return false;
  };
  auto task_on = [](const std::string& name, const std::string& worker, const std::string& node) {
    return [=](const TimelineEvent& e) {
      return e.kind == TimelineEventKind::kTask && e.name == name && e.worker_id == worker &&
             e.node_id == node;
    };
  };
  // Each function has leases of its own: Throws may run on another worker of a.
  auto failed_on_a = [&](const TimelineEvent& e) {
    return e.kind == TimelineEventKind::kTask && e.name == "Throws" && e.node_id == a && e.failed;
  };
  auto is_pull = [&](const TimelineEvent& e) {
    return e.kind == TimelineEventKind::kPull && e.object_id == blob;
  };
  JobTimeline t = TimelineWhen(job, [&](const JobTimeline& t) {
    return has(t, task_on("WorkerOf", worker_a, a)) && has(t, task_on("WorkerOf", worker_b, b)) &&
           has(t, task_on("Counter::Where", actor_worker, a)) && has(t, failed_on_a) &&
           has(t, is_pull);
  });
  EXPECT_TRUE(has(t, task_on("WorkerOf", worker_a, a))) << "no span of WorkerOf on " << worker_a;
  EXPECT_TRUE(has(t, task_on("WorkerOf", worker_b, b))) << "no span of WorkerOf on " << worker_b;
  EXPECT_TRUE(has(t, task_on("Counter::Where", actor_worker, a))) << "no actor call";
  EXPECT_TRUE(has(t, failed_on_a)) << "no failed span of Throws";
  for (const TimelineEvent& e : OfKind(t, TimelineEventKind::kTask)) {
    EXPECT_GE(e.time, absl::Now() - absl::Minutes(5)) << e.name;  // the worker's clock, in µs
    EXPECT_LT(e.duration, absl::Seconds(30)) << e.name;
    if (e.name == "Counter::Where") {
      EXPECT_EQ(e.actor_id, actor);
      EXPECT_EQ(e.worker_id, actor_worker);
      EXPECT_FALSE(e.failed);
    }
    if (e.name == "Throws") {
      EXPECT_TRUE(e.failed);
      EXPECT_NE(e.detail.find("bad input 7"), std::string::npos) << e.detail;
    }
    if (e.name == "WorkerOf") {
      EXPECT_TRUE(e.actor_id.empty());
    }
  }
  std::vector<TimelineEvent> pulls;
  for (const auto& e : OfKind(t, TimelineEventKind::kPull)) {
    if (e.object_id == blob) pulls.push_back(e);
  }
  ASSERT_EQ(pulls.size(), 1u) << "the 3 MiB result made on " << a << " read on " << b;
  EXPECT_EQ(pulls[0].node_id, b);
  EXPECT_EQ(pulls[0].source_node_id, a);
  EXPECT_GE(pulls[0].bytes, int64_t{3} << 20);
  EXPECT_LT(pulls[0].bytes, (int64_t{3} << 20) + 4096);
  EXPECT_FALSE(pulls[0].failed) << pulls[0].detail;
  EXPECT_GT(pulls[0].duration, absl::ZeroDuration());

  // The same in the Chrome trace: the task on its worker's track under its node, the
  // pull on the receiving node's transfers track.
  const std::string path = absl::StrCat(cluster_->dir(), "/spans-trace.json");
  std::string out, err;
  ASSERT_EQ(cluster_->RunCli({"timeline", job, "-o", path}, &out, &err), 0) << err;
  const json trace = json::parse(ReadFile(path).value_or(""), nullptr, false);
  ASSERT_FALSE(trace.is_discarded());
  const TraceNames names(trace);
  int task_spans = 0, pull_spans = 0;
  for (const auto& x : trace["traceEvents"]) {
    if (x["ph"] != "X" || !x.contains("cat")) continue;
    // Worker ids are per node: the span's node is its process.
    if (x["cat"] == "task" && x["name"] == "WorkerOf" && names.Process(x) == b) {
      ++task_spans;
      EXPECT_EQ(x["args"]["worker"], worker_b);
      EXPECT_EQ(names.Track(x), "worker " + worker_b);
    }
    if (x["cat"] == "pull" && x["args"]["object"] == blob) {
      ++pull_spans;
      EXPECT_EQ(names.Process(x), b);
      EXPECT_EQ(names.Track(x), "transfers");
      EXPECT_EQ(x["args"]["from"], a);
    }
  }
  EXPECT_EQ(task_spans, 1);
  EXPECT_EQ(pull_spans, 1);

  // And on the dashboard's job page.
  const json page = JobPage(job);
  EXPECT_EQ(PageEvents(page, "TIMELINE_TASK"), static_cast<int>(OfKind(t, TimelineEventKind::kTask).size()));
  EXPECT_EQ(PageEvents(page, "TIMELINE_PULL"), static_cast<int>(OfKind(t, TimelineEventKind::kPull).size()));
  bool pull_on_page = false;
  for (const auto& e : page["timeline"]["events"]) {
    if (e["kind"] == "TIMELINE_PULL" && e["objectId"] == blob) {
      pull_on_page = e["nodeId"] == b && e["sourceNodeId"] == a;
    }
  }
  EXPECT_TRUE(pull_on_page) << page.dump();

  ASSERT_TRUE(WriteFileAtomic(go, "", 0600).ok());
  const DriverRun done = driver.Finish();
  EXPECT_EQ(done.code, 0) << done.All();
}

TEST_F(TimelineTest, AnOptInCollectiveJobShowsItsAllreduceWithItsSize) {
  const std::string worker = Runfile("collective/collective_worker");
  JobSpec spec = TestCluster::JobOf({worker, "--mode=bench", "--mib=1", "--iters=2"}, 2);
  spec.env["DROVER_TIMELINE_COLLECTIVES"] = "1";
  auto done = cluster_->RunJob(spec, absl::Seconds(120));
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_EQ(done->state, JobState::kSucceeded) << done->reason << cluster_->DaemonLogs();
  std::map<int, std::string> node_of;
  for (const RankPlacement& p : done->placement) node_of[p.rank] = p.node_id;
  // Each rank: a warm-up and two timed allreduces of 1 MiB (float32), and barriers.
  auto allreduces = [](const JobTimeline& t, int rank) {
    std::vector<TimelineEvent> out;
    for (const auto& e : OfKind(t, TimelineEventKind::kCollective)) {
      if (e.name == "allreduce" && e.ranks == std::vector<int>{rank}) out.push_back(e);
    }
    return out;
  };
  JobTimeline t = TimelineWhen(done->job_id, [&](const JobTimeline& t) {
    return allreduces(t, 0).size() >= 3 && allreduces(t, 1).size() >= 3;
  });
  for (int rank : {0, 1}) {
    const auto ops = allreduces(t, rank);
    ASSERT_EQ(ops.size(), 3u) << "rank " << rank;
    for (const TimelineEvent& e : ops) {
      EXPECT_EQ(e.bytes, 1 << 20);
      EXPECT_EQ(e.node_id, node_of[rank]);
      EXPECT_TRUE(e.worker_id.empty());
      EXPECT_FALSE(e.failed) << e.detail;
      EXPECT_NE(e.detail.find("float32 sum"), std::string::npos) << e.detail;
    }
  }
  bool barrier = false;
  for (const auto& e : OfKind(t, TimelineEventKind::kCollective)) barrier |= e.name == "barrier";
  EXPECT_TRUE(barrier);

  // In the trace: on the rank's track.
  const std::string path = absl::StrCat(cluster_->dir(), "/collective-trace.json");
  std::string out, err;
  ASSERT_EQ(cluster_->RunCli({"timeline", done->job_id, "-o", path}, &out, &err), 0) << err;
  const json trace = json::parse(ReadFile(path).value_or(""), nullptr, false);
  ASSERT_FALSE(trace.is_discarded());
  const TraceNames names(trace);
  int spans = 0;
  for (const auto& x : trace["traceEvents"]) {
    if (x["ph"] == "X" && x.contains("cat") && x["cat"] == "collective" &&
        x["name"] == "allreduce 1.0 MiB" && x["args"]["rank"] == 1) {
      ++spans;
      EXPECT_EQ(names.Track(x), "rank 1");
      EXPECT_EQ(names.Process(x), node_of[1]);
    }
  }
  EXPECT_EQ(spans, 3);

  // Without the switch, a job's ranks report nothing (they report before they exit, so
  // the job's end is late enough to look).
  spec.env.clear();
  auto plain = cluster_->RunJob(spec, absl::Seconds(120));
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_EQ(plain->state, JobState::kSucceeded) << plain->reason;
  auto quiet = cluster_->client().Timeline(plain->job_id);
  ASSERT_TRUE(quiet.ok()) << quiet.status();
  EXPECT_TRUE(OfKind(*quiet, TimelineEventKind::kCollective).empty());
}

TEST_F(TimelineTest, TheTimelineKeepsABoundedNumberOfTaskEventsAndCountsTheRest) {
  constexpr int kTasks = 5000;
  const std::string go = Go("many");
  // Workers buffer at most 1,000 records between batches (the rest are dropped there);
  // the scheduler keeps 300 of what arrives.
  Driver driver(cluster_, {"many", absl::StrCat(kTasks), go}, {"DROVER_TIMELINE_BUFFER=1000"});
  ASSERT_EQ(driver.WaitFor("ran"), absl::StrCat(kTasks)) << driver.Output().All();
  const std::string job = driver.Output().Get("job");
  auto tasks = [](const JobTimeline& t) {
    return static_cast<int64_t>(OfKind(t, TimelineEventKind::kTask).size());
  };
  // Every task is either kept or counted as dropped, once each worker's last batch came.
  JobTimeline t = TimelineWhen(job, [&](const JobTimeline& t) {
    return tasks(t) + t.activity_dropped >= kTasks;
  });
  EXPECT_EQ(tasks(t) + t.activity_dropped, kTasks);
  EXPECT_LE(tasks(t), kReportedPerJob);
  EXPECT_GE(t.activity_dropped, kTasks - kReportedPerJob);
  EXPECT_GT(tasks(t), 0);
  // The trace says so too.
  std::string out, err;
  ASSERT_EQ(cluster_->RunCli({"timeline", job}, &out, &err), 0) << err;
  const json trace = json::parse(out, nullptr, false);
  ASSERT_FALSE(trace.is_discarded());
  EXPECT_EQ(trace["otherData"]["dropped_reported_events"], t.activity_dropped);
  // And the dashboard's job page.
  const json page = JobPage(job);
  ASSERT_TRUE(page.is_object());
  EXPECT_EQ(page["timeline"]["activityDropped"], t.activity_dropped);
  EXPECT_EQ(PageEvents(page, "TIMELINE_TASK"), tasks(t));
  ASSERT_TRUE(WriteFileAtomic(go, "", 0600).ok());
  const DriverRun done = driver.Finish();
  EXPECT_EQ(done.code, 0) << done.All();
}

TEST_F(TimelineTest, TasksRightBeforeTheJobEndsAreNotLost) {
  // The driver exits right after its last task: its job ends and the agents stop its
  // workers. Each worker sends what it holds when its lease ends and before it dies of
  // the SIGTERM, so every task is on the timeline.
  constexpr int kTasks = 200;
  Driver driver(cluster_, {"many", absl::StrCat(kTasks), "-"});
  const DriverRun done = driver.Finish(absl::Seconds(120));
  ASSERT_EQ(done.code, 0) << done.All();
  const std::string job = done.Get("job");
  auto ended = cluster_->client().WaitJob(job, absl::Seconds(30));
  ASSERT_TRUE(ended.ok()) << ended.status();
  JobTimeline t = TimelineWhen(job, [&](const JobTimeline& t) {
    return static_cast<int>(OfKind(t, TimelineEventKind::kTask).size()) >= kTasks;
  });
  EXPECT_EQ(OfKind(t, TimelineEventKind::kTask).size(), static_cast<size_t>(kTasks));
  EXPECT_EQ(t.activity_dropped, 0);
}

}  // namespace
}  // namespace drover::testing
