// The live status line of `drover run` and `drover up` on a terminal: what a job is
// doing (pending and why, starting N/M ranks, running for how long) and how many nodes
// have registered. Drawn through a ProgressLine (common/progress_line.h), so nothing of
// it reaches a pipe or a log file: the CLI passes a null line there and all of this
// does nothing.
#ifndef DROVER_CLI_STATUS_LINE_H_
#define DROVER_CLI_STATUS_LINE_H_

#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/progress_line.h"
#include "drover/types.h"

namespace drover::cli {

// One line for `job` at `now`, "" once the job has ended:
//   "drover: job-3 pending 12s: needs 4 GPUs on one node; the most free on any node is 2"
//   "drover: job-3 starting 2/4 ranks on 2 nodes"
//   "drover: job-3 running 1m05s: 4/4 ranks alive on 2 nodes"
//   "drover: job-3 restarting: <reason>" (the gang is being stopped to start again)
std::string JobPhase(const JobInfo& job, absl::Time now);

// "drover: 1 of 2 nodes registered (3s)".
std::string NodesComingUp(int registered, int wanted, absl::Duration waited);

// Shows the phase of the latest job record on `line` and redraws it every second, so
// that the times move between records. Ownership: borrows `line` (may be null: then
// it does nothing), which must outlive it. Thread-safe.
class JobStatusLine {
 public:
  explicit JobStatusLine(ProgressLine* line, Clock* clock = Clock::Real());
  // Stops redrawing and erases the line.
  ~JobStatusLine();
  JobStatusLine(const JobStatusLine&) = delete;
  JobStatusLine& operator=(const JobStatusLine&) = delete;

  // A new record of the job: drawn at once.
  void Update(const JobInfo& job);

 private:
  // Redraws at `next`, then every second.
  void TickLoop(absl::Time next);

  ProgressLine* const line_;
  Clock* const clock_;
  absl::Mutex mu_;
  absl::CondVar stop_cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool have_job_ ABSL_GUARDED_BY(mu_) = false;
  JobInfo job_ ABSL_GUARDED_BY(mu_);
  std::thread ticker_;  // only with a line
};

}  // namespace drover::cli

#endif  // DROVER_CLI_STATUS_LINE_H_
