#include "cli/chrome_trace.h"

#include <set>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace drover::cli {
namespace {

using nlohmann::json;

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

TimelineEvent Event(TimelineEventKind kind, int64_t ms, const std::string& node = "",
                    std::vector<int> ranks = {}) {
  TimelineEvent e;
  e.kind = kind;
  e.time = kT0 + absl::Milliseconds(ms);
  e.node_id = node;
  e.ranks = std::move(ranks);
  return e;
}

TimelineEvent Exit(int64_t ms, const std::string& node, int rank, int code) {
  TimelineEvent e = Event(TimelineEventKind::kRankExited, ms, node, {rank});
  e.exit = ExitInfo{rank, node, code, 0, code ? "boom\n" : "", "", 0};
  return e;
}

// The trace's events of phase `ph`.
std::vector<json> Phase(const json& trace, const std::string& ph) {
  std::vector<json> out;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == ph) out.push_back(e);
  }
  return out;
}

TEST(ChromeTraceTest, OneProcessPerNodeAndOneTrackPerRank) {
  JobTimeline t;
  t.events = {Event(TimelineEventKind::kSubmitted, 0),
              Event(TimelineEventKind::kPlaced, 5, "node-1", {0, 1}),
              Event(TimelineEventKind::kPlaced, 5, "node-2", {2}),
              Event(TimelineEventKind::kRanksStarted, 20, "node-1", {0, 1}),
              Event(TimelineEventKind::kRanksStarted, 25, "node-2", {2}),
              Exit(1000, "node-1", 0, 0),
              Exit(1100, "node-2", 2, 3),
              Exit(1200, "node-1", 1, -1)};
  t.events.back().exit->signal = 15;
  const json trace = json::parse(ChromeTraceJson("job-x", t, kT0 + absl::Seconds(5)));
  std::map<int, std::string> processes;
  std::map<std::pair<int, int>, std::string> threads;
  for (const auto& m : Phase(trace, "M")) {
    if (m["name"] == "process_name") processes[m["pid"]] = m["args"]["name"];
    if (m["name"] == "thread_name") threads[{m["pid"], m["tid"]}] = m["args"]["name"];
  }
  ASSERT_EQ(processes.size(), 3u);  // the scheduler and two nodes
  std::set<std::string> names;
  for (const auto& [pid, name] : processes) names.insert(name);
  EXPECT_EQ(names, (std::set<std::string>{"scheduler", "node-1", "node-2"}));

  // A span per rank on its node's track, from start to exit.
  std::map<std::string, json> spans;
  for (const auto& x : Phase(trace, "X")) spans[x["name"]] = x;
  ASSERT_TRUE(spans.count("rank 0 gen 0"));
  ASSERT_TRUE(spans.count("rank 2 gen 0"));
  const json& r2 = spans["rank 2 gen 0"];
  EXPECT_EQ(processes[r2["pid"]], "node-2");
  EXPECT_EQ(threads[std::make_pair(int(r2["pid"]), int(r2["tid"]))], "rank 2");
  EXPECT_EQ(r2["ts"], absl::ToUnixMicros(kT0) + 25'000);
  EXPECT_EQ(r2["dur"], 1'075'000);
  EXPECT_EQ(r2["args"]["exit"], "exited with code 3");
  EXPECT_EQ(r2["args"]["failed"], true);
  EXPECT_EQ(spans["rank 1 gen 0"]["args"]["exit"], "killed by signal 15");
  // The wait for placement.
  ASSERT_TRUE(spans.count("pending (generation 0)"));
  EXPECT_EQ(spans["pending (generation 0)"]["dur"], 5'000);
  EXPECT_EQ(Phase(trace, "i").size(), 3u);  // submitted, placed x2
}

TEST(ChromeTraceTest, AnExitReportedBeforeTheStartSpansFromThePlacement) {
  JobTimeline t;
  t.events = {Event(TimelineEventKind::kSubmitted, 0),
              Event(TimelineEventKind::kPlaced, 5, "node-1", {0}), Exit(8, "node-1", 0, 0),
              Event(TimelineEventKind::kRanksStarted, 9, "node-1", {0})};
  const json trace = json::parse(ChromeTraceJson("job-q", t, kT0 + absl::Seconds(1)));
  const std::vector<json> spans = Phase(trace, "X");
  int rank_spans = 0;
  for (const auto& x : spans) {
    if (x["name"] != "rank 0 gen 0") continue;
    ++rank_spans;
    EXPECT_EQ(x["ts"], absl::ToUnixMicros(kT0) + 5'000);
    EXPECT_EQ(x["dur"], 3'000);
  }
  EXPECT_EQ(rank_spans, 1);
}

TEST(ChromeTraceTest, SpansStillOpenEndNowAndLeasesAndActorsGetTracks) {
  JobTimeline t;
  TimelineEvent lease = Event(TimelineEventKind::kLeaseGranted, 10, "node-1");
  lease.lease_id = "lease-1";
  lease.worker_id = "w1";
  TimelineEvent back = Event(TimelineEventKind::kLeaseReturned, 50, "node-1");
  back.lease_id = "lease-1";
  TimelineEvent alive = Event(TimelineEventKind::kActor, 60, "node-1");
  alive.actor_id = "actor-a";
  alive.state = "ACTOR_ALIVE";
  t.events = {Event(TimelineEventKind::kSubmitted, 0), lease, back, alive,
              Event(TimelineEventKind::kRanksStarted, 70, "node-1", {0})};
  const json trace = json::parse(ChromeTraceJson("job-d", t, kT0 + absl::Milliseconds(100)));
  std::map<std::string, json> spans;
  for (const auto& x : Phase(trace, "X")) spans[x["name"]] = x;
  ASSERT_TRUE(spans.count("lease-1"));
  EXPECT_EQ(spans["lease-1"]["dur"], 40'000);
  ASSERT_TRUE(spans.count("actor-a alive"));
  EXPECT_EQ(spans["actor-a alive"]["dur"], 40'000);  // open: ends at `now`
  EXPECT_EQ(spans["actor-a alive"]["args"]["open"], true);
  ASSERT_TRUE(spans.count("rank 0 gen 0"));
  EXPECT_EQ(spans["rank 0 gen 0"]["dur"], 30'000);
  EXPECT_EQ(trace["otherData"]["job"], "job-d");
}

// The name of the track (thread) `x` is on.
std::string TrackOf(const json& trace, const json& x) {
  for (const auto& m : Phase(trace, "M")) {
    if (m["name"] == "thread_name" && m["pid"] == x["pid"] && m["tid"] == x["tid"]) {
      return m["args"]["name"];
    }
  }
  return "";
}
std::string ProcessOf(const json& trace, const json& x) {
  for (const auto& m : Phase(trace, "M")) {
    if (m["name"] == "process_name" && m["pid"] == x["pid"]) return m["args"]["name"];
  }
  return "";
}

TimelineEvent Span(TimelineEventKind kind, int64_t ms, int64_t dur_ms, const std::string& node) {
  TimelineEvent e = Event(kind, ms, node);
  e.duration = absl::Milliseconds(dur_ms);
  return e;
}

TEST(ChromeTraceTest, TasksGoOnTheirWorkersTrackUnderTheirNode) {
  JobTimeline t;
  TimelineEvent lease = Event(TimelineEventKind::kLeaseGranted, 10, "node-2");
  lease.lease_id = "lease-1";
  lease.worker_id = "w-4";
  TimelineEvent task = Span(TimelineEventKind::kTask, 12, 3, "node-2");
  task.worker_id = "w-4";
  task.name = "Add";
  TimelineEvent call = Span(TimelineEventKind::kTask, 20, 1, "node-1");
  call.worker_id = "w-1";
  call.name = "Counter::Add";
  call.actor_id = "actor-c";
  call.failed = true;
  call.detail = "Counter::Add (on node node-1, worker w-1): threw";
  t.events = {Event(TimelineEventKind::kSubmitted, 0), lease, task, call};
  t.activity_dropped = 17;
  const json trace = json::parse(ChromeTraceJson("job-t", t, kT0 + absl::Milliseconds(100)));
  std::map<std::string, json> spans;
  for (const auto& x : Phase(trace, "X")) spans[x["name"]] = x;
  ASSERT_TRUE(spans.count("Add"));
  EXPECT_EQ(ProcessOf(trace, spans["Add"]), "node-2");
  EXPECT_EQ(TrackOf(trace, spans["Add"]), "worker w-4");
  EXPECT_EQ(spans["Add"]["tid"], spans["lease-1"]["tid"]);  // inside the lease's span
  EXPECT_EQ(spans["Add"]["ts"], absl::ToUnixMicros(kT0) + 12'000);
  EXPECT_EQ(spans["Add"]["dur"], 3'000);
  EXPECT_EQ(spans["Add"]["cat"], "task");
  ASSERT_TRUE(spans.count("Counter::Add"));
  EXPECT_EQ(ProcessOf(trace, spans["Counter::Add"]), "node-1");
  EXPECT_EQ(TrackOf(trace, spans["Counter::Add"]), "worker w-1");
  EXPECT_EQ(spans["Counter::Add"]["args"]["actor"], "actor-c");
  EXPECT_EQ(spans["Counter::Add"]["args"]["failed"], true);
  EXPECT_EQ(trace["otherData"]["dropped_reported_events"], 17);
}

TEST(ChromeTraceTest, PullsGoOnTransferTracksOfTheReceivingNodeWithoutOverlap) {
  JobTimeline t;
  TimelineEvent a = Span(TimelineEventKind::kPull, 10, 50, "node-2");
  a.source_node_id = "node-1";
  a.object_id = "job-t.abc.1";
  a.bytes = 3 << 20;
  TimelineEvent b = a;  // overlaps a
  b.time = kT0 + absl::Milliseconds(30);
  b.object_id = "job-t.abc.2";
  b.bytes = 512;
  TimelineEvent c = a;  // after a ended: a's lane again
  c.time = kT0 + absl::Milliseconds(70);
  c.object_id = "job-t.abc.3";
  t.events = {Event(TimelineEventKind::kSubmitted, 0), a, b, c};
  const json trace = json::parse(ChromeTraceJson("job-t", t, kT0 + absl::Milliseconds(200)));
  std::map<std::string, json> by_object;
  for (const auto& x : Phase(trace, "X")) {
    if (x.contains("cat") && x["cat"] == "pull") by_object[x["args"]["object"]] = x;
  }
  ASSERT_EQ(by_object.size(), 3u);
  const json& first = by_object["job-t.abc.1"];
  EXPECT_EQ(ProcessOf(trace, first), "node-2");
  EXPECT_EQ(TrackOf(trace, first), "transfers");
  EXPECT_EQ(first["name"], "pull 3.0 MiB from node-1");
  EXPECT_EQ(first["args"]["bytes"], 3 << 20);
  EXPECT_EQ(first["args"]["from"], "node-1");
  EXPECT_EQ(first["dur"], 50'000);
  EXPECT_EQ(TrackOf(trace, by_object["job-t.abc.2"]), "transfers 2");
  EXPECT_EQ(TrackOf(trace, by_object["job-t.abc.3"]), "transfers");
}

TEST(ChromeTraceTest, CollectivesGoOnTheirRanksTrackWithTheirSize) {
  JobTimeline t;
  TimelineEvent op = Span(TimelineEventKind::kCollective, 40, 5, "node-1");
  op.ranks = {1};
  op.name = "allreduce";
  op.bytes = 4 << 20;
  op.detail = "group 'default' of 2, float32 sum";
  t.events = {Event(TimelineEventKind::kSubmitted, 0),
              Event(TimelineEventKind::kPlaced, 5, "node-1", {0, 1}),
              Event(TimelineEventKind::kRanksStarted, 20, "node-1", {0, 1}), op,
              Exit(100, "node-1", 0, 0), Exit(100, "node-1", 1, 0)};
  const json trace = json::parse(ChromeTraceJson("job-c", t, kT0 + absl::Milliseconds(200)));
  std::map<std::string, json> spans;
  for (const auto& x : Phase(trace, "X")) spans[x["name"]] = x;
  ASSERT_TRUE(spans.count("allreduce 4.0 MiB"));
  const json& x = spans["allreduce 4.0 MiB"];
  EXPECT_EQ(x["args"]["bytes"], 4 << 20);
  EXPECT_EQ(x["tid"], spans["rank 1 gen 0"]["tid"]);  // inside the rank's span
  EXPECT_EQ(x["pid"], spans["rank 1 gen 0"]["pid"]);
  EXPECT_EQ(x["args"]["detail"], "group 'default' of 2, float32 sum");
}

}  // namespace
}  // namespace drover::cli
