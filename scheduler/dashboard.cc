#include "scheduler/dashboard.h"

#include <algorithm>
#include <map>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "common/rpc.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"
#include "proto/node_agent.grpc.pb.h"
#include "scheduler/dashboard_assets.h"

namespace drover {
namespace {

using nlohmann::json;

constexpr int64_t kLogTailBytes = 16 << 10;
constexpr size_t kMaxListed = 500;  // leases, actors on the tasks page
// Reported timeline events (tasks, pulls, collectives) a job page gets: the newest.
constexpr int64_t kMaxReportedShown = 2000;
constexpr auto kLogReadTimeout = std::chrono::milliseconds(2000);

// A message as proto3 JSON (camelCase names, every field), parsed for embedding.
json ProtoJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return json::parse(out, nullptr, /*allow_exceptions=*/false);
}

void SendJson(httplib::Response& res, const json& body) {
  res.set_header("Cache-Control", "no-store");
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace),
                  "application/json; charset=utf-8");
}

void SendError(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  SendJson(res, json{{"error", message}});
}

json NodeJson(const proto::NodeInfo& n, absl::Time now) {
  json node = {
      {"id", n.node_id()},
      {"state", proto::NodeState_Name(n.state())},
      {"ip", n.node_ip()},
      {"hostname", n.hostname()},
      {"agentAddress", n.agent_address()},
      {"metricsAddress", n.metrics_address()},
      {"reason", n.reason()},
      {"warnings", std::vector<std::string>(n.warnings().begin(), n.warnings().end())},
      {"heartbeatAgoMs", absl::ToInt64Milliseconds(now - absl::FromUnixMillis(n.last_heartbeat_ms()))},
      {"cpus", {{"total", n.total().cpus()}, {"free", n.free().cpus()}}},
      {"memory", {{"total", n.total().memory_bytes()}, {"free", n.free().memory_bytes()}}},
      {"gpus",
       {{"total", n.total().gpus()},
        {"free", n.free().gpus()},
        {"names", std::vector<std::string>(n.gpu_names().begin(), n.gpu_names().end())}}},
      {"store", nullptr},
  };
  if (n.has_object_store()) {
    const auto& s = n.object_store();
    node["store"] = {{"capacity", s.capacity_bytes()},  {"used", s.used_bytes()},
                     {"objects", s.objects()},          {"spilledBytes", s.spilled_bytes()},
                     {"spilledObjects", s.spilled_objects()}, {"evictions", s.evictions()},
                     {"restarts", s.restarts()}};
  }
  return node;
}

json JobSummary(const proto::JobInfo& j) {
  return {{"id", j.job_id()},
          {"name", j.spec().name()},
          {"state", proto::JobState_Name(j.state())},
          {"reason", j.reason()},
          {"submitMs", j.submit_time_ms()},
          {"startMs", j.start_time_ms()},
          {"endMs", j.end_time_ms()},
          {"nproc", j.spec().nproc()},
          {"restarts", j.restart_count()},
          {"maxRestarts", j.spec().max_restarts()},
          {"exitCode", j.exit_code()},
          {"live", j.live_processes()},
          {"driver", j.driver()},
          {"nodes", std::vector<std::string>(j.nodes_used().begin(), j.nodes_used().end())}};
}

// Reads job output from agents (StreamLogs without follow), one cached channel per
// agent. Thread-safe.
class AgentLogReader {
 public:
  explicit AgentLogReader(std::string token) : token_(std::move(token)) {}

  json Read(const std::string& agent, const std::string& job_id, const std::string& offsets) {
    proto::StreamLogsRequest req;
    req.set_job_id(job_id);
    req.set_tail_bytes(kLogTailBytes);
    // "rank.stream.offset,...": where the page's copy of each stream ends.
    for (absl::string_view item : absl::StrSplit(offsets, ',', absl::SkipEmpty())) {
      std::vector<absl::string_view> f = absl::StrSplit(item, '.');
      proto::LogOffset o;
      int32_t rank = 0, stream = 0;
      int64_t offset = 0;
      if (f.size() != 3 || !absl::SimpleAtoi(f[0], &rank) || !absl::SimpleAtoi(f[1], &stream) ||
          !absl::SimpleAtoi(f[2], &offset)) {
        continue;  // a malformed entry: that stream gets its tail again
      }
      o.set_rank(rank);
      o.set_stream(stream);
      o.set_offset(offset);
      *req.add_offsets() = o;
    }
    grpc::ClientContext ctx;
    PrepareContext(&ctx, token_, kLogReadTimeout);
    auto stream = stubs_.Get(agent)->StreamLogs(&ctx, req);
    json chunks = json::array();
    proto::LogChunk chunk;
    while (stream->Read(&chunk)) {
      chunks.push_back({{"rank", chunk.rank()},
                        {"stream", chunk.stream()},
                        {"offset", chunk.offset()},
                        {"end", chunk.offset() + static_cast<int64_t>(chunk.data().size())},
                        {"data", chunk.data()}});
    }
    grpc::Status s = stream->Finish();
    json out = {{"chunks", chunks}};
    if (!s.ok()) out["error"] = s.error_message();
    return out;
  }

