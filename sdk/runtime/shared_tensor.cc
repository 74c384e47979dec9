// drover::SharedTensor (drover/shared_tensor.h) over a mutable object of this node's
// store, and drover::AllocateInStore.
#include "drover/shared_tensor.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "object_store/tensor.h"
#include "sdk/internal/tensor_internal.h"
#include "sdk/runtime/context.h"
#include "sdk/runtime/store_tensor.h"

namespace drover {
namespace internal {

class SharedTensorState {
 public:
  SharedTensorState(RuntimeContext* ctx, object_store::ObjectRef ref, object_store::TensorMeta meta,
                    bool owner)
      : ctx_(ctx), id_(ref.id()), node_(ctx->node_id), meta_(std::move(meta)), owner_(owner),
        ref_(std::move(ref)) {}
  ~SharedTensorState() { (void)Release(); }

  const std::string& id() const { return id_; }
  const std::string& node() const { return node_; }
  const object_store::TensorMeta& meta() const { return meta_; }

  absl::StatusOr<void*> Data() {
    absl::MutexLock l(&mu_);
    if (!ref_.valid()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "SharedTensor ", id_, " was released by this process: its memory may be gone; use a "
          "handle that still holds it"));
    }
    return static_cast<void*>(ref_.mutable_data().data());
  }

  absl::Status Release() {
    object_store::ObjectRef ref;
    {
      absl::MutexLock l(&mu_);
      if (!ref_.valid()) {
        return absl::FailedPreconditionError(absl::StrCat("SharedTensor ", id_, " was released already"));
      }
      ref = std::move(ref_);
    }
    // The owner's release hides it from new holders; the store frees it when the last
    // holder's reference goes (this one included).
    if (owner_) ctx_->store->Delete({StoredRef{id_, node_, meta_.data_size}});
    ref.Reset();
    return absl::OkStatus();
  }

 private:
  RuntimeContext* const ctx_;
  const std::string id_;
  const std::string node_;
  const object_store::TensorMeta meta_;
  const bool owner_;
  absl::Mutex mu_;
  object_store::ObjectRef ref_ ABSL_GUARDED_BY(mu_);
};

namespace {

absl::StatusOr<RuntimeContext*> ContextWithStore() {
  RuntimeContext* ctx = CurrentRuntimeContext();
  if (ctx == nullptr) return absl::FailedPreconditionError("SharedTensor needs drover::Init first");
  if (ctx->store->store() == nullptr) {
    return absl::FailedPreconditionError(
        "this node has no object store (start its agent with one): a SharedTensor lives in it");
  }
  return ctx;
}

}  // namespace

// A SharedTensor over its state: only drover's code makes one (shared_tensor.h).
struct SharedTensorAccess {
  static SharedTensor Make(std::shared_ptr<SharedTensorState> state) { return SharedTensor(std::move(state)); }
};

std::string EncodeSharedTensor(const SharedTensor& t) {
  if (!t.valid()) throw DecodeError("an invalid SharedTensor cannot be sent");
  std::string out;
  struct Writer {
    std::string* s;
    void write(const char* d, size_t n) { s->append(d, n); }
  } w{&out};
  msgpack::packer<Writer> pk(w);
  pk.pack_array(2);
  pk.pack(t.id());
  pk.pack(t.node_id());
  return out;
}

SharedTensor DecodeSharedTensor(const char* data, size_t size) {
  std::string id, node;
  try {
    msgpack::object_handle h = msgpack::unpack(data, size);
    std::tie(id, node) = h.get().as<std::tuple<std::string, std::string>>();
  } catch (const std::exception& e) {
    throw DecodeError(absl::StrCat("a SharedTensor value does not decode: ", e.what()));
  }
  absl::StatusOr<RuntimeContext*> ctx = ContextWithStore();
  if (!ctx.ok()) throw DecodeError(std::string(ctx.status().message()));
  if (node != (*ctx)->node_id) {
    throw DecodeError(absl::StrCat(
        "SharedTensor ", id, " lives on node ", node, " but this process runs on node ",
        (*ctx)->node_id, ": a SharedTensor is never copied between nodes; run this on its node "
        "(SetNodeAffinity(shared.node_id())) or send a Snapshot()"));
  }
  absl::StatusOr<object_store::ObjectRef> ref = (*ctx)->store->store()->Get(id, absl::ZeroDuration());
  if (!ref.ok()) {
    throw DecodeError(absl::StrCat("SharedTensor ", id, " on node ", node,
                                   " is gone: its owner released it (", ref.status().message(), ")"));
  }
  if (!ref->is_mutable()) {
    throw DecodeError(absl::StrCat("store object ", id, " is not a SharedTensor (it is immutable)"));
  }
  absl::StatusOr<object_store::TensorMeta> meta =
      object_store::DecodeTensorHeader(ref->metadata_view(), ref->data().size());
  if (!meta.ok()) {
    throw DecodeError(absl::StrCat("SharedTensor ", id, " has no valid tensor header: ", meta.status().message()));
  }
  return SharedTensorAccess::Make(std::make_shared<SharedTensorState>(*ctx, *std::move(ref), *std::move(meta),
                                                                     /*owner=*/false));
}

}  // namespace internal

