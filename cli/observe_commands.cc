// drover dashboard | timeline
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cli/chrome_trace.h"
#include "cli/commands.h"
#include "common/files.h"

namespace drover::cli {
namespace {

int CmdDashboard(const GlobalOptions& g) {
  auto client = Connect(g);
  if (!client.ok()) return Fail(client.status());
  auto login = (*client)->CreateDashboardLogin();
  if (!login.ok()) return Fail(login.status());
  std::cout << login->url << "\n";
  std::cerr << "drover: open this link once within "
            << absl::FormatDuration(absl::Trunc(login->expires - absl::Now(), absl::Seconds(1)))
            << "; it logs this browser in (a cookie) and stops working after that\n";
  return 0;
}

int CmdTimeline(const GlobalOptions& g, const std::string& job_id, const std::string& out) {
  auto client = Connect(g);
  if (!client.ok()) return Fail(client.status());
  auto timeline = (*client)->Timeline(job_id);
  if (!timeline.ok()) return Fail(timeline.status());
  const std::string json = ChromeTraceJson(job_id, *timeline, absl::Now());
  if (out.empty() || out == "-") {
    std::cout << json << "\n";
    return 0;
  }
  if (absl::Status s = WriteFileAtomic(out, json + "\n", 0644); !s.ok()) return Fail(s);
  std::cerr << "drover: wrote " << timeline->events.size() << " events of " << job_id << " to "
            << out << (timeline->dropped > 0
                           ? absl::StrCat(" (", timeline->dropped, " older ones were not kept)")
                           : "")
            << "; open it in https://ui.perfetto.dev or chrome://tracing\n";
  return 0;
}

}  // namespace

void AddObserveCommands(CLI::App& app, GlobalOptions& g, int* rc) {
  auto* dashboard = app.add_subcommand(
      "dashboard", "print a one-time login link to the cluster's web dashboard");
  dashboard->callback([&g, rc] { *rc = CmdDashboard(g); });

  static std::string job_id, out;
  auto* timeline = app.add_subcommand(
      "timeline", "write a job's timeline in Chrome trace format (Perfetto, chrome://tracing)");
  timeline->add_option("job", job_id, "job id")->required();
  timeline->add_option("-o,--output", out, "file to write (default: standard output)");
  timeline->callback([&g, rc] { *rc = CmdTimeline(g, job_id, out); });
}

}  // namespace drover::cli
