// PullProgress: the progress bar of a long pull, shown while drover::Objects::Get waits
// for this node's agent to fetch an object from another node:
//
//   drover: pulling weights-7 from node-2 [=======>          ]  41%  1.1 GiB/2.6 GiB  412.0 MiB/s  ETA 3s
//
// It asks the agent how far the pull has come (ObjectTransfer.GetFetchProgress) at most
// every `poll_every`, and only once the wait has lasted `show_after`: a Get that ends
// sooner makes no call and draws nothing. An agent without that rpc (UNIMPLEMENTED)
// is not asked again. Drawn on a ProgressLine (common/progress_line.h), which exists
// only when stderr is a terminal: worker processes, whose output goes to log files,
// never show it.
//
// Ownership: borrows `line` and `clock`, which must outlive it. Thread safety: used by
// the one thread of a Get.
#ifndef DROVER_SDK_INTERNAL_PULL_PROGRESS_H_
#define DROVER_SDK_INTERNAL_PULL_PROGRESS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/progress_line.h"

namespace drover::internal {

struct PullProgressOptions {
  // A pull that ends sooner is never shown.
  absl::Duration show_after = absl::Seconds(1);
  // How often the agent is asked (and the bar redrawn) after that.
  absl::Duration poll_every = absl::Milliseconds(250);
};

// What the agent says about a pull (proto GetFetchProgressReply).
struct FetchProgress {
  bool pulling = false;
  int64_t received_bytes = 0;
  int64_t total_bytes = 0;
  std::string source_node;
};

class PullProgress {
 public:
  using Poll = std::function<absl::StatusOr<FetchProgress>()>;

  PullProgress(ProgressLine* line, Clock* clock, PullProgressOptions options,
               std::string object_id, Poll poll);
  // Erases the bar if it drew one.
  ~PullProgress();
  PullProgress(const PullProgress&) = delete;
  PullProgress& operator=(const PullProgress&) = delete;

  // Called from the Get's wait loop while the fetch runs: asks and redraws when due.
  void Tick();

 private:
  ProgressLine* const line_;
  Clock* const clock_;
  const PullProgressOptions options_;
  const std::string object_id_;
  const Poll poll_;
  absl::Time next_poll_;
  bool unsupported_ = false;  // the agent has no GetFetchProgress
  bool drawn_ = false;
  std::string source_;  // the meter's holder: a new one restarts it
  std::unique_ptr<ProgressMeter> meter_;
};

}  // namespace drover::internal

#endif  // DROVER_SDK_INTERNAL_PULL_PROGRESS_H_
