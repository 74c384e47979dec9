// Observability on a live 2-node cluster (real scheduler, agents and object stores):
// /metrics of the scheduler and both agents scraped over HTTP as jobs run and end, the
// timeline of a real job written by `drover timeline` as a Chrome trace, the
// dashboard's one-time login and its JSON API, and `drover status` naming where to
// scrape. The browser test of the dashboard's pages is tests/dashboard/.
#include <sys/stat.h>

#include <fstream>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/files.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "tests/util/prometheus_text.h"
#include "tests/util/test_cluster.h"

namespace drover::testing {
namespace {

using nlohmann::json;

class ObserveTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto c = TestCluster::Start(TestClusterOptions{});
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = c->release();
    auto token = ReadTokenFile(cluster_->token_file());
    ASSERT_TRUE(token.ok()) << token.status();
    token_ = new std::string(*token);
  }
  static void TearDownTestSuite() {
    delete cluster_;
    delete token_;
  }

  void SetUp() override {
    ASSERT_NE(cluster_, nullptr);
    auto status = cluster_->client().Status();
    ASSERT_TRUE(status.ok()) << status.status();
    scheduler_metrics_ = status->metrics_address;
    ASSERT_FALSE(scheduler_metrics_.empty());
    ASSERT_EQ(status->nodes.size(), 2u);
    for (const auto& n : status->nodes) {
      ASSERT_FALSE(n.metrics_address.empty()) << n.node_id;
      agents_[n.node_id] = n.metrics_address;
    }
  }

  Exposition MustScrape(const std::string& address) {
    auto e = Scrape(address, *token_);
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? *e : Exposition{};
  }
  // Sum over both agents.
  double AgentsSum(const std::string& name, const std::map<std::string, std::string>& labels = {}) {
    double sum = 0;
    for (const auto& [node, address] : agents_) sum += std::max(0.0, MustScrape(address).Sum(name, labels));
    return sum;
  }

  // A 2-rank job (one per node): two ranks that wait for `go` (rank 1 for `go`-1 when `rank1_gated_apart`), then
  // exit: rank 1 with `exit_code_of_rank1`, rank 0 with 0.
  JobInfo StartGatedJob(const std::string& go, int exit_code_of_rank1 = 0, bool rank1_gated_apart = false) {
    JobSpec spec = TestCluster::JobOf(
        {"sh", "-c",
         absl::StrCat("g=", go, "; ", rank1_gated_apart ? absl::StrCat("[ \"$RANK\" = 1 ] && g=", go, "-1; ") : "",
                      "while [ ! -e $g ]; do sleep 0.02; done; echo out-$RANK; ",
                      "[ \"$RANK\" = 1 ] && exit ", exit_code_of_rank1, "; exit 0")},
        2, 1);
    auto job = cluster_->client().Submit(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : JobInfo{};
  }
  JobInfo Finish(const JobInfo& job, const std::string& go) {
    std::ofstream(go) << "go";
    auto done = cluster_->client().WaitJob(job.job_id, absl::Seconds(60));
    EXPECT_TRUE(done.ok()) << done.status() << cluster_->DaemonLogs();
    return done.ok() ? *done : JobInfo{};
  }
  std::string GoFile(const std::string& name) { return absl::StrCat(cluster_->dir(), "/", name); }

  static TestCluster* cluster_;
  static std::string* token_;
  std::string scheduler_metrics_;
  std::map<std::string, std::string> agents_;  // node id -> metrics address
};

TestCluster* ObserveTest::cluster_ = nullptr;
std::string* ObserveTest::token_ = nullptr;

TEST_F(ObserveTest, MetricsRefuseRequestsWithoutTheToken) {
  for (const std::string& address : {scheduler_metrics_, agents_.begin()->second}) {
    httplib::Client client("http://" + address);
    auto res = client.Get("/metrics");
    ASSERT_TRUE(res) << address;
    EXPECT_EQ(res->status, 401);
    EXPECT_FALSE(absl::StrContains(res->body, "drover_")) << res->body;
    res = client.Get("/metrics", {{"Authorization", "Bearer not-the-token"}});
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 401);
  }
}

