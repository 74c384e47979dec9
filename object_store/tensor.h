// The tensor object format: how a tensor is laid out in an object of the store, so a
// reader in another process gets a typed view of the elements with no copy.
//
// A tensor object's METADATA section holds exactly one TensorHeader (encoded by
// EncodeTensorHeader); its DATA section (64-byte aligned by the store) holds the
// elements. The byte layout and its versioning rule are specified in
// docs/object_store.md ("Tensor header"); the constants below are that table.
//
// Everything read from shared memory is untrusted: DecodeTensorHeader checks every
// field and that every element addressed by shape/strides/storage offset lies inside
// the data section, so a view built from a decoded meta can never read out of bounds.
//
// Thread safety: free functions are pure; a TensorView is an immutable value (it does
// not own the bytes: the caller keeps the object referenced while the view is used).
#ifndef DROVER_OBJECT_STORE_TENSOR_H_
#define DROVER_OBJECT_STORE_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "drover/dtype.h"

namespace drover::object_store {

// Element types (DType, DTypeSize, DTypeName, Float16, BFloat16, DTypeOf): one
// definition, shared with the SDK's public API, in the leaf header drover/dtype.h.
// Their numeric values are part of this format: never renumber, only append.
using ::drover::BFloat16;
using ::drover::DType;
using ::drover::DTypeName;
using ::drover::DTypeOf;
using ::drover::DTypeSize;
using ::drover::Float16;

// Byte order of the elements in the data section (the header itself is always
// little-endian). Writers record their host order; readers only get typed views of
// host-order data.
enum class ByteOrder : uint8_t {
  kLittle = 0,
  kBig = 1,
};

ByteOrder HostByteOrder();

// Every DType, for tests and tools.
inline constexpr DType kAllDTypes[] = {
    DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64, DType::kInt8,
    DType::kUInt8,   DType::kInt16,    DType::kInt32,   DType::kInt64,   DType::kBool,
};

// Header constants (see docs/object_store.md for the full table).
inline constexpr char kTensorMagic[4] = {'D', 'R', 'T', 'N'};
inline constexpr uint16_t kTensorHeaderVersion = 1;
inline constexpr int kMaxTensorDims = 16;
inline constexpr size_t kTensorHeaderFixedSize = 32;  // before shape[] and strides[]
// Encoded size of a header with `ndim` dimensions.
constexpr size_t TensorHeaderSize(int ndim) { return kTensorHeaderFixedSize + 16 * ndim; }

// The decoded header. strides and storage_offset count ELEMENTS (as in PyTorch), not
// bytes. data_size is the byte size of the storage the tensor views (the data section
// may be larger, never smaller).
struct TensorMeta {
  DType dtype = DType::kFloat32;
  ByteOrder byte_order = HostByteOrder();
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  int64_t storage_offset = 0;
  uint64_t data_size = 0;