 private:
  const std::string token_;
  StubCache<proto::NodeAgent> stubs_;
};

json ClusterJson(const DashboardSources& s) {
  const proto::GetClusterStatusReply status = s.core->ClusterStatus();
  const absl::Time now = absl::Now();
  json nodes = json::array();
  for (const auto& n : status.nodes()) nodes.push_back(NodeJson(n, now));
  json jobs = json::object();
  for (const auto& [state, count] : status.job_counts()) jobs[state] = count;
  const SchedulerCore::QueueCounts queue = s.core->CountQueue();
  json out = {{"scheduler",
               {{"address", status.address()}, {"stateBackend", status.state_backend()}}},
              {"nodes", nodes},
              {"jobs", jobs},
              {"pending", queue.pending_by_reason},
              {"restarting", queue.restarting},
              {"nowMs", absl::ToUnixMillis(now)}};
  if (s.leases != nullptr) {
    const LeaseManager::Counts c = s.leases->counts();
    out["leases"] = {{"held", c.leases},           {"pendingRequests", c.pending_requests},
                     {"granted", c.leases_granted}, {"ended", c.leases_ended}};
  }
  return out;
}

json JobsJson(const DashboardSources& s, const httplib::Request& req) {
  proto::ListJobsRequest list;
  if (req.has_param("state") && !req.get_param_value("state").empty()) {
    proto::JobState state;
    if (proto::JobState_Parse(req.get_param_value("state"), &state)) list.add_states(state);
  }
  int limit = 200;
  if (req.has_param("limit")) {
    (void)absl::SimpleAtoi(req.get_param_value("limit"), &limit);
    limit = std::clamp(limit, 1, 5000);
  }
  const std::string q = req.has_param("q") ? req.get_param_value("q") : "";
  json jobs = json::array();
  int matched = 0;
  for (const proto::JobInfo& j : s.core->ListJobs(list)) {
    if (!q.empty() && j.job_id().find(q) == std::string::npos &&
        j.spec().name().find(q) == std::string::npos) {
      continue;
    }
    ++matched;
    if (static_cast<int>(jobs.size()) < limit) jobs.push_back(JobSummary(j));
  }
  return {{"jobs", jobs}, {"matched", matched}, {"nowMs", absl::ToUnixMillis(absl::Now())}};
}

bool IsReported(const proto::TimelineEvent& e) {
  return e.kind() == proto::TIMELINE_TASK || e.kind() == proto::TIMELINE_PULL ||
         e.kind() == proto::TIMELINE_COLLECTIVE;
}

// The job's events for its page: all of the scheduler's own, and the newest
// kMaxReportedShown reported ones (a page polled every second stays small; `drover
// timeline` has them all).
json TimelineJson(const std::optional<JobTimeline::Events>& events) {
  json list = json::array();
  int64_t dropped = 0, activity_dropped = 0, omitted = 0;
  if (events) {
    int64_t reported = 0;
    for (const auto& e : events->events) reported += IsReported(e) ? 1 : 0;
    omitted = std::max<int64_t>(0, reported - kMaxReportedShown);
    int64_t skip = omitted;
    for (const auto& e : events->events) {
      if (IsReported(e) && skip > 0) {
        --skip;  // the oldest reported ones
        continue;
      }
      list.push_back(ProtoJson(e));
    }
    dropped = events->dropped;
    activity_dropped = events->activity_dropped;
  }
  return {{"events", list},
          {"dropped", dropped},
          {"activityDropped", activity_dropped},
          {"reportedOmitted", omitted}};
}

