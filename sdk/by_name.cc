#include "drover/by_name.h"

#include <utility>

#include "absl/strings/str_cat.h"

#include "drover/internal/runtime_api.h"
#include "sdk/internal/runtime_internal.h"
#include "sdk/internal/tensor_internal.h"

namespace drover::by_name {
namespace {

absl::Status Invalid(const char* what) {
  return absl::FailedPreconditionError(
      absl::StrCat("an invalid (default-constructed) ", what));
}

}  // namespace

absl::StatusOr<AnyQueue> AnyQueue::Create(const QueueOptions& options) {
  absl::StatusOr<std::shared_ptr<internal::QueueClient>> c = internal::CreateQueue(options);
  if (!c.ok()) return c.status();
  return AnyQueue(*std::move(c));
}

absl::StatusOr<AnyQueue> AnyQueue::Open(const std::string& name, absl::Duration timeout) {
  absl::StatusOr<std::shared_ptr<internal::QueueClient>> c = internal::OpenQueue(name, timeout);
  if (!c.ok()) return c.status();
  return AnyQueue(*std::move(c));
}

AnyQueue AnyQueue::FromExtension(const char* data, size_t size) {
  return AnyQueue(internal::DecodeQueue(data, size));
}

absl::Status AnyQueue::Put(EncodedValue value, absl::Duration timeout) const {
  if (!client_) return Invalid("queue");
  return internal::QueuePut(*client_, std::move(value), timeout);
}

absl::StatusOr<std::vector<ReceivedValue>> AnyQueue::Get(absl::Duration timeout,
                                                         int max_items) const {
  if (!client_) return Invalid("queue");
  return internal::QueueGet(*client_, timeout, max_items);
}

absl::Status AnyQueue::Close() const {
  return client_ ? internal::QueueClose(*client_) : Invalid("queue");
}

absl::StatusOr<QueueInfo> AnyQueue::Info() const {
  if (!client_) return Invalid("queue");
  return internal::QueueStats(*client_);
}

absl::Status AnyQueue::Destroy() const {
  return client_ ? internal::QueueDestroy(*client_) : Invalid("queue");
}

std::string AnyQueue::name() const { return client_ ? internal::QueueName(*client_) : ""; }
std::string AnyQueue::id() const { return client_ ? internal::QueueId(*client_) : ""; }

AnyRef AnyRef::Put(EncodedValue value) { return AnyRef(internal::PutValue(std::move(value))); }

absl::StatusOr<ReceivedValue> AnyRef::Get(absl::Duration timeout) const {
  if (!state_) return Invalid("object reference");
  absl::StatusOr<internal::ValueView> view = internal::GetValue(state_, timeout);
  if (!view.ok()) return view.status();
  ReceivedValue v;  // owns nothing: the reference keeps the objects
  v.view = *std::move(view);
  return v;
}

std::string AnyRef::id() const { return state_ ? internal::RefId(*state_) : ""; }

absl::StatusOr<TensorById> GetTensor(const std::string& object_id, absl::Duration timeout) {
  absl::StatusOr<object_store::ObjectRef> ref = internal::GetObject(object_id, timeout);
  if (!ref.ok()) return ref.status();
  TensorById out;
  out.is_mutable = ref->is_mutable();
  absl::StatusOr<Tensor> t = internal::TensorAccess::TensorFromObject(*std::move(ref));
  if (!t.ok()) return t.status();
  out.tensor = *std::move(t);
  return out;
}

}  // namespace by_name
