// Internal to collective/: what every backend does to join a group. Not for users.
#ifndef DROVER_COLLECTIVE_GROUP_INTERNAL_H_
#define DROVER_COLLECTIVE_GROUP_INTERNAL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
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

// INVALID_ARGUMENT naming the field if `options` cannot describe a group.
absl::Status ValidateOptions(const GroupOptions& options);

// A KV client for the group's job generation (reads the token file).
absl::StatusOr<std::unique_ptr<KvClient>> ConnectKv(const GroupOptions& options);

// The key prefix of this instance of the group: ranks count their joins of the group
// name in the KV, so the k-th creation of a group on every rank gets incarnation k.
absl::StatusOr<std::string> JoinPrefix(KvClient& kv, const GroupOptions& options);

// Gloo backend (gloo_group.cc).
absl::StatusOr<std::unique_ptr<Group>> NewGlooGroup(const GroupOptions& options);
// The same on a prefix the caller chose (after its own JoinPrefix); `kv` is kept.
absl::StatusOr<std::unique_ptr<Group>> NewGlooGroupAt(const GroupOptions& options,
                                                      std::unique_ptr<KvClient> kv,
                                                      const std::string& prefix);

// Shared memory within a node, hierarchical across nodes (shm_group.cc); picks by
// options.algorithm and where the ranks are.
absl::StatusOr<std::unique_ptr<Group>> NewHybridGroup(const GroupOptions& options);

}  // namespace drover::collective::internal

#endif  // DROVER_COLLECTIVE_GROUP_INTERNAL_H_
