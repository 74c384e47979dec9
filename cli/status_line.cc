#include "cli/status_line.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "common/human_format.h"

namespace drover::cli {
namespace {

constexpr absl::Duration kRedrawEvery = absl::Seconds(1);

std::string NodeCount(const JobInfo& job) {
  std::set<std::string> nodes;
  for (const auto& p : job.placement) nodes.insert(p.node_id);
  return absl::StrCat(nodes.size(), nodes.size() == 1 ? " node" : " nodes");
}

}  // namespace

std::string JobPhase(const JobInfo& job, absl::Time now) {
  const std::string who = absl::StrCat("drover: ", job.job_id);
  switch (job.state) {
    case JobState::kPending:
      return absl::StrCat(who, " pending ", HumanDuration(now - job.submit_time), ": ",
                          job.reason);
    case JobState::kRunning:
      break;
    default:
      return "";
  }
  if (job.restarting) return absl::StrCat(who, " restarting: ", job.reason);
  const int nproc = job.spec.nproc;
  if (job.started_processes < nproc) {
    return absl::StrCat(who, " starting ", job.started_processes, "/", nproc, " ranks on ",
                        NodeCount(job));
  }
  const absl::Time since = job.generation_start.value_or(job.start_time.value_or(now));
  return absl::StrCat(who, " running ", HumanDuration(now - since), ": ", job.live_processes, "/",
                      nproc, " ranks alive on ", NodeCount(job),
                      job.restart_count > 0
                          ? absl::StrCat(" (restart ", job.restart_count, " of ",
                                         job.spec.max_restarts, ")")
                          : "");
}

std::string NodesComingUp(int registered, int wanted, absl::Duration waited) {
  return absl::StrCat("drover: ", registered, " of ", wanted, wanted == 1 ? " node" : " nodes",
                      " registered (", HumanDuration(waited), ")");
}

JobStatusLine::JobStatusLine(ProgressLine* line, Clock* clock) : line_(line), clock_(clock) {
  // The first redraw is due a second from now, not from when the thread gets to run.
  const absl::Time first = clock_->Now() + kRedrawEvery;
  if (line_ != nullptr) ticker_ = std::thread([this, first] { TickLoop(first); });
}

JobStatusLine::~JobStatusLine() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  stop_cv_.SignalAll();
  if (ticker_.joinable()) ticker_.join();
  if (line_ != nullptr) line_->Clear();
}

void JobStatusLine::Update(const JobInfo& job) {
  if (line_ == nullptr) return;
  absl::MutexLock lock(&mu_);
  job_ = job;
  have_job_ = true;
  line_->Show(JobPhase(job_, clock_->Now()));
}

void JobStatusLine::TickLoop(absl::Time next) {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    if (!clock_->WaitWithDeadline(&stop_cv_, &mu_, next)) continue;  // woken: look again
    next = clock_->Now() + kRedrawEvery;
    if (have_job_) line_->Update(JobPhase(job_, clock_->Now()));
  }
}

}  // namespace drover::cli
