#include "sdk/runtime/store_draft.h"

#include <atomic>

#include "absl/strings/str_cat.h"
#include "object_store/tensor.h"
#include "sdk/internal/tensor_internal.h"

namespace drover::internal {
namespace {

struct Config {
  object_store::Client* store = nullptr;
  std::string node_id;
  std::function<std::string()> new_id;
};
std::atomic<Config*> config{nullptr};

}  // namespace

void StoreDraft::Configure(object_store::Client* store, std::string node_id,
                           std::function<std::string()> new_id) {
  config.store(new Config{store, std::move(node_id), std::move(new_id)});  // lives as long as the process
}

std::shared_ptr<Storage> StoreDraft::Allocate(size_t bytes, DType dtype,
                                              const std::vector<int64_t>& shape, uint8_t** data) {
  Config* c = config.load();
  if (c == nullptr || c->store == nullptr) return nullptr;
  object_store::TensorMeta meta;
  meta.dtype = ToStoreDType(dtype);
  meta.shape = shape;
  meta.strides = object_store::ContiguousStrides(shape);
  meta.data_size = bytes;
  absl::StatusOr<std::string> header = object_store::EncodeTensorHeader(meta);
  if (!header.ok()) return nullptr;
  absl::StatusOr<object_store::MutableObject> obj = c->store->Create(c->new_id(), bytes, *header);
  if (!obj.ok()) return nullptr;  // no room: the heap will do
  *data = obj->data.data();
  return std::shared_ptr<Storage>(new StoreDraft(c->store, *std::move(obj), c->node_id, *header));
}

StoreDraft::~StoreDraft() {
  absl::MutexLock l(&mu_);
  if (!sealed_) store_->Abort(id_).IgnoreError();  // never returned: free its space
}

bool StoreDraft::writable() const {
  absl::MutexLock l(&mu_);
  return !sealed_;
}

bool StoreDraft::in_store() const {
  absl::MutexLock l(&mu_);
  return sealed_;
}

absl::StatusOr<StoredRef> StoreDraft::Seal() const {
  absl::MutexLock l(&mu_);
  if (!sealed_) {
    // The creator's reference stays with this storage, so the bytes stay put while the
    // tensor lives.
    absl::StatusOr<object_store::ObjectRef> ref = store_->SealKeepingReference(obj_);
    if (!ref.ok()) {
      return absl::Status(ref.status().code(), absl::StrCat("cannot seal tensor object ", id_, ": ",
                                                            ref.status().message()));
    }
    sealed_ = true;
    pin_ = *std::move(ref);
  }
  return StoredRef{id_, node_id_, size_};
}

}  // namespace drover::internal
