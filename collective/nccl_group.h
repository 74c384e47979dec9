// The NCCL backend of collective::Group: buffers are device pointers on
// GroupOptions::device. Linking //collective:nccl_group registers it with NewGroup
// (Backend::kNccl); NewNcclGroup is the same with an injectable GpuRuntime.
//
// Creation checks for a GPU before anything else: with none visible it fails at once
// with FAILED_PRECONDITION naming the cause (no rendezvous, no waiting on peers).
// Rank 0 creates the NCCL unique id and publishes it in the job's KV; the others wait
// for it (bounded by the timeout). The communicator is non-blocking: every operation is
// enqueued on the group's stream and polled until done, a communicator error, or the
// timeout, after which the communicator is aborted (ncclCommAbort) and the group is
// broken (see group.h).
//
// Differences from Gloo: Send/Recv match by order only (NCCL has no tags: a tag other
// than 0 is INVALID_ARGUMENT); kAvg uses ncclAvg.
#ifndef DROVER_COLLECTIVE_NCCL_GROUP_H_
#define DROVER_COLLECTIVE_NCCL_GROUP_H_

#include <memory>

#include "absl/status/statusor.h"
#include "collective/group.h"
#include "gpu/gpu_runtime.h"

namespace drover::collective {

// `runtime` (borrowed, may be null: the CUDA runtime) is asked for the device count.
absl::StatusOr<std::unique_ptr<Group>> NewNcclGroup(const GroupOptions& options,
                                                    GpuRuntime* runtime = nullptr);

}  // namespace drover::collective

#endif  // DROVER_COLLECTIVE_NCCL_GROUP_H_
