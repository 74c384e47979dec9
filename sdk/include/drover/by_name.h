// drover/by_name.h: queues and objects reached by name or id, with values as encoded
// bytes instead of C++ types. For bindings to other languages (the Python module,
// python/) and tools: the typed API (drover::Queue<T>, drover::Put/Get) is built for
// C++ programs, this one for code that encodes values itself.
//
// Values are msgpack with drover's extensions (tensors, shared tensors, queues; see
// drover/internal/codec.h). An EncodedValue owns the store objects its encoding put
// there (a large tensor); a ReceivedValue owns the store objects the sender handed over
// (a queue item's), which decoding with its owning context takes over.
//
// Threading: every call may block (a timeout bounds each) and may be made from any
// thread; handles are copyable and share their queue or object.
// Errors: as drover::Queue and drover::Get (drover/queue.h, drover/task.h); a call on an
// invalid (default-constructed) handle is FAILED_PRECONDITION.
#ifndef DROVER_SDK_INCLUDE_DROVER_BY_NAME_H_
#define DROVER_SDK_INCLUDE_DROVER_BY_NAME_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "drover/internal/codec.h"
#include "drover/internal/pipeline_api.h"
#include "drover/queue.h"
#include "drover/tensor.h"

namespace drover {
namespace internal {
class RefState;
}  // namespace internal

namespace by_name {

// A value ready to send: msgpack bytes and the store objects it put there.
using EncodedValue = internal::EncodedValue;
// A value received from a queue (or read from an object): its bytes and the store
// objects it hands over (decode it with internal::NewOwningContext(owned, pin)).
using ReceivedValue = internal::OwnedValue;

// A queue whose items are encoded values (any type a producer sent).
class AnyQueue {
 public:
  AnyQueue() = default;

  // As Queue<T>::Create: a new queue hosted by a process of this job.
  static absl::StatusOr<AnyQueue> Create(const QueueOptions& options);
  // As Queue<T>::Open: the queue created with `name`, waiting up to `timeout`.
  static absl::StatusOr<AnyQueue> Open(const std::string& name, absl::Duration timeout);
  // The queue a received value's queue extension (kQueueExtType) names.
  static AnyQueue FromExtension(const char* data, size_t size);

  absl::Status Put(EncodedValue value, absl::Duration timeout) const;
  // Up to `max_items` (at least one, waiting up to `timeout` for it). OUT_OF_RANGE
  // once the queue is closed and drained.
  absl::StatusOr<std::vector<ReceivedValue>> Get(absl::Duration timeout, int max_items) const;
  absl::Status Close() const;
  absl::StatusOr<QueueInfo> Info() const;
  absl::Status Destroy() const;

  bool valid() const { return client_ != nullptr; }
  std::string name() const;
  std::string id() const;

 private:
  explicit AnyQueue(std::shared_ptr<internal::QueueClient> client) : client_(std::move(client)) {}
  std::shared_ptr<internal::QueueClient> client_;
};

// A value put into the cluster (as drover::Put does); it lives while a copy of the
// handle does in this process.
class AnyRef {
 public:
  AnyRef() = default;
  // Never fails itself: a failure comes back from Get.
  static AnyRef Put(EncodedValue value);

  // Waits up to `timeout` for the value. It owns nothing (the handle keeps its
  // objects): decode it while the handle lives.
  absl::StatusOr<ReceivedValue> Get(absl::Duration timeout) const;

  bool valid() const { return state_ != nullptr; }
  // "<job>.<owner>.<n>"; "" for an invalid handle.
  std::string id() const;

 private:
  explicit AnyRef(std::shared_ptr<internal::RefState> state) : state_(std::move(state)) {}
  std::shared_ptr<internal::RefState> state_;
};

// A tensor object by id (put by any process of the cluster, e.g. Objects::PutTensor),
// pulled to this node first if it is elsewhere.
struct TensorById {
  Tensor tensor;
  // A SharedTensor's object (writable in place); a sealed object is read-only.
  bool is_mutable = false;
};
absl::StatusOr<TensorById> GetTensor(const std::string& object_id, absl::Duration timeout);

}  // namespace by_name
}  // namespace drover

#endif  // DROVER_SDK_INCLUDE_DROVER_BY_NAME_H_
