// Dashboard: the scheduler's web dashboard, served by its HttpServer (the same server
// and port as /metrics). One page of plain HTML, CSS and JavaScript compiled into the
// binary (dashboard_assets.h) that polls a small JSON API once a second:
//
//   GET /login?code=C     exchanges a one-time code (`drover dashboard`) for a session
//                         cookie (HttpOnly, SameSite=Strict) and redirects to /. The only
//                         route that needs neither the cookie nor the token.
//   GET /, /app.js, /app.css   the page
//   GET /api/cluster      nodes (state, CPUs, memory, GPUs used and free, object store
//                         use, warnings), job counts, pending reasons, lease counts
//   GET /api/jobs?state=S&q=TEXT&limit=N   job summaries, newest first
//   GET /api/job?id=J     one job's record and its timeline (job_timeline.h)
//   GET /api/logs?id=J&node=N&o=RANK.STREAM.OFFSET,...   new output of the job on one
//                         node since those offsets (a tail of 16 KiB for streams not
//                         listed), read from the node's agent (StreamLogs)
//   GET /api/tasks        leases, actors by state, recent failures with their causes
//
// Every route but /login needs the session cookie or the cluster token (HttpServer).
// Reads only: nothing on the dashboard changes the cluster. Handlers take the core's
// and the lease manager's locks only to copy (ListJobs, ClusterStatus, counts).
#ifndef DROVER_SCHEDULER_DASHBOARD_H_
#define DROVER_SCHEDULER_DASHBOARD_H_

#include <memory>
#include <string>

#include "common/http_server.h"
#include "scheduler/dashboard_auth.h"
#include "scheduler/job_timeline.h"
#include "scheduler/lease_manager.h"
#include "scheduler/scheduler_core.h"

namespace drover {

// The session cookie's name.
inline constexpr char kDashboardCookie[] = "drover_session";

struct DashboardSources {
  SchedulerCore* core = nullptr;
  LeaseManager* leases = nullptr;  // may be null
  JobTimeline* timeline = nullptr;
  DashboardAuth* auth = nullptr;
  // For the agents' StreamLogs.
  std::string token;
};

// Adds the dashboard's routes to `server` and lets its session cookie in. Everything
// in `sources` must outlive the server.
void ServeDashboard(HttpServer* server, DashboardSources sources);

// The value of cookie `name` in a Cookie header ("a=1; drover_session=x"), or "".
std::string CookieValue(const std::string& header, const std::string& name);

}  // namespace drover

#endif  // DROVER_SCHEDULER_DASHBOARD_H_