TEST_F(ObserveTest, SchedulerAndAgentMetricsMoveAsJobsRunAndEnd) {
  const Exposition before = MustScrape(scheduler_metrics_);
  EXPECT_EQ(before.types.at("drover_placement_latency_seconds"), "histogram");
  EXPECT_EQ(before.types.at("drover_jobs_submitted_total"), "counter");
  EXPECT_EQ(before.Sum("drover_nodes", {{"state", "ALIVE"}}), 2);
  EXPECT_EQ(before.Sum("drover_node_cpus"), 16);  // 8 per node
  const double submitted0 = before.Sum("drover_jobs_submitted_total");
  const double placed0 = before.Sum("drover_placement_latency_seconds_count");
  const double ok_exits0 = before.Sum("drover_rank_exits_total", {{"cause", "success"}});
  const double bad_exits0 = before.Sum("drover_rank_exits_total", {{"cause", "exit_code"}});
  const double failed0 = before.Sum("drover_jobs_ended_total", {{"state", "FAILED"}});
  const double started_here0 = AgentsSum("drover_agent_processes_started_total", {{"kind", "rank"}});
  const double agent_bad0 = AgentsSum("drover_agent_process_exits_total",
                                      {{"kind", "rank"}, {"cause", "exit_code"}});

  const std::string go = GoFile("go-metrics");
  // Rank 0 ends first (and is counted) before rank 1 fails: were they let go together,
  // rank 1's failure could stop rank 0 before its own exit 0 (seen under load).
  JobInfo job = StartGatedJob(go, /*exit_code_of_rank1=*/3, /*rank1_gated_apart=*/true);
  // While it runs: one more job RUNNING, one CPU taken on each node, ranks started.
  Exposition during;
  ASSERT_TRUE(WaitFor([&] {
    during = MustScrape(scheduler_metrics_);
    return during.Sum("drover_jobs", {{"state", "RUNNING"}}) >= 1 &&
           during.Sum("drover_ranks_started_total") >= 2;
  })) << cluster_->DaemonLogs();
  EXPECT_EQ(during.Sum("drover_jobs_submitted_total"), submitted0 + 1);
  EXPECT_EQ(during.Sum("drover_placement_latency_seconds_count"), placed0 + 1);
  EXPECT_EQ(during.Sum("drover_node_cpus_free"), 14);
  EXPECT_GE(during.Sum("drover_rpcs_total", {{"method", "SubmitJob"}, {"code", "OK"}}), 1);
  EXPECT_GE(during.Sum("drover_rpc_duration_seconds_count", {{"service", "Scheduler"}}), 1);
  EXPECT_EQ(AgentsSum("drover_agent_processes_started_total", {{"kind", "rank"}}),
            started_here0 + 2);

  std::ofstream(go) << "go";
  ASSERT_TRUE(WaitFor([&] {
    return MustScrape(scheduler_metrics_).Sum("drover_rank_exits_total", {{"cause", "success"}}) ==
           ok_exits0 + 1;
  })) << cluster_->DaemonLogs();
  const JobInfo done = Finish(job, go + "-1");
  EXPECT_EQ(done.state, JobState::kFailed) << done.reason;
  Exposition after;
  ASSERT_TRUE(WaitFor([&] {
    after = MustScrape(scheduler_metrics_);
    return after.Sum("drover_jobs_ended_total", {{"state", "FAILED"}}) == failed0 + 1;
  }));
  EXPECT_EQ(after.Sum("drover_rank_exits_total", {{"cause", "exit_code"}}), bad_exits0 + 1);
  EXPECT_EQ(after.Sum("drover_rank_exits_total", {{"cause", "success"}}), ok_exits0 + 1);
  EXPECT_EQ(after.Sum("drover_node_cpus_free"), 16);
  EXPECT_EQ(after.Sum("drover_jobs", {{"state", "RUNNING"}}), 0);
  EXPECT_EQ(AgentsSum("drover_agent_process_exits_total", {{"kind", "rank"}, {"cause", "exit_code"}}),
            agent_bad0 + 1);
  for (const auto& [node, address] : agents_) {
    const Exposition a = MustScrape(address);
    EXPECT_EQ(a.Sum("drover_agent_cpus", {{"node", node}}), 8) << node;
    EXPECT_EQ(a.Sum("drover_agent_gpus", {{"node", node}}), 0) << node;
    EXPECT_EQ(a.Sum("drover_object_store_capacity_bytes", {{"node", node}}), 256 << 20) << node;
    EXPECT_EQ(a.Sum("drover_object_store_up", {{"node", node}}), 1) << node;
  }
}

