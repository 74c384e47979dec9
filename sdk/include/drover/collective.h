// drover::CollectiveGroup: the processes of a job exchanging buffers with allreduce,
// broadcast, allgather, reduce_scatter, barrier and point-to-point send/recv.
//
//   auto group = drover::CollectiveGroup::FromEnvironment("ddp");  // every rank calls it
//   DROVER_RETURN_IF_ERROR((*group)->AllReduce(grads.data(), grads.size(),
//                                              drover::DType::kFloat32, drover::ReduceOp::kAvg));
//
// For tensors in the object store see drover/tensor_collectives.h.
//
// How bytes move (CollectiveOptions::algorithm, kAuto): ranks on one node go through a
// shared-memory segment of the node; ranks on several nodes reduce within each node
// through shared memory and across nodes over Gloo rings (one per local rank when
// every node has as many ranks); ranks alone on their nodes use Gloo over TCP. The
// kNccl backend moves device buffers (it needs a GPU and //sdk:collective_nccl).
//
// Rendezvous: ranks meet through the scheduler's key-value store for the job's
// generation; every rank must create the same groups (same names) in the same order.
//
// Ownership: the caller owns the group. Buffers are borrowed for one call only; a call
// returns when its buffers may be reused.
//
// Threading: one thread at a time per group. Operations are collective: every rank
// makes the same calls, with the same counts, dtypes, ops and roots, in the same order.
// Different groups may be used from different threads at once.
//
// Errors: every operation, and group creation, is bounded by CollectiveOptions::timeout.
//   ABORTED            a process of the job failed (the scheduler's notice): the message
//                      names its rank, its node and how it ended ("rank 1 on node node-2
//                      (10.0.0.2) was killed by SIGKILL"); every surviving rank hears it
//                      within a second or two instead of at the timeout.
//   DEADLINE_EXCEEDED  a peer did not take part in time (dead, hung, or calling another
//                      operation); the message names the operation and the group.
//   UNAVAILABLE        a connection to a peer broke (it exited or its node went away).
//   INVALID_ARGUMENT   the call itself is wrong (null buffer, bad root or peer, a dtype
//                      a reduction does not support).
//   FAILED_PRECONDITION the group failed earlier and is unusable, or the backend cannot
//                      run here (NCCL without a GPU).
// After ABORTED, DEADLINE_EXCEEDED or UNAVAILABLE the group is broken: every later call
// fails. The process should exit non-zero and let drover restart the gang (a job with
// --max-restarts); a process that exits by itself reports the cause first.
// Signals: creating a group sets SIGPIPE to SIG_IGN if it has the default disposition,
// so a write to a dead peer fails the operation instead of killing the process.
#ifndef DROVER_SDK_INCLUDE_DROVER_COLLECTIVE_H_
#define DROVER_SDK_INCLUDE_DROVER_COLLECTIVE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "drover/collective_options.h"
#include "drover/tensor.h"

namespace drover {

namespace collective {
class Group;  // the implementation (collective/group.h)
}  // namespace collective

enum class ReduceOp { kSum, kAvg, kMax, kMin };

// "sum", "avg", "max", "min".
const char* ReduceOpName(ReduceOp op);

// OK if reductions (AllReduce, ReduceScatter) support `dtype`: float16, float32,
// float64, int32, int64, uint8. Otherwise INVALID_ARGUMENT naming it and listing those.
// Operations that only move bytes (Broadcast, AllGather, Send, Recv) take every dtype.
absl::Status CheckReduceDType(DType dtype);

class CollectiveGroup {
 public:
  // Creates this rank's end of the group and waits (up to options.timeout) for every
  // rank to join. Errors as above; a rank that never joins is DEADLINE_EXCEEDED naming
  // the group.
  static absl::StatusOr<std::unique_ptr<CollectiveGroup>> Create(
      const CollectiveOptions& options);
  // Create(CollectiveOptions::FromEnvironment(name)).
  static absl::StatusOr<std::unique_ptr<CollectiveGroup>> FromEnvironment(
      const std::string& name = "default");
  ~CollectiveGroup();
  CollectiveGroup(const CollectiveGroup&) = delete;
  CollectiveGroup& operator=(const CollectiveGroup&) = delete;

  // In place on `count` elements of `buf`: every rank ends with the reduction over all
  // ranks. kAvg divides the sum by size() (integer dtypes: truncating division).
  absl::Status AllReduce(void* buf, size_t count, DType dtype, ReduceOp op);
  // `count` elements of root's `buf` are copied into every rank's `buf`.
  absl::Status Broadcast(void* buf, size_t count, DType dtype, int root);
  // `in` holds count_per_rank elements; `out` (size() * count_per_rank elements) gets
  // rank r's input at element r * count_per_rank.
  absl::Status AllGather(const void* in, void* out, size_t count_per_rank, DType dtype);
  // `in` holds size() * count_per_rank elements; `out` (count_per_rank elements) gets
  // slice rank() of the reduction over all ranks.
  absl::Status ReduceScatter(const void* in, void* out, size_t count_per_rank, DType dtype,
                             ReduceOp op);
  // Returns once every rank has called it.
  absl::Status Barrier();
  // Point to point: a Send matches the Recv on `peer` with the same tag; messages
  // between two ranks with one tag arrive in order; the sizes must match. A Send may
  // block until the peer posts its Recv: two ranks that both Send to each other first
  // deadlock (until the timeout); order exchanges (e.g. even ranks send first).
  absl::Status Send(const void* buf, size_t bytes, int peer, uint32_t tag = 0);
  absl::Status Recv(void* buf, size_t bytes, int peer, uint32_t tag = 0);

  int rank() const;
  int size() const;
  const std::string& name() const;

 private:
  explicit CollectiveGroup(std::unique_ptr<collective::Group> group);

  std::unique_ptr<collective::Group> group_;
};

}  // namespace drover

#endif  // DROVER_SDK_INCLUDE_DROVER_COLLECTIVE_H_
