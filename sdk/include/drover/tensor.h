// Bytes and tensors of the drover SDK, in this process's memory or read in place from
// this node's object store (drover/objects.h).
//
//   absl::StatusOr<drover::Tensor> t = drover::Tensor::Empty(drover::DType::kFloat32, {2, 3});
//   absl::StatusOr<float*> w = t->mutable_data<float>();   // fill it
//   DROVER_RETURN_IF_ERROR(objects.PutTensor("weights-7", *t));
//   // any process of the cluster:
//   absl::StatusOr<drover::Tensor> r = objects.GetTensor("weights-7", absl::Seconds(30));
//   absl::StatusOr<absl::Span<const float>> v = r->span<float>();  // in shared memory
//
// Buffer: immutable bytes. Either owned (a heap copy, 64-byte aligned) or a zero-copy
// view of a sealed object in this node's store, which it keeps pinned (never evicted,
// spilled or freed) until the last copy of the Buffer is gone.
//
// Tensor: a dtype, a shape, strides and a storage offset (both in ELEMENTS, as in
// PyTorch) over a storage: a Buffer (read-only) or an allocation this process owns
// (writable, 64-byte aligned). Elements are in this host's byte order.
//
// Ownership: Buffers and Tensors share their storage: a copy is cheap (a reference
// count) and sees the same bytes, so a write through one writable Tensor is seen by
// all its copies (as PyTorch tensors). Pointers returned by data() and friends stay
// valid while any copy that shares the storage lives, even after the Objects that
// read it is destroyed.
//
// Thread safety: the objects are values; reading them (and copying them) from several
// threads at once is safe. Writes into a writable tensor's elements are the caller's
// to order against readers.
//
// Errors (absl canonical codes): INVALID_ARGUMENT a wrong argument (a negative
// dimension, a value count that does not match the shape, the wrong element type for
// the dtype); FAILED_PRECONDITION an access the tensor's state does not allow (typed
// access to a non-contiguous tensor, writes to a read-only one: the message says what
// to do, usually Clone()); RESOURCE_EXHAUSTED an allocation that failed.
#ifndef DROVER_SDK_INCLUDE_DROVER_TENSOR_H_
#define DROVER_SDK_INCLUDE_DROVER_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "drover/dtype.h"

namespace drover {

// DType, DTypeSize, DTypeName, Float16, BFloat16, DTypeOf: drover/dtype.h.

// The most dimensions a tensor may have (the store's tensor header holds 16).
inline constexpr int kMaxTensorDims = 16;

namespace internal {
// What Buffers and Tensors share: memory of this process, or a store object pinned
// for as long as the Storage lives (sdk/internal/tensor_internal.h). Not for users.
class Storage {
 public:
  virtual ~Storage() = default;
  // True for memory of this process that tensors may write.
  virtual bool writable() const { return false; }
  virtual bool in_store() const { return false; }
  virtual absl::string_view metadata() const { return {}; }
  virtual const std::string& object_id() const;
};
struct TensorAccess;  // conversions to and from the store, for code inside drover

// Where Tensor::Empty takes writable storage of at least `min_bytes` from, when set: a
// task worker allocates such tensors in its node's store, unsealed, so that returning
// one from the task seals it in place instead of copying it (sdk/runtime/store_draft.h).
// The allocator returns null (Empty then uses this process's heap) when it cannot, and
// sets *data to the writable bytes otherwise. Not for users.
using LargeTensorAllocator = std::shared_ptr<Storage> (*)(size_t bytes, DType dtype,
                                                          const std::vector<int64_t>& shape,
                                                          uint8_t** data);
void SetLargeTensorAllocator(LargeTensorAllocator allocator, size_t min_bytes);
}  // namespace internal

class Buffer {
 public:
  // No bytes.
  Buffer() = default;
  // An owned copy of `bytes` (64-byte aligned). Like std::string, throws std::bad_alloc
  // if the memory cannot be had.
  static Buffer CopyOf(absl::Span<const uint8_t> bytes);
  static Buffer CopyOf(absl::string_view bytes);

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  absl::Span<const uint8_t> span() const { return absl::MakeConstSpan(data_, size_); }
  absl::string_view view() const {
    return absl::string_view(reinterpret_cast<const char*>(data_), size_);
  }

  // The metadata the object was put with (e.g. a tensor header), in place in the
  // store; empty for an owned Buffer.
  absl::string_view metadata() const;
  // True if the bytes are a sealed object pinned in this node's store.
  bool in_store() const;
  // The store object's id when in_store(); empty otherwise.
  const std::string& object_id() const;

 private:
  friend class Tensor;
  friend struct internal::TensorAccess;
  Buffer(std::shared_ptr<const internal::Storage> storage, const uint8_t* data, size_t size)
      : storage_(std::move(storage)), data_(data), size_(size) {}

