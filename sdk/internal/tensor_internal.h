// Buffers and Tensors over objects of this node's store, and their conversion to the
// store's tensor header (object_store/tensor.h, DRTN v1). For code inside drover
// (sdk/objects.cc, sdk/tensor_collectives.cc, the task layer): the public headers never
// name the store's types.
//
// Ownership: a Buffer or Tensor made from an ObjectRef takes it over: the object stays
// pinned in the store until the last Buffer/Tensor sharing it is destroyed.
// Thread safety: pure functions over values.
#ifndef DROVER_SDK_INTERNAL_TENSOR_INTERNAL_H_
#define DROVER_SDK_INTERNAL_TENSOR_INTERNAL_H_

#include "absl/status/statusor.h"
#include "drover/tensor.h"
#include "object_store/client.h"
#include "object_store/tensor.h"

namespace drover::internal {

static_assert(kMaxTensorDims == object_store::kMaxTensorDims);

// DType is one type (drover/dtype.h); these name the direction at call sites.
inline object_store::DType ToStoreDType(DType d) { return static_cast<object_store::DType>(d); }
inline DType FromStoreDType(object_store::DType d) { return static_cast<DType>(d); }

struct TensorAccess {
  // A Buffer over the data section of a pinned object (zero copy).
  // REQUIRES: ref.valid().
  static Buffer FromObject(object_store::ObjectRef ref);
  // A read-only Tensor over a pinned object, described by the tensor header in its
  // metadata (decoded and validated against the data section: never out of bounds).
  // INVALID_ARGUMENT naming the object if the header is not valid; FAILED_PRECONDITION
  // if the elements are not in this host's byte order. REQUIRES: ref.valid().
  static absl::StatusOr<Tensor> TensorFromObject(object_store::ObjectRef ref);
  // A Tensor of `meta` over the first meta.data_size bytes of `storage`.
  // REQUIRES: ValidateTensorMeta(meta, storage.size()) is OK and meta is in host order.
  static Tensor Make(const object_store::TensorMeta& meta, Buffer storage);

  // The tensor as the store describes it: host byte order; data_size is the size of
  // its storage (StorageOf), which is what the object's data section holds.
  static object_store::TensorMeta MetaOf(const Tensor& t);
  // All the bytes the tensor views (its storage offset and strides address into them).
  static const Buffer& StorageOf(const Tensor& t) { return t.storage_; }
  // What a Buffer's bytes belong to (null for an empty Buffer).
  static const Storage* StorageObject(const Buffer& b) { return b.storage_.get(); }
  // A Buffer over `size` bytes at `data` that `storage` owns.
  static Buffer Wrap(std::shared_ptr<const Storage> storage, const uint8_t* data, size_t size) {
    return Buffer(std::move(storage), data, size);
  }
};

}  // namespace drover::internal

#endif  // DROVER_SDK_INTERNAL_TENSOR_INTERNAL_H_
