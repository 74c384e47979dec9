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

}  // namespace
}  // namespace drover::cli
