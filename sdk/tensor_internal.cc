#include "sdk/internal/tensor_internal.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace drover::internal {
namespace {

namespace os = object_store;

// A sealed object of this node's store, pinned while this lives.
class StoreStorage final : public Storage {
 public:
  explicit StoreStorage(os::ObjectRef ref) : ref_(std::move(ref)) {}
  bool in_store() const override { return true; }
  absl::string_view metadata() const override { return ref_.metadata_view(); }
  const std::string& object_id() const override { return ref_.id(); }
  const os::ObjectRef& ref() const { return ref_; }

 private:
  const os::ObjectRef ref_;
};

}  // namespace

Buffer TensorAccess::FromObject(os::ObjectRef ref) {
  auto storage = std::make_shared<StoreStorage>(std::move(ref));
  absl::Span<const uint8_t> data = storage->ref().data();
  return Buffer(std::move(storage), data.data(), data.size());
}

absl::StatusOr<Tensor> TensorAccess::TensorFromObject(os::ObjectRef ref) {
  absl::StatusOr<os::TensorMeta> meta = os::DecodeTensorHeader(ref.metadata_view(),
                                                               ref.data().size());
  if (!meta.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("object ", ref.id(), " is not a valid tensor: ",
                                                   meta.status().message()));
  }
  if (os::DTypeSize(meta->dtype) > 1 && meta->byte_order != os::HostByteOrder()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "object ", ref.id(), " holds a ", os::DTypeName(meta->dtype), " tensor in ",
        meta->byte_order == os::ByteOrder::kBig ? "big" : "little",
        "-endian byte order, not this host's; tensors are read in host byte order"));
  }
  Buffer all = FromObject(std::move(ref));
  Buffer storage(all.storage_, all.data(), meta->data_size);
  return Make(*meta, std::move(storage));
}

Tensor TensorAccess::Make(const os::TensorMeta& meta, Buffer storage) {
  Tensor t;
  t.dtype_ = FromStoreDType(meta.dtype);
  t.shape_ = meta.shape;
  t.strides_ = meta.strides;
  t.storage_offset_ = meta.storage_offset;
  t.contiguous_ = os::IsContiguous(meta);
  t.storage_ = Buffer(std::move(storage.storage_), storage.data(),
                      static_cast<size_t>(meta.data_size));
  return t;
}

os::TensorMeta TensorAccess::MetaOf(const Tensor& t) {
  os::TensorMeta meta;
  meta.dtype = ToStoreDType(t.dtype_);
  meta.byte_order = os::HostByteOrder();
  meta.shape = t.shape_;
  meta.strides = t.strides_;
  meta.storage_offset = t.storage_offset_;
  meta.data_size = t.storage_.size();
  return meta;
}

}  // namespace drover::internal
