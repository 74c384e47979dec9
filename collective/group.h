// Collective communication groups: the processes of a job (or any set of processes
// that share a rendezvous scope) exchanging buffers with allreduce, broadcast,
// allgather, reduce_scatter, barrier and point-to-point send/recv.
//
//   auto options = collective::GroupOptionsFromEnvironment("default");
//   auto group = collective::NewGroup(*options);          // every rank calls this
//   (*group)->AllReduce(grads, n, DataType::kFloat32, ReduceOp::kAvg);
//
// Backends: kGloo (CPU buffers, TCP between any nodes; this library) and kNccl (device
// buffers; link //collective:nccl_group, which needs a GPU at run time).
//
// CPU algorithms (GroupOptions::algorithm): ranks learn each other's node through the KV
// (GroupOptions::node_id). kAuto picks
//   - all ranks on one node: kShm. AllReduce, Broadcast, AllGather and Barrier go through
//     a POSIX shared-memory segment of the node (created once per group, kept mapped and
//     touched, unlinked as soon as every local rank has mapped it): each rank copies its
//     input into its slot, reduces a 1/N slice across the slots and publishes it, then
//     copies the other slices out, in chunks of 1 MiB (small enough to stay in cache).
//   - ranks on several nodes, some sharing a node: kHierarchical. AllReduce, when every
//     node has the same number L of ranks, is the 2-D ("rail") algorithm: a reduce-scatter
//     through shared memory leaves local rank i with its node's sum of slice i (1/L of the
//     buffer), local rank i of every node allreduces that slice over a Gloo ring of its
//     own (L rings at once, each carrying 1/L of the data), and an allgather through
//     shared memory hands every rank the other slices. With nodes of unequal sizes,
//     AllReduce reduces within each node through shared memory, runs Gloo's ring among
//     one leader per node (the lowest rank of the node), and broadcasts back through
//     shared memory. Barrier meets within each node, then among the leaders, then within
//     each node again.
//   - one rank per node: kGloo.
// Operations without a shared-memory path (ReduceScatter, Send/Recv, and on several
// nodes Broadcast and AllGather) use a Gloo full mesh of all ranks.
//
// Rendezvous: the ranks meet through the scheduler's key-value store for the job's
// generation (proto/scheduler.proto Kv*). Each group's keys carry its name, the
// generation and an incarnation number, so several groups in one process, a group
// created again, and restarted generations never see each other's keys. Every rank must
// create the same groups in the same order.
//
// Ownership: the caller owns the Group. Buffers are borrowed for the duration of one
// call only; a call returns when its buffers may be reused.
//
// Threading: one thread at a time per group. Operations are collective: every rank calls
// the same operations, with the same counts, dtypes, ops and roots, in the same order.
// Different groups may be used concurrently from different threads.
//
// Errors: every operation, and group creation, is bounded by GroupOptions::timeout.
//   ABORTED            the cluster reported that a process of the job failed: the
//                      message names its rank, its node and how it ended ("rank 1 on node
//                      node-2 (10.0.0.2) was killed by SIGKILL"). Each group listens for
//                      the scheduler's notice (GroupOptions::watch_generation) and aborts
//                      the operation in flight from a watcher thread (NCCL:
//                      ncclCommAbort), so every surviving rank returns within a second or
//                      two of the failure instead of at the timeout.
//   DEADLINE_EXCEEDED  a peer did not take part in time (dead, hung, or calling another
//                      operation); the message names the operation and the group.
//   UNAVAILABLE        a connection to a peer broke (it exited or its node went away).
//   INVALID_ARGUMENT   the call itself is wrong (null buffer, bad root or peer, a dtype the
//                      backend or op does not support).
//   FAILED_PRECONDITION the group failed earlier and is unusable, or the backend cannot
//                      run here (NCCL without a GPU).
// After ABORTED, DEADLINE_EXCEEDED or UNAVAILABLE the group is broken: the peers' states
// no longer agree, so every later call fails (ABORTED again after a notice, else
// FAILED_PRECONDITION naming the first failure). The process should exit non-zero and
// let the gang restart bring up the next generation; the scheduler gives a process that
// watches a short notice period (drover-scheduler --abort-notice-ms) to exit by itself
// and report the cause before it is sent SIGTERM.
// Signals: NewGroup sets SIGPIPE to SIG_IGN if it still has the default disposition, so
// a write to a dead peer's socket fails the operation instead of killing the process.
#ifndef DROVER_COLLECTIVE_GROUP_H_
#define DROVER_COLLECTIVE_GROUP_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "drover/collective_options.h"