TEST_F(ObserveTest, AgentsCountObjectPullsAndTheSchedulerSeesStoreUse) {
  const double pulls0 = AgentsSum("drover_object_pulls_total", {{"result", "succeeded"}});
  const double pulled0 = AgentsSum("drover_object_pulled_bytes_total");
  const double served0 = AgentsSum("drover_object_served_bytes_total");
  std::string out, err;
  const int rc = cluster_->RunCli({"run", "--nproc", "2", "--nodes", "2", "--",
                                   Runfile("tests/object_worker"), "--id", "observe-8mib", "--mib", "8"},
                                  &out, &err);
  ASSERT_EQ(rc, 0) << out << err << cluster_->DaemonLogs();
  // The tensor and its checksum: two pulls.
  EXPECT_EQ(AgentsSum("drover_object_pulls_total", {{"result", "succeeded"}}), pulls0 + 2);
  EXPECT_GE(AgentsSum("drover_object_pulled_bytes_total") - pulled0, 8 << 20);
  EXPECT_GE(AgentsSum("drover_object_served_bytes_total") - served0, 8 << 20);
  EXPECT_GE(AgentsSum("drover_object_store_used_bytes"), 2 * (8 << 20));
  // The heartbeats carry the store's use to the scheduler (the dashboard shows it).
  EXPECT_TRUE(WaitFor([&] {
    auto s = cluster_->client().Status();
    if (!s.ok()) return false;
    for (const auto& n : s->nodes) {
      if (!n.object_store || n.object_store->used_bytes < (8 << 20) ||
          n.object_store->capacity_bytes != (256 << 20)) {
        return false;
      }
    }
    return true;
  }));
}

TEST_F(ObserveTest, TimelineOfARealJobIsAChromeTraceWithATrackPerRankAndNode) {
  JobSpec spec = TestCluster::JobOf({"sh", "-c", "[ \"$RANK\" = 3 ] && exit 5; exit 0"}, 4, 2);
  spec.max_restarts = 1;
  auto done = cluster_->RunJob(spec, absl::Seconds(60));
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_EQ(done->state, JobState::kFailed);
  ASSERT_EQ(done->restart_count, 1);
  const std::string path = absl::StrCat(cluster_->dir(), "/trace.json");
  std::string out, err;
  ASSERT_EQ(cluster_->RunCli({"timeline", done->job_id, "-o", path}, &out, &err), 0) << err;
  EXPECT_TRUE(absl::StrContains(err, "perfetto")) << err;
  auto text = ReadFile(path);
  ASSERT_TRUE(text.ok()) << text.status();
  const json trace = json::parse(*text, nullptr, false);
  ASSERT_FALSE(trace.is_discarded()) << *text;
  ASSERT_TRUE(trace["traceEvents"].is_array());
  std::map<int, std::string> processes;
  std::map<std::pair<int, int>, std::string> threads;
  std::map<std::string, int> spans;  // name -> count
  std::set<std::string> instants;
  for (const auto& e : trace["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("name")) << e.dump();
    const std::string ph = e["ph"];
    if (ph == "M" && e["name"] == "process_name") processes[e["pid"]] = e["args"]["name"];
    if (ph == "M" && e["name"] == "thread_name") {
      threads[{e["pid"].get<int>(), e["tid"].get<int>()}] = e["args"]["name"];
    }
    if (ph == "X") {
      ASSERT_TRUE(e["ts"].is_number() && e["dur"].is_number()) << e.dump();
      ++spans[e["name"]];
    }
    if (ph == "i") instants.insert(e["name"]);
  }
  // The scheduler and both nodes; on the nodes one track per rank, 2 ranks each.
  std::set<std::string> process_names;
  for (const auto& [pid, name] : processes) process_names.insert(name);
  EXPECT_EQ(process_names, (std::set<std::string>{"scheduler", cluster_->agent_node_id(0),
                                                  cluster_->agent_node_id(1)}));
  std::set<std::string> rank_tracks;
  for (const auto& [key, name] : threads) {
    if (absl::StartsWith(name, "rank ")) rank_tracks.insert(absl::StrCat(processes[key.first], "/", name));
  }
  EXPECT_EQ(rank_tracks.size(), 4u) << ::testing::PrintToString(rank_tracks);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(spans[absl::StrCat("rank ", r, " gen 0")], 1) << r;
    EXPECT_EQ(spans[absl::StrCat("rank ", r, " gen 1")], 1) << r;
  }
  EXPECT_EQ(spans["pending (generation 0)"], 1);
  EXPECT_EQ(spans["pending (generation 1)"], 1);
  for (const char* name : {"submitted", "restarting", "requeued", "ended"}) {
    EXPECT_TRUE(instants.count(name)) << name;
  }
  // Unknown jobs are a clear error.
  EXPECT_NE(cluster_->RunCli({"timeline", "job-nope-1"}, &out, &err), 0);
  EXPECT_TRUE(absl::StrContains(err, "job-nope-1")) << err;
}

