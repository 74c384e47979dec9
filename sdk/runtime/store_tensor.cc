#include "sdk/runtime/store_tensor.h"

#include <cstring>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "object_store/tensor.h"
#include "sdk/internal/tensor_internal.h"
#include "sdk/runtime/context.h"

namespace drover::internal {
namespace {

// How long decoding waits for an owned object to reach this node.
constexpr absl::Duration kLoadWait = absl::Minutes(5);

// Storages that handed their object to a value, by object id (ReturnOrDelete).
absl::Mutex g_handed_mu;
std::map<std::string, const StoreObjectStorage*>& Handed() ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_handed_mu) {
  static auto* m = new std::map<std::string, const StoreObjectStorage*>();
  return *m;
}

StoreObjectStorage::DeleteFn DeleterOf(RuntimeContext* ctx) {
  return [ctx](const std::vector<StoredRef>& objects) { ctx->store->Delete(objects); };
}

}  // namespace

StoreObjectStorage::StoreObjectStorage(object_store::Client* store,
                                       object_store::MutableObject object, StoredRef where,
                                       DeleteFn del)
    : store_(store),
      id_(object.id),
      metadata_(reinterpret_cast<const char*>(object.metadata.data()), object.metadata.size()),
      data_(object.data.data()),
      size_(object.data.size()),
      del_(std::move(del)),
      unsealed_(std::move(object)),
      sealed_(false),
      copies_{std::move(where)},
      owned_(true) {}

StoreObjectStorage::StoreObjectStorage(object_store::ObjectRef ref, std::vector<StoredRef> copies,
                                       bool owned, DeleteFn del)
    : store_(nullptr),
      id_(ref.id()),
      metadata_(ref.metadata_view()),
      data_(ref.data().data()),
      size_(ref.data().size()),
      del_(std::move(del)),
      sealed_(true),
      ref_(std::move(ref)),
      copies_(std::move(copies)),
      owned_(owned) {}

StoreObjectStorage::~StoreObjectStorage() {
  {
    absl::MutexLock h(&g_handed_mu);
    auto it = Handed().find(id_);
    if (it != Handed().end() && it->second == this) Handed().erase(it);
  }
  absl::MutexLock l(&mu_);
  if (!sealed_) {
    (void)store_->Abort(id_);  // never sent: nobody else can know it
    return;
  }
  ref_.Reset();
  if (owned_ && del_) del_(copies_);
}

bool StoreObjectStorage::writable() const {
  absl::MutexLock l(&mu_);
  return !sealed_;
}

bool StoreObjectStorage::in_store() const {
  absl::MutexLock l(&mu_);
  return sealed_;
}

const StoreObjectStorage* StoreObjectStorage::Of(const Buffer& b) {
  return dynamic_cast<const StoreObjectStorage*>(TensorAccess::StorageObject(b));
}

absl::Status StoreObjectStorage::Seal() const {
  absl::MutexLock l(&mu_);
  return SealLocked();
}

absl::Status StoreObjectStorage::SealLocked() const {
  if (sealed_) return absl::OkStatus();
  DROVER_ASSIGN_OR_RETURN(ref_, store_->SealKeepingReference(unsealed_));
  sealed_ = true;
  return absl::OkStatus();
}

absl::StatusOr<StoreObjectStorage::Sent> StoreObjectStorage::Send() const {
  Sent out;
  {
    absl::MutexLock l(&mu_);
    DROVER_RETURN_IF_ERROR(SealLocked());
    out.where = copies_.front();
    out.owned = owned_;
    owned_ = false;
  }
  if (out.owned) {  // after mu_: ReturnOrDelete takes the two locks the other way
    absl::MutexLock h(&g_handed_mu);
    Handed()[id_] = this;
  }
  return out;
}

void StoreObjectStorage::ReturnOrDelete(const std::vector<StoredRef>& objects) {
  std::vector<StoredRef> orphans;
  {
    absl::MutexLock h(&g_handed_mu);
    for (const StoredRef& r : objects) {
      auto it = Handed().find(r.object_id);
      if (it == Handed().end()) {
        orphans.push_back(r);
        continue;
      }
      const StoreObjectStorage* s = it->second;
      Handed().erase(it);
      absl::MutexLock l(&s->mu_);
      s->owned_ = true;
    }
  }
  RuntimeContext* ctx = CurrentRuntimeContext();
  if (!orphans.empty() && ctx != nullptr) ctx->store->Delete(orphans);
}

absl::StatusOr<object_store::TensorMeta> ContiguousStoreMeta(DType dtype,
                                                           const std::vector<int64_t>& shape) {
  const size_t elem = DTypeSize(dtype);
  if (elem == 0) return absl::InvalidArgumentError(absl::StrCat("unknown ", DTypeName(dtype)));
  if (shape.size() > static_cast<size_t>(kMaxTensorDims)) {
    return absl::InvalidArgumentError(absl::StrCat("a tensor has at most ", kMaxTensorDims, " dimensions"));
  }
  uint64_t bytes = elem;
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError("a tensor shape has a negative dimension");
    if (d != 0 && bytes > (uint64_t{1} << 62) / static_cast<uint64_t>(d)) {
      return absl::InvalidArgumentError("the tensor is too large");
    }
    bytes *= static_cast<uint64_t>(d);
  }
  object_store::TensorMeta meta = object_store::ContiguousMeta(ToStoreDType(dtype), shape);
  meta.data_size = bytes;
  return meta;
}