json TasksJson(const DashboardSources& s) {
  json out = {{"leases", json::array()}, {"actors", json::array()}, {"failures", json::array()}};
  if (s.leases != nullptr) {
    const LeaseManager::Counts c = s.leases->counts();
    out["counts"] = {{"leases", c.leases},
                     {"pendingRequests", c.pending_requests},
                     {"granted", c.leases_granted},
                     {"ended", c.leases_ended},
                     {"actorsAlive", c.actors_alive},
                     {"actorsPending", c.actors_pending - c.actors_restarting},
                     {"actorsRestarting", c.actors_restarting},
                     {"actorsDead", c.actors_dead}};
    for (const auto& l : s.leases->Leases(kMaxListed)) {
      out["leases"].push_back({{"id", l.lease_id}, {"job", l.job_id}, {"owner", l.owner},
                               {"node", l.node_id}, {"worker", l.worker_id}, {"actor", l.actor_id}});
    }
    for (const auto& a : s.leases->Actors(kMaxListed)) out["actors"].push_back(ProtoJson(a));
  }
  for (const auto& f : s.timeline->RecentFailures()) {
    json e = ProtoJson(f.event);
    e["job"] = f.job_id;
    out["failures"].push_back(std::move(e));
  }
  return out;
}

}  // namespace

std::string CookieValue(const std::string& header, const std::string& name) {
  for (absl::string_view part : absl::StrSplit(header, ';')) {
    part = absl::StripAsciiWhitespace(part);
    if (absl::ConsumePrefix(&part, name) && absl::ConsumePrefix(&part, "=")) {
      return std::string(part);
    }
  }
  return "";
}

void ServeDashboard(HttpServer* server, DashboardSources s) {
  DashboardAuth* auth = s.auth;
  server->SetAuthorizer([auth](const httplib::Request& req) {
    return auth->ValidSession(CookieValue(req.get_header_value("Cookie"), kDashboardCookie));
  });
  server->AddPublicPath("/login");
  httplib::Server& r = server->routes();
  // Over HTTPS (a TLS cluster) the browser sends the session cookie only over HTTPS.
  const bool secure = server->https();
  r.Get("/login", [auth, secure](const httplib::Request& req, httplib::Response& res) {
    std::optional<std::string> session =
        auth->Redeem(req.has_param("code") ? req.get_param_value("code") : "");
    if (!session) {
      res.status = 401;
      res.set_content(
          "This login link was used already or has expired. Run `drover dashboard` for a "
          "new one.\n",
          "text/plain; charset=utf-8");
      return;
    }
    res.set_header("Set-Cookie",
                   absl::StrCat(kDashboardCookie, "=", *session,
                                "; Path=/; HttpOnly; SameSite=Strict; Max-Age=",
                                absl::ToInt64Seconds(auth->options().session_ttl),
                                secure ? "; Secure" : ""));
    res.set_redirect("/", 303);
  });
  for (size_t i = 0; i < kDashboardAssetsCount; ++i) {
    const EmbeddedFile& f = kDashboardAssets[i];
    auto serve = [&f](const httplib::Request&, httplib::Response& res) {
      res.set_header("Cache-Control", "no-cache");
      res.set_content(f.data, f.size, f.content_type);
    };
    r.Get(f.path, serve);
    if (std::string(f.path) == "/index.html") r.Get("/", serve);
  }
  r.Get("/api/cluster", [s](const httplib::Request&, httplib::Response& res) {
    SendJson(res, ClusterJson(s));
  });
  r.Get("/api/jobs", [s](const httplib::Request& req, httplib::Response& res) {
    SendJson(res, JobsJson(s, req));
  });
  r.Get("/api/job", [s](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.get_param_value("id");
    absl::StatusOr<proto::JobInfo> job = s.core->GetJob(id, 0, absl::ZeroDuration());
    if (!job.ok()) return SendError(res, 404, std::string(job.status().message()));
    SendJson(res, {{"job", ProtoJson(*job)}, {"timeline", TimelineJson(s.timeline->Get(id))},
                   {"nowMs", absl::ToUnixMillis(absl::Now())}});
  });
  auto logs = std::make_shared<AgentLogReader>(s.token);
  r.Get("/api/logs", [s, logs](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.get_param_value("id");
    const std::string node = req.get_param_value("node");
    absl::StatusOr<proto::JobInfo> job = s.core->GetJob(id, 0, absl::ZeroDuration());
    if (!job.ok()) return SendError(res, 404, std::string(job.status().message()));
    std::string agent;
    const proto::GetClusterStatusReply status = s.core->ClusterStatus();
    for (const auto& n : status.nodes()) {
      if (n.node_id() == node) agent = n.agent_address();
    }
    const auto& used = job->nodes_used();
    if (agent.empty() || std::find(used.begin(), used.end(), node) == used.end()) {
      return SendError(res, 404, absl::StrCat(id, " ran nothing on node '", node, "'"));
    }
    SendJson(res, logs->Read(agent, id, req.get_param_value("o")));
  });
  r.Get("/api/tasks", [s](const httplib::Request&, httplib::Response& res) {
    SendJson(res, TasksJson(s));
  });
}

}  // namespace drover