  int ndim() const { return static_cast<int>(shape.size()); }
  friend bool operator==(const TensorMeta& a, const TensorMeta& b);
  friend bool operator!=(const TensorMeta& a, const TensorMeta& b) { return !(a == b); }
};

// Row-major strides for `shape` (last dimension stride 1). REQUIRES: the number of
// elements fits in int64 (true for any meta that passed validation).
std::vector<int64_t> ContiguousStrides(absl::Span<const int64_t> shape);

// Convenience: a contiguous host-order tensor of `shape` filling exactly its data.
// REQUIRES: as for ContiguousStrides; dimensions >= 0.
TensorMeta ContiguousMeta(DType dtype, std::vector<int64_t> shape);

// Product of the shape (1 for a scalar, 0 if any dimension is 0).
// REQUIRES: `meta` passed ValidateTensorMeta (so the product cannot overflow).
int64_t NumElements(const TensorMeta& meta);

// True if the elements are laid out row-major with no gaps, i.e. strides equal
// ContiguousStrides(shape) ignoring dimensions of size 1 (PyTorch's rule; a tensor with
// no elements is contiguous). The storage offset does not matter.
bool IsContiguous(const TensorMeta& meta);

// Checks `meta` on its own terms and against a data section of `data_section_size`
// bytes: known dtype and byte order, ndim <= kMaxTensorDims, strides.size() == ndim,
// non-negative shape/strides/storage offset, no int64 overflow in the number of elements
// or in any offset, meta.data_size <= data_section_size, and every addressed element
// inside [0, meta.data_size). INVALID_ARGUMENT naming the field otherwise.
absl::Status ValidateTensorMeta(const TensorMeta& meta, uint64_t data_section_size);

// Encodes `meta` (validated against its own data_size first) as a header.
absl::StatusOr<std::string> EncodeTensorHeader(const TensorMeta& meta);

// Decodes a header and validates everything (ValidateTensorMeta against its own
// data_size; the magic, version, reserved bytes and exact length). Never reads past
// `bytes`, whatever they contain.
absl::StatusOr<TensorMeta> DecodeTensorHeader(absl::string_view bytes);
// The same, and checks the header against the real data section of the object
// (ObjectLocation::data_size): use this on objects read from the store.
absl::StatusOr<TensorMeta> DecodeTensorHeader(absl::string_view bytes,
                                              uint64_t data_section_size);

namespace internal {
// The non-template parts of ViewAs and TensorView::At.
absl::Status CheckView(const TensorMeta& meta, DType want, size_t align, const void* data,
                       size_t data_size);
absl::Status CheckIndex(absl::Span<const int64_t> idx, int ndim, const int64_t* shape);
}  // namespace internal

// A read-only, zero-copy, strided view of typed elements. Does not own the bytes.
// Built only by ViewAs, so every in-range index addresses memory inside the data.
template <typename T>
class TensorView {
 public:
  int ndim() const { return ndim_; }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t stride(int i) const { return strides_[i]; }
  absl::Span<const int64_t> shape() const { return absl::MakeConstSpan(shape_, ndim_); }
  absl::Span<const int64_t> strides() const { return absl::MakeConstSpan(strides_, ndim_); }
  int64_t size() const { return numel_; }
  // Pointer to element (0, ..., 0) (the storage offset applied).
  const T* data() const { return base_; }

  // Unchecked access. REQUIRES: sizeof...(idx) == ndim() and 0 <= idx[i] < dim(i).
  template <typename... I>
  const T& operator()(I... idx) const {
    static_assert(sizeof...(I) <= kMaxTensorDims, "too many indices");
    const int64_t ix[] = {0, static_cast<int64_t>(idx)...};
    int64_t off = 0;
    for (size_t i = 0; i < sizeof...(I); ++i) off += ix[i + 1] * strides_[i];
    return base_[off];
  }

  // Checked access: OUT_OF_RANGE for an index outside its dimension, INVALID_ARGUMENT
  // for the wrong number of indices.
  template <typename... I>
  absl::StatusOr<T> at(I... idx) const {
    const int64_t ix[] = {0, static_cast<int64_t>(idx)...};
    return At(absl::MakeConstSpan(ix + 1, sizeof...(I)));
  }
  absl::StatusOr<T> At(absl::Span<const int64_t> idx) const {
    absl::Status s = internal::CheckIndex(idx, ndim_, shape_);
    if (!s.ok()) return s;
    int64_t off = 0;
    for (int i = 0; i < ndim_; ++i) off += idx[i] * strides_[i];
    return base_[off];
  }

 private:
  template <typename U>
  friend absl::StatusOr<TensorView<U>> ViewAs(const TensorMeta&, const void*, size_t);

  const T* base_ = nullptr;
  int ndim_ = 0;
  int64_t numel_ = 0;
  int64_t shape_[kMaxTensorDims] = {};
  int64_t strides_[kMaxTensorDims] = {};
};

// A typed view of `data` (the object's data section, `data_size` bytes) as described by
// `meta`. Validates `meta` against data_size, so it is safe on any meta. Errors:
// INVALID_ARGUMENT if the dtype is not T's or the meta does not fit the data or `data`
// is not aligned for T; FAILED_PRECONDITION if the data is not in host byte order
// (multi-byte dtypes only).
template <typename T>
absl::StatusOr<TensorView<T>> ViewAs(const TensorMeta& meta, const void* data,
                                     size_t data_size) {
  static_assert(std::is_trivially_copyable<T>::value, "element types are plain bytes");
  absl::Status s =
      internal::CheckView(meta, DTypeOf<T>::value, alignof(T), data, data_size);
  if (!s.ok()) return s;
  TensorView<T> v;
  v.base_ = static_cast<const T*>(data) + meta.storage_offset;
  v.ndim_ = meta.ndim();
  v.numel_ = NumElements(meta);
  for (int i = 0; i < v.ndim_; ++i) {
    v.shape_[i] = meta.shape[i];
    v.strides_[i] = meta.strides[i];
  }
  return v;
}

}  // namespace drover::object_store

#endif  // DROVER_OBJECT_STORE_TENSOR_H_