TEST_F(ObserveTest, DashboardLoginIsOneTimeAndTheApiNeedsTheCookie) {
  std::string out, err;
  ASSERT_EQ(cluster_->RunCli({"dashboard"}, &out, &err), 0) << err;
  const std::string url(absl::StripTrailingAsciiWhitespace(out));
  const std::string prefix = "http://" + scheduler_metrics_ + "/login?code=";
  ASSERT_TRUE(absl::StartsWith(url, prefix)) << url;
  EXPECT_FALSE(absl::StrContains(url, *token_)) << "the token must not be in the link";
  httplib::Client client("http://" + scheduler_metrics_);
  // Nothing but /login without the cookie.
  for (const char* path : {"/", "/app.js", "/api/cluster", "/api/jobs", "/api/tasks"}) {
    auto res = client.Get(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 401) << path;
  }
  auto login = client.Get(url.substr(("http://" + scheduler_metrics_).size()));
  ASSERT_TRUE(login);
  EXPECT_EQ(login->status, 303);
  EXPECT_EQ(login->get_header_value("Location"), "/");
  const std::string set_cookie = login->get_header_value("Set-Cookie");
  EXPECT_TRUE(absl::StrContains(set_cookie, "HttpOnly")) << set_cookie;
  EXPECT_TRUE(absl::StrContains(set_cookie, "SameSite=Strict")) << set_cookie;
  const std::string cookie = set_cookie.substr(0, set_cookie.find(';'));
  // The code works once.
  auto again = client.Get(url.substr(("http://" + scheduler_metrics_).size()));
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 401);

  const httplib::Headers with_cookie = {{"Cookie", cookie}};
  auto page = client.Get("/", with_cookie);
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_TRUE(absl::StrContains(page->body, "<script src=\"/app.js\">")) << page->body;
  auto cluster = client.Get("/api/cluster", with_cookie);
  ASSERT_TRUE(cluster);
  ASSERT_EQ(cluster->status, 200);
  const json c = json::parse(cluster->body);
  ASSERT_EQ(c["nodes"].size(), 2u);
  EXPECT_EQ(c["nodes"][0]["state"], "ALIVE");
  EXPECT_EQ(c["nodes"][0]["cpus"]["total"], 8);

  const std::string go = GoFile("go-dashboard");
  const JobInfo job = StartGatedJob(go);
  ASSERT_TRUE(WaitFor([&] {
    auto res = client.Get(("/api/job?id=" + job.job_id).c_str(), with_cookie);
    return res && res->status == 200 && json::parse(res->body)["job"]["state"] == "RUNNING";
  }));
  auto jobs = client.Get("/api/jobs?state=RUNNING", with_cookie);
  ASSERT_TRUE(jobs);
  const json listed = json::parse(jobs->body);
  ASSERT_GE(listed["jobs"].size(), 1u);
  EXPECT_EQ(listed["jobs"][0]["id"], job.job_id);
  Finish(job, go);
  // The log tail of a node, read from its agent; a second read from the returned
  // offsets brings nothing new.
  const std::string node = cluster_->agent_node_id(0);
  json logs;
  ASSERT_TRUE(WaitFor([&] {
    auto res = client.Get(("/api/logs?id=" + job.job_id + "&node=" + node).c_str(), with_cookie);
    if (!res || res->status != 200) return false;
    logs = json::parse(res->body);
    return !logs["chunks"].empty();
  })) << cluster_->DaemonLogs();
  std::string offsets, text;
  for (const auto& ch : logs["chunks"]) {
    text += ch["data"].get<std::string>();
    absl::StrAppend(&offsets, offsets.empty() ? "" : ",", ch["rank"].get<int>(), ".",
                    ch["stream"].get<int>(), ".", ch["end"].get<int64_t>());
  }
  EXPECT_TRUE(absl::StrContains(text, "out-")) << text;
  auto more = client.Get(("/api/logs?id=" + job.job_id + "&node=" + node + "&o=" + offsets).c_str(),
                         with_cookie);
  ASSERT_TRUE(more);
  EXPECT_TRUE(json::parse(more->body)["chunks"].empty()) << more->body;
  // Bad input gets a clear answer, not a crash.
  auto bad = client.Get("/api/logs?id=job-nope-1&node=x&o=1.2.x,,9", with_cookie);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 404);
  EXPECT_TRUE(absl::StrContains(bad->body, "job-nope-1")) << bad->body;
}