absl::StatusOr<Tensor> NewStoreTensor(DType dtype, std::vector<int64_t> shape, bool zero) {
  RuntimeContext* ctx = CurrentRuntimeContext();
  if (ctx == nullptr) {
    return absl::FailedPreconditionError(
        "a tensor in the object store needs the task runtime: call drover::Init first");
  }
  object_store::Client* store = ctx->store->store();
  if (store == nullptr) {
    return absl::FailedPreconditionError(
        "this node has no object store (start its agent with one), so a tensor cannot be "
        "allocated in it; use drover::Tensor::Empty");
  }
  DROVER_ASSIGN_OR_RETURN(object_store::TensorMeta meta, ContiguousStoreMeta(dtype, shape));
  if (meta.data_size == 0) return Tensor::Empty(dtype, std::move(shape));  // nothing to store
  DROVER_ASSIGN_OR_RETURN(std::string header, object_store::EncodeTensorHeader(meta));
  const std::string id = ctx->NewObjectId();
  DROVER_ASSIGN_OR_RETURN(object_store::MutableObject obj, store->Create(id, meta.data_size, header));
  if (zero) std::memset(obj.data.data(), 0, obj.data.size());
  const uint8_t* data = obj.data.data();
  const size_t size = obj.data.size();
  auto storage = std::make_shared<StoreObjectStorage>(store, std::move(obj),
                                                      StoredRef{id, ctx->node_id, size}, DeleterOf(ctx));
  return TensorAccess::Make(meta, TensorAccess::Wrap(std::move(storage), data, size));
}

OwningCodecContext::OwningCodecContext(std::vector<StoredRef> owned, bool pin)
    : owned_(std::move(owned)), pin_(pin) {}

Buffer OwningCodecContext::InlineBuffer(absl::string_view bytes) {
  RuntimeContext* ctx = CurrentRuntimeContext();
  object_store::Client* store = ctx == nullptr ? nullptr : ctx->store->store();
  if (!pin_ || store == nullptr || bytes.empty()) return Buffer::CopyOf(bytes);
  const std::string id = ctx->NewObjectId();
  absl::StatusOr<object_store::MutableObject> obj = store->Create(id, bytes.size());
  if (!obj.ok()) return Buffer::CopyOf(bytes);  // no room: an ordinary copy still works
  std::memcpy(obj->data.data(), bytes.data(), bytes.size());
  const uint8_t* data = obj->data.data();
  auto storage = std::make_shared<StoreObjectStorage>(store, *std::move(obj),
                                                      StoredRef{id, ctx->node_id, bytes.size()}, DeleterOf(ctx));
  if (!storage->Seal().ok()) return Buffer::CopyOf(bytes);
  return TensorAccess::Wrap(std::move(storage), data, bytes.size());
}

OwningCodecContext::~OwningCodecContext() {
  std::vector<StoredRef> left;
  for (const StoredRef& r : owned_) {
    if (taken_.count(r.object_id) == 0) left.push_back(r);
  }
  RuntimeContext* ctx = CurrentRuntimeContext();
  if (!left.empty() && ctx != nullptr) ctx->store->Delete(left);
}

absl::StatusOr<StoredRef> OwningCodecContext::Store(absl::string_view data,
                                                    absl::string_view metadata) {
  return RuntimeCodecContext()->Store(data, metadata);
}

absl::StatusOr<ValueView> OwningCodecContext::Load(const StoredRef& ref) {
  return RuntimeCodecContext()->Load(ref);
}

std::string OwningCodecContext::node_id() {
  RuntimeContext* ctx = CurrentRuntimeContext();
  return ctx == nullptr ? "" : ctx->node_id;
}

absl::StatusOr<Buffer> OwningCodecContext::LoadBuffer(const StoredRef& ref) {
  RuntimeContext* ctx = CurrentRuntimeContext();
  if (ctx == nullptr) return absl::FailedPreconditionError("drover::Init was not called");
  bool owns = false;
  for (const StoredRef& r : owned_) owns = owns || r.object_id == ref.object_id;
  owns = owns && taken_.insert(ref.object_id).second;
  if (!owns) return RuntimeCodecContext()->LoadBuffer(ref);
  DROVER_ASSIGN_OR_RETURN(object_store::ObjectRef r,
                          ctx->store->GetRef(ref.object_id, ref.node_id, absl::Now() + kLoadWait));
  std::vector<StoredRef> copies = {ref};
  // Pulled here: this node's copy goes with the original.
  if (ref.node_id != ctx->node_id) copies.push_back(StoredRef{ref.object_id, ctx->node_id, ref.size});
  auto storage = std::make_shared<StoreObjectStorage>(std::move(r), std::move(copies),
                                                      /*owned=*/true, DeleterOf(ctx));
  const uint8_t* data = storage->data();
  const size_t size = storage->size();
  return TensorAccess::Wrap(std::move(storage), data, size);
}

}  // namespace drover::internal
