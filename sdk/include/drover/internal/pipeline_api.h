// Internal to the SDK's templates: the type-erased calls that drover::Queue
// (queue.h) and drover::DataLoader (data_loader.h) make into the runtime, and how a
// receiver decodes a value whose store objects it takes over. Users need not include
// this.
#ifndef DROVER_SDK_INCLUDE_DROVER_INTERNAL_PIPELINE_API_H_
#define DROVER_SDK_INCLUDE_DROVER_INTERNAL_PIPELINE_API_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "drover/internal/codec.h"

namespace drover {

// Public types of queue.h (which includes this header).
struct QueueInfo;
struct QueueOptions;

namespace internal {

// A value received with the store objects it owns (a queue item, a loader result).
struct OwnedValue {
  ValueView view;
  std::vector<StoredRef> owned;
  // Tensors that came inline are copied into this node's store (pin_memory).
  bool pin = false;
};

// The codec context of a receiver taking over `owned` (sdk/runtime/store_tensor.h).
std::unique_ptr<CodecContext> NewOwningContext(std::vector<StoredRef> owned, bool pin);

// Decodes a T from `v`; tensors over its owned objects free them when they go.
template <typename T>
absl::StatusOr<T> DecodeOwned(const OwnedValue& v) {
  if (v.owned.empty() && !v.pin) {
    return Decode<T>(v.view, DefaultCodecContext());  // nothing to take over
  }
  std::unique_ptr<CodecContext> ctx = NewOwningContext(v.owned, v.pin);
  return Decode<T>(v.view, ctx.get());
}

// A queue as this process knows it (sdk/runtime/queue_client.h).
class QueueClient;

absl::StatusOr<std::shared_ptr<QueueClient>> CreateQueue(const QueueOptions& options);
absl::StatusOr<std::shared_ptr<QueueClient>> OpenQueue(const std::string& name, absl::Duration timeout);
absl::Status QueuePut(QueueClient& q, EncodedValue value, absl::Duration timeout);
absl::StatusOr<std::vector<OwnedValue>> QueueGet(QueueClient& q, absl::Duration timeout, int max_items);
absl::Status QueueClose(QueueClient& q);
absl::StatusOr<QueueInfo> QueueStats(QueueClient& q);
absl::Status QueueDestroy(QueueClient& q);
const std::string& QueueName(const QueueClient& q);
const std::string& QueueId(const QueueClient& q);
// The host's process id and node (for diagnostics and tests).
int64_t QueueHostPid(const QueueClient& q);
const std::string& QueueHostNode(const QueueClient& q);
// How a queue travels in a value (its actor and endpoint) and is found again.
std::string EncodeQueue(const QueueClient& q);
std::shared_ptr<QueueClient> DecodeQueue(const char* data, size_t size);
inline constexpr int8_t kQueueExtType = 'Q';

}  // namespace internal
}  // namespace drover

#endif  // DROVER_SDK_INCLUDE_DROVER_INTERNAL_PIPELINE_API_H_