namespace drover::collective {

enum class DataType { kFloat32, kFloat64, kFloat16, kInt32, kInt64, kUint8 };
enum class ReduceOp { kSum, kAvg, kMax, kMin };
using Backend = ::drover::CollectiveOptions::Backend;
// How a kGloo (CPU) group moves bytes; see the top of this file.
using Algorithm = ::drover::CollectiveOptions::Algorithm;

// Bytes per element.
size_t DataTypeSize(DataType type);
const char* DataTypeName(DataType type);
const char* ReduceOpName(ReduceOp op);
const char* AlgorithmName(Algorithm algorithm);

// One definition with the SDK's (drover/collective_options.h).
using GroupOptions = ::drover::CollectiveOptions;

// Fills GroupOptions from the environment drover gives every process: RANK, WORLD_SIZE,
// DROVER_JOB_ID, DROVER_GENERATION, DROVER_SCHEDULER_ADDRESS, DROVER_TOKEN_FILE,
// GLOO_SOCKET_IFNAME, DROVER_NODE_ID as the node id, DROVER_COLLECTIVE_ALGORITHM
// (auto|gloo|shm|hierarchical), LOCAL_RANK as the device and DROVER_TIMELINE_COLLECTIVES
// (1: timeline). MASTER_ADDR only chooses the fallback address. INVALID_ARGUMENT naming
// the variable if one is missing or malformed.
absl::StatusOr<GroupOptions> GroupOptionsFromEnvironment(const std::string& name = "default");

class Group {
 public:
  virtual ~Group() = default;

  // In place on `count` elements of `buf`: every rank ends with the reduction over all
  // ranks. kAvg divides the sum by size() (integer types: truncating division).
  virtual absl::Status AllReduce(void* buf, size_t count, DataType type, ReduceOp op) = 0;
  // `count` elements of root's `buf` are copied into every rank's `buf`.
  virtual absl::Status Broadcast(void* buf, size_t count, DataType type, int root) = 0;
  // `in` holds count_per_rank elements; `out` (size() * count_per_rank elements) gets
  // rank r's input at offset r * count_per_rank.
  virtual absl::Status AllGather(const void* in, void* out, size_t count_per_rank,
                                 DataType type) = 0;
  // `in` holds size() * count_per_rank elements; `out` (count_per_rank elements) gets
  // slice rank() of the reduction over all ranks.
  virtual absl::Status ReduceScatter(const void* in, void* out, size_t count_per_rank,
                                     DataType type, ReduceOp op) = 0;
  virtual absl::Status Barrier() = 0;
  // Point to point. A Send matches the Recv on `peer` with the same tag; messages
  // between two ranks with one tag arrive in order. The sizes must match. A Send may
  // block until the peer posts its Recv: two ranks that both Send to each other first
  // deadlock (until the timeout); order exchanges (e.g. even ranks send first).
  virtual absl::Status Send(const void* buf, size_t bytes, int peer, uint32_t tag = 0) = 0;
  virtual absl::Status Recv(void* buf, size_t bytes, int peer, uint32_t tag = 0) = 0;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const std::string& name() const = 0;
};

// Creates this rank's end of the group and waits (up to options.timeout) for every rank
// to join. Errors: as above; a rank that never joins is DEADLINE_EXCEEDED naming the
// group and the rendezvous key.
absl::StatusOr<std::unique_ptr<Group>> NewGroup(const GroupOptions& options);

// Backends outside this library (NCCL) register themselves here when linked in.
using GroupFactory =
    std::function<absl::StatusOr<std::unique_ptr<Group>>(const GroupOptions&)>;
bool RegisterGroupFactory(Backend backend, GroupFactory factory);

}  // namespace drover::collective

#endif  // DROVER_COLLECTIVE_GROUP_H_