TEST_F(ObserveTest, EveryExposedMetricIsDocumentedAndTheGrafanaDashboardUsesOnlyThose) {
  auto doc = ReadFile(Runfile("docs/metrics.md"));
  ASSERT_TRUE(doc.ok()) << doc.status();
  std::set<std::string> families;
  for (const std::string& address : {scheduler_metrics_, agents_.begin()->second}) {
    for (const auto& [family, type] : MustScrape(address).types) families.insert(family);
  }
  EXPECT_GT(families.size(), 40u);
  for (const std::string& f : families) {
    EXPECT_TRUE(absl::StrContains(*doc, "| `" + f + "` |")) << f << " is not in docs/metrics.md";
  }
  auto grafana = ReadFile(Runfile("deploy/grafana/drover.json"));
  ASSERT_TRUE(grafana.ok()) << grafana.status();
  const json dashboard = json::parse(*grafana);
  int exprs = 0;
  for (const auto& panel : dashboard["panels"]) {
    for (const auto& target : panel["targets"]) {
      const std::string expr = target["expr"];
      ++exprs;
      for (size_t at = expr.find("drover_"); at != std::string::npos; at = expr.find("drover_", at + 1)) {
        size_t end = at;
        while (end < expr.size() && (std::isalnum(static_cast<unsigned char>(expr[end])) || expr[end] == '_')) ++end;
        std::string name = expr.substr(at, end - at);
        for (const char* suffix : {"_bucket", "_sum", "_count"}) {
          if (absl::EndsWith(name, suffix) && !families.count(name)) {
            name = name.substr(0, name.size() - std::string(suffix).size());
          }
        }
        EXPECT_TRUE(families.count(name)) << name << " in " << panel["title"];
        at = end;
      }
    }
  }
  EXPECT_GE(exprs, 16);
}

TEST_F(ObserveTest, StatusNamesWhereToScrapeEveryDaemon) {
  std::string out, err;
  ASSERT_EQ(cluster_->RunCli({"status"}, &out, &err), 0) << err;
  EXPECT_TRUE(absl::StrContains(out, "http://" + scheduler_metrics_ + "/metrics")) << out;
  for (const auto& [node, address] : agents_) {
    EXPECT_TRUE(absl::StrContains(out, "http://" + address + "/metrics")) << out;
  }
  ASSERT_EQ(cluster_->RunCli({"status", "--json"}, &out, &err), 0) << err;
  const json s = json::parse(out);
  EXPECT_EQ(s.value("metrics_address", ""), scheduler_metrics_) << out;
}

}  // namespace
}  // namespace drover::testing