absl::StatusOr<StoreUsage> NodeStoreUsage() {
  DROVER_ASSIGN_OR_RETURN(internal::RuntimeContext * ctx, internal::ContextWithStore());
  DROVER_ASSIGN_OR_RETURN(object_store::StoreStats stats, ctx->store->store()->Stats());
  return StoreUsage{stats.capacity, stats.used, stats.objects};
}

absl::StatusOr<Tensor> AllocateInStore(DType dtype, std::vector<int64_t> shape) {
  return internal::NewStoreTensor(dtype, std::move(shape));
}

absl::StatusOr<Tensor> AllocateInStoreUninitialized(DType dtype, std::vector<int64_t> shape) {
  return internal::NewStoreTensor(dtype, std::move(shape), /*zero=*/false);
}

absl::StatusOr<SharedTensor> SharedTensor::Create(DType dtype, std::vector<int64_t> shape) {
  DROVER_ASSIGN_OR_RETURN(internal::RuntimeContext * ctx, internal::ContextWithStore());
  // The layout and its checks are those of a store tensor; a SharedTensor differs in
  // its object only (mutable: never read-only).
  DROVER_ASSIGN_OR_RETURN(object_store::TensorMeta meta, internal::ContiguousStoreMeta(dtype, shape));
  if (meta.data_size == 0) return absl::InvalidArgumentError("a SharedTensor needs at least one element");
  DROVER_ASSIGN_OR_RETURN(std::string header, object_store::EncodeTensorHeader(meta));
  object_store::Client* store = ctx->store->store();
  DROVER_ASSIGN_OR_RETURN(object_store::MutableObject obj,
                          store->Create(ctx->NewObjectId(), meta.data_size, header,
                                        /*secondary=*/false, /*mutable_object=*/true));
  std::memset(obj.data.data(), 0, obj.data.size());
  DROVER_ASSIGN_OR_RETURN(object_store::ObjectRef ref, store->SealKeepingReference(obj));
  return SharedTensor(std::make_shared<internal::SharedTensorState>(ctx, std::move(ref), std::move(meta),
                                                                    /*owner=*/true));
}

std::string SharedTensor::id() const { return state_ ? state_->id() : ""; }
std::string SharedTensor::node_id() const { return state_ ? state_->node() : ""; }
DType SharedTensor::dtype() const {
  return state_ ? internal::FromStoreDType(state_->meta().dtype) : DType::kFloat32;
}
std::vector<int64_t> SharedTensor::shape() const { return state_ ? state_->meta().shape : std::vector<int64_t>{}; }
int64_t SharedTensor::numel() const { return state_ ? object_store::NumElements(state_->meta()) : 0; }
size_t SharedTensor::nbytes() const { return state_ ? state_->meta().data_size : 0; }

absl::StatusOr<void*> SharedTensor::raw_data() const {
  if (!state_) return absl::FailedPreconditionError("an invalid (default-constructed) SharedTensor");
  return state_->Data();
}

absl::StatusOr<void*> SharedTensor::Data(DType want) const {
  if (state_ && want != dtype()) {
    return absl::InvalidArgumentError(absl::StrCat("SharedTensor ", id(), " holds ", DTypeName(dtype()),
                                                   " elements, not ", DTypeName(want)));
  }
  return raw_data();
}

absl::StatusOr<Tensor> SharedTensor::Snapshot() const {
  if (!state_) return absl::FailedPreconditionError("an invalid (default-constructed) SharedTensor");
  DROVER_ASSIGN_OR_RETURN(void* src, state_->Data());
  DROVER_ASSIGN_OR_RETURN(Tensor copy, AllocateInStore(dtype(), shape()));
  std::memcpy(const_cast<void*>(copy.raw_data()), src, nbytes());
  if (const internal::StoreObjectStorage* s =
          internal::StoreObjectStorage::Of(internal::TensorAccess::StorageOf(copy))) {
    DROVER_RETURN_IF_ERROR(s->Seal());
  }
  return copy;
}

absl::Status SharedTensor::Release() {
  if (!state_) return absl::FailedPreconditionError("an invalid (default-constructed) SharedTensor");
  return state_->Release();
}

}  // namespace drover