  std::shared_ptr<const internal::Storage> storage_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

class Tensor {
 public:
  // A float32 tensor of shape [0]: no elements, no storage.
  Tensor();

  // A contiguous (row-major) tensor of `shape`, zero-filled, in a writable allocation
  // this process owns (64-byte aligned). INVALID_ARGUMENT for a negative dimension, an
  // unknown dtype, more than 16 dimensions or a size that overflows; RESOURCE_EXHAUSTED
  // when the memory cannot be had.
  static absl::StatusOr<Tensor> Empty(DType dtype, std::vector<int64_t> shape);

  // A contiguous, writable tensor holding a copy of `values` with `shape`, or 1-D
  // without one. INVALID_ARGUMENT when the shape's element count is not values.size().
  template <typename T>
  static absl::StatusOr<Tensor> FromVector(const std::vector<T>& values,
                                           std::vector<int64_t> shape) {
    static_assert(std::is_trivially_copyable<T>::value, "elements are plain bytes");
    static_assert(!std::is_same<T, bool>::value,
                  "std::vector<bool> packs bits: fill Empty(DType::kBool, ...) instead");
    return FromBytes(DTypeOf<T>::value, std::move(shape), values.data(),
                     values.size() * sizeof(T));
  }
  template <typename T>
  static absl::StatusOr<Tensor> FromVector(const std::vector<T>& values) {
    return FromVector(values, {static_cast<int64_t>(values.size())});
  }

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }  // in elements
  int64_t storage_offset() const { return storage_offset_; }        // in elements
  int ndim() const { return static_cast<int>(shape_.size()); }
  // Product of the shape: 1 for a scalar (shape []), 0 if any dimension is 0.
  int64_t numel() const;
  // numel() * DTypeSize(dtype()).
  size_t nbytes() const;
  // Row-major with no gaps (dimensions of size 1 ignored; no elements: contiguous).
  bool is_contiguous() const;
  // True if the elements may be written (mutable_data): an allocation of this process.
  bool writable() const;
  // True if the elements are a sealed object in this node's store (then read-only).
  bool in_store() const { return storage_.in_store(); }
  // The store object's id when in_store(); empty otherwise.
  const std::string& object_id() const { return storage_.object_id(); }

  // "float32[2, 3]".
  std::string Describe() const;

  // The first element (storage offset applied); nullptr without storage. Element
  // (i, j, ...) is at raw_data() + (i * strides()[0] + j * strides()[1] + ...) * DTypeSize.
  const void* raw_data() const;

  // Typed read access to the elements of a contiguous tensor. INVALID_ARGUMENT if T is
  // not the dtype's type; FAILED_PRECONDITION if the tensor is not contiguous.
  template <typename T>
  absl::StatusOr<const T*> data() const {
    absl::Status s = CheckAccess(DTypeOf<T>::value, /*write=*/false);
    if (!s.ok()) return s;
    return static_cast<const T*>(raw_data());
  }
  template <typename T>
  absl::StatusOr<absl::Span<const T>> span() const {
    absl::Status s = CheckAccess(DTypeOf<T>::value, /*write=*/false);
    if (!s.ok()) return s;
    return absl::MakeConstSpan(static_cast<const T*>(raw_data()), static_cast<size_t>(numel()));
  }
  // Typed write access: as data(), and FAILED_PRECONDITION unless writable().
  template <typename T>
  absl::StatusOr<T*> mutable_data() {
    absl::Status s = CheckAccess(DTypeOf<T>::value, /*write=*/true);
    if (!s.ok()) return s;
    return static_cast<T*>(const_cast<void*>(raw_data()));
  }
  template <typename T>
  absl::StatusOr<absl::Span<T>> mutable_span() {
    absl::Status s = CheckAccess(DTypeOf<T>::value, /*write=*/true);
    if (!s.ok()) return s;
    return absl::MakeSpan(static_cast<T*>(const_cast<void*>(raw_data())),
                          static_cast<size_t>(numel()));
  }

  // A contiguous, writable copy of this tensor's elements in an allocation of its own
  // (e.g. to modify a tensor read from the store, or to compact a strided view).
  absl::StatusOr<Tensor> Clone() const;

 private:
  friend struct internal::TensorAccess;
  static absl::StatusOr<Tensor> FromBytes(DType dtype, std::vector<int64_t> shape,
                                          const void* bytes, size_t size);
  absl::Status CheckAccess(DType want, bool write) const;

  DType dtype_ = DType::kFloat32;
  std::vector<int64_t> shape_;
  std::vector<int64_t> strides_;
  int64_t storage_offset_ = 0;
  bool contiguous_ = true;
  Buffer storage_;  // the bytes the tensor views (all of its storage)
};

}  // namespace drover

#endif  // DROVER_SDK_INCLUDE_DROVER_TENSOR_H_
