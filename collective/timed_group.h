// Internal to collective/: a Group that tells its job's timeline about every operation
// of the group it wraps (proto/scheduler.proto TIMELINE_COLLECTIVE): the operation,
// the bytes of this rank's buffer, how long it took, the rank, and whether it failed.
// NewGroup wraps a group in it when GroupOptions::timeline is set (a job sets
// DROVER_TIMELINE_COLLECTIVES=1 for its processes).
//
// Events go through one TimelineReporter (common/timeline_reporter.h) per scheduler and
// job in the process, shared by its timed groups: batched on the reporter's thread,
// never waiting on the network inside an operation. The reporter sends what it holds
// when its last group goes, and at process exit (std::atexit, up to 2 s).
//
// Ownership: owns the wrapped group. Threading: as Group (one thread at a time).
#ifndef DROVER_COLLECTIVE_TIMED_GROUP_H_
#define DROVER_COLLECTIVE_TIMED_GROUP_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "collective/group.h"
#include "common/timeline_reporter.h"

namespace drover::collective::internal {

class TimedGroup : public Group {
 public:
  // REQUIRES: `inner` non-null; `options` the ones it was made with.
  static absl::StatusOr<std::unique_ptr<Group>> Wrap(std::unique_ptr<Group> inner,
                                                     const GroupOptions& options);

  absl::Status AllReduce(void* buf, size_t count, DataType type, ReduceOp op) override;
  absl::Status Broadcast(void* buf, size_t count, DataType type, int root) override;
  absl::Status AllGather(const void* in, void* out, size_t count_per_rank,
                         DataType type) override;
  absl::Status ReduceScatter(const void* in, void* out, size_t count_per_rank, DataType type,
                             ReduceOp op) override;
  absl::Status Barrier() override;
  absl::Status Send(const void* buf, size_t bytes, int peer, uint32_t tag) override;
  absl::Status Recv(void* buf, size_t bytes, int peer, uint32_t tag) override;
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& name() const override { return inner_->name(); }

  // The group it wraps (tests reach the backend through it).
  Group* inner() { return inner_.get(); }

 private:
  TimedGroup(std::unique_ptr<Group> inner, std::shared_ptr<TimelineReporter> reporter);
  // Runs `op` and tells the reporter: `what` ("allreduce"), `bytes`, `detail`.
  template <typename Op>
  absl::Status Timed(const char* what, size_t bytes, std::string detail, Op op);

  std::unique_ptr<Group> inner_;
  std::shared_ptr<TimelineReporter> reporter_;
};

}  // namespace drover::collective::internal

#endif  // DROVER_COLLECTIVE_TIMED_GROUP_H_
