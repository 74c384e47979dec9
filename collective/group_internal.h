// Internal to collective/: what every backend does to join a group. Not for users.
#ifndef DROVER_COLLECTIVE_GROUP_INTERNAL_H_
#define DROVER_COLLECTIVE_GROUP_INTERNAL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "collective/generation_watcher.h"
#include "collective/group.h"
#include "collective/kv_store.h"
#include "gloo/types.h"

namespace drover::collective::internal {

// A type carrier for DispatchType's callback.
template <typename T>
struct Tag {
  using type = T;
};

// Calls f(Tag<T>{}) for the C++ element type of `type` (float16 is gloo::float16).
template <typename F>
absl::Status DispatchType(DataType type, F&& f) {
  switch (type) {
    case DataType::kFloat32: return f(Tag<float>{});
    case DataType::kFloat64: return f(Tag<double>{});
    case DataType::kFloat16: return f(Tag<gloo::float16>{});
    case DataType::kInt32: return f(Tag<int32_t>{});
    case DataType::kInt64: return f(Tag<int64_t>{});
    case DataType::kUint8: return f(Tag<uint8_t>{});
  }
  return absl::InvalidArgumentError("unknown data type");
}

// What every backend's group shares: its identity, error context, the broken state and
// abort on the cluster's failure notice.
//
// A group is broken by its first failure: every later call returns FAILED_PRECONDITION
// naming it. Abort() (any thread) breaks it from outside and interrupts the operation
// in flight through AbortTransport(); NewGroup subscribes every group to the job
// generation's GenerationWatcher, whose notice ("rank 1 on node n2 was killed by
// SIGKILL") becomes the ABORTED status of the operation in flight and of later calls.
class GroupBase : public Group {
 public:
  // `label` names the backend or algorithm in error context ("gloo", "shm", "NCCL").
  GroupBase(GroupOptions options, std::string label);
  ~GroupBase() override;

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  const std::string& name() const override { return options_.name; }
  const GroupOptions& options() const { return options_; }

  // Breaks the group with `cause` (the first cause wins) and interrupts the operation
  // in flight. Thread-safe, idempotent.
  void Abort(const absl::Status& cause);
  // Subscribes to the job generation's failure notice (options.watch_generation).
  // Called once by NewGroup after creation.
  absl::Status WatchGeneration();

 protected:
  // Interrupts the operation in flight (or the next one) of the transport: called once,
  // from any thread, after the group is marked broken with `cause`.
  virtual void AbortTransport(const absl::Status& cause) = 0;
  // Ends the subscription to the notice. Every derived destructor calls it first, so no
  // AbortTransport() runs while the derived part is being destroyed. Idempotent.
  void StopWatching();

  // "AllReduce in group 'g' (rank 0 of 4, shm, job job-1 generation 0)".
  std::string Where(const std::string& op) const;
  absl::Status Invalid(const std::string& op, const std::string& what) const;
  // OK, or FAILED_PRECONDITION naming the failure that broke the group (ABORTED if it
  // was the cluster's failure notice).
  absl::Status Usable(const std::string& op) const;
  // Records that `op` failed with `s` and breaks the group. If the group was aborted,
  // or `s` says a peer vanished or gave up (UNAVAILABLE, ABORTED) and the cluster's
  // notice follows within a few seconds, returns ABORTED naming the failed process,
  // with `s` appended.
  absl::Status Fail(const std::string& op, const absl::Status& s);

  const GroupOptions options_;

 private:
  const std::string label_;
  mutable absl::Mutex mu_;
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;  // broken_ is the cluster's notice
  std::shared_ptr<GenerationWatcher> watcher_;
  int subscription_ = -1;
};

// The KV client options of a group's job generation (reads the token file).
absl::StatusOr<KvClientOptions> KvOptionsFor(const GroupOptions& options);

// INVALID_ARGUMENT naming the field if `options` cannot describe a group.
absl::Status ValidateOptions(const GroupOptions& options);

// A KV client for the group's job generation (reads the token file).
absl::StatusOr<std::unique_ptr<KvClient>> ConnectKv(const GroupOptions& options);

// The key prefix of this instance of the group: ranks count their joins of the group
// name in the KV, so the k-th creation of a group on every rank gets incarnation k.
absl::StatusOr<std::string> JoinPrefix(KvClient& kv, const GroupOptions& options);

// Gloo backend (gloo_group.cc).
absl::StatusOr<std::unique_ptr<GroupBase>> NewGlooGroup(const GroupOptions& options);
// The same on a prefix the caller chose (after its own JoinPrefix); `kv` is kept.
absl::StatusOr<std::unique_ptr<GroupBase>> NewGlooGroupAt(const GroupOptions& options,
                                                      std::unique_ptr<KvClient> kv,
                                                      const std::string& prefix);

// Shared memory within a node, hierarchical across nodes (shm_group.cc); picks by
// options.algorithm and where the ranks are.
absl::StatusOr<std::unique_ptr<GroupBase>> NewHybridGroup(const GroupOptions& options);

}  // namespace drover::collective::internal

#endif  // DROVER_COLLECTIVE_GROUP_INTERNAL_H_
