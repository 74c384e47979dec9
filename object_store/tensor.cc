#include "object_store/tensor.h"

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace drover::object_store {
namespace {

// Byte offsets of the fixed part (docs/object_store.md, "Tensor header").
constexpr size_t kOffMagic = 0;
constexpr size_t kOffVersion = 4;
constexpr size_t kOffHeaderSize = 6;
constexpr size_t kOffDType = 8;
constexpr size_t kOffByteOrder = 9;
constexpr size_t kOffNdim = 10;
constexpr size_t kOffReserved8 = 11;
constexpr size_t kOffReserved32 = 12;
constexpr size_t kOffStorageOffset = 16;
constexpr size_t kOffDataSize = 24;
static_assert(kOffDataSize + 8 == kTensorHeaderFixedSize, "fixed part layout");
static_assert(TensorHeaderSize(kMaxTensorDims) <= std::numeric_limits<uint16_t>::max(),
              "header_size field is 16 bits");
static_assert(sizeof(bool) == 1, "bool elements are one byte");
static_assert(sizeof(Float16) == 2 && sizeof(BFloat16) == 2, "16-bit storage types");

// Header fields are little-endian whatever the host: written and read byte by byte.
void PutLE(std::string* out, size_t off, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) (*out)[off + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint64_t GetLE(absl::string_view in, size_t off, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) {
    v |= static_cast<uint64_t>(static_cast<unsigned char>(in[off + i])) << (8 * i);
  }
  return v;
}

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("tensor header: ", field, ": ", what));
}

}  // namespace

ByteOrder HostByteOrder() {
  const uint16_t probe = 1;
  unsigned char first;
  std::memcpy(&first, &probe, 1);
  return first == 1 ? ByteOrder::kLittle : ByteOrder::kBig;
}

bool operator==(const TensorMeta& a, const TensorMeta& b) {
  return a.dtype == b.dtype && a.byte_order == b.byte_order && a.shape == b.shape &&
         a.strides == b.strides && a.storage_offset == b.storage_offset &&
         a.data_size == b.data_size;
}

std::vector<int64_t> ContiguousStrides(absl::Span<const int64_t> shape) {
  // PyTorch's rule: a dimension of size 0 counts as 1. Saturates instead of overflowing
  // for shapes that would not pass validation.
  std::vector<int64_t> strides(shape.size());
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = expected;
    int64_t next;
    if (__builtin_mul_overflow(expected, shape[i] > 1 ? shape[i] : 1, &next)) {
      next = std::numeric_limits<int64_t>::max();
    }
    expected = next;
  }
  return strides;
}

TensorMeta ContiguousMeta(DType dtype, std::vector<int64_t> shape) {
  TensorMeta meta;
  meta.dtype = dtype;
  meta.strides = ContiguousStrides(shape);
  meta.shape = std::move(shape);
  int64_t n = 1;
  for (int64_t d : meta.shape) n *= d;
  meta.data_size = static_cast<uint64_t>(n) * DTypeSize(dtype);
  return meta;
}

int64_t NumElements(const TensorMeta& meta) {
  int64_t n = 1;
  for (int64_t d : meta.shape) {
    if (d == 0) return 0;
  }
  for (int64_t d : meta.shape) n *= d;
  return n;
}

bool IsContiguous(const TensorMeta& meta) {
  if (NumElements(meta) == 0) return true;
  int64_t expected = 1;
  for (int i = meta.ndim(); i-- > 0;) {
    if (meta.shape[i] == 1) continue;
    if (meta.strides[i] != expected) return false;
    expected *= meta.shape[i];
  }
  return true;
}

absl::Status ValidateTensorMeta(const TensorMeta& meta, uint64_t data_section_size) {
  const size_t elem = DTypeSize(meta.dtype);
  if (elem == 0) {
    return Invalid("dtype", absl::StrCat("unknown value ", static_cast<int>(meta.dtype)));
  }
  if (meta.byte_order != ByteOrder::kLittle && meta.byte_order != ByteOrder::kBig) {
    return Invalid("byte_order",
                   absl::StrCat("unknown value ", static_cast<int>(meta.byte_order),
                                " (0 = little, 1 = big)"));
  }
  if (meta.shape.size() > static_cast<size_t>(kMaxTensorDims)) {
    return Invalid("ndim", absl::StrCat(meta.shape.size(), " dimensions, at most ",
                                        kMaxTensorDims));
  }
  if (meta.strides.size() != meta.shape.size()) {
    return Invalid("strides", absl::StrCat(meta.strides.size(), " strides for ",
                                           meta.shape.size(), " dimensions"));
  }
  if (meta.storage_offset < 0) {
    return Invalid("storage_offset", absl::StrCat(meta.storage_offset, " is negative"));
  }
  bool empty = false;
  for (int i = 0; i < meta.ndim(); ++i) {
    if (meta.shape[i] < 0) {
      return Invalid(absl::StrCat("shape[", i, "]"), absl::StrCat(meta.shape[i], " is negative"));
    }
    if (meta.strides[i] < 0) {
      return Invalid(absl::StrCat("strides[", i, "]"),
                     absl::StrCat(meta.strides[i], " is negative"));
    }
    if (meta.shape[i] == 0) empty = true;
  }
  if (!empty) {
    int64_t n = 1;
    for (int i = 0; i < meta.ndim(); ++i) {
      if (__builtin_mul_overflow(n, meta.shape[i], &n)) {
        return Invalid("shape", absl::StrCat("the number of elements of [",
                                             absl::StrJoin(meta.shape, ", "),
                                             "] overflows int64"));
      }
    }
  }
  if (meta.data_size > data_section_size) {
    return Invalid("data_size", absl::StrCat(meta.data_size, " bytes, but the data section has ",
                                             data_section_size));
  }
  int64_t offset_bytes;
  if (__builtin_mul_overflow(meta.storage_offset, static_cast<int64_t>(elem), &offset_bytes) ||
      static_cast<uint64_t>(offset_bytes) > meta.data_size) {
    return Invalid("storage_offset",
                   absl::StrCat(meta.storage_offset, " elements of ", elem,
                                " bytes start beyond data_size ", meta.data_size));
  }
  if (empty) return absl::OkStatus();
  // The element with the largest offset is at index (shape[i] - 1) in every dimension
  // (strides are non-negative), so checking it bounds them all.
  int64_t last = meta.storage_offset;
  for (int i = 0; i < meta.ndim(); ++i) {
    int64_t step;
    if (__builtin_mul_overflow(meta.shape[i] - 1, meta.strides[i], &step) ||
        __builtin_add_overflow(last, step, &last)) {
      return Invalid(absl::StrCat("strides[", i, "]"),
                     absl::StrCat("the offset of the last element overflows int64 (shape ",
                                  meta.shape[i], ", stride ", meta.strides[i], ")"));
    }
  }
  int64_t end_bytes;
  if (__builtin_add_overflow(last, 1, &end_bytes) ||
      __builtin_mul_overflow(end_bytes, static_cast<int64_t>(elem), &end_bytes)) {
    return Invalid("shape/strides", "the byte offset of the last element overflows int64");
  }
  if (static_cast<uint64_t>(end_bytes) > meta.data_size) {
    return Invalid("shape/strides/storage_offset",
                   absl::StrCat("element ", last, " (bytes up to ", end_bytes,
                                ") lies beyond data_size ", meta.data_size, "; shape [",
                                absl::StrJoin(meta.shape, ", "), "], strides [",
                                absl::StrJoin(meta.strides, ", "), "], storage_offset ",
                                meta.storage_offset));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> EncodeTensorHeader(const TensorMeta& meta) {
  DROVER_RETURN_IF_ERROR(ValidateTensorMeta(meta, meta.data_size));
  const int ndim = meta.ndim();
  std::string out(TensorHeaderSize(ndim), '\0');
  std::memcpy(&out[kOffMagic], kTensorMagic, 4);
  PutLE(&out, kOffVersion, kTensorHeaderVersion, 2);
  PutLE(&out, kOffHeaderSize, TensorHeaderSize(ndim), 2);
  PutLE(&out, kOffDType, static_cast<uint8_t>(meta.dtype), 1);
  PutLE(&out, kOffByteOrder, static_cast<uint8_t>(meta.byte_order), 1);
  PutLE(&out, kOffNdim, ndim, 1);
  // kOffReserved8 and kOffReserved32 stay zero.
  PutLE(&out, kOffStorageOffset, static_cast<uint64_t>(meta.storage_offset), 8);
  PutLE(&out, kOffDataSize, meta.data_size, 8);
  for (int i = 0; i < ndim; ++i) {
    PutLE(&out, kTensorHeaderFixedSize + 8 * i, static_cast<uint64_t>(meta.shape[i]), 8);
    PutLE(&out, kTensorHeaderFixedSize + 8 * (ndim + i), static_cast<uint64_t>(meta.strides[i]),
          8);
  }
  return out;
}

absl::StatusOr<TensorMeta> DecodeTensorHeader(absl::string_view bytes) {
  if (bytes.size() < kTensorHeaderFixedSize) {
    return Invalid("length", absl::StrCat(bytes.size(), " bytes, a header has at least ",
                                          kTensorHeaderFixedSize));
  }
  if (std::memcmp(bytes.data() + kOffMagic, kTensorMagic, 4) != 0) {
    return Invalid("magic", "not \"DRTN\": this object is not a tensor");
  }
  const uint64_t version = GetLE(bytes, kOffVersion, 2);
  if (version != kTensorHeaderVersion) {
    return Invalid("version", absl::StrCat(version, " is not supported (this reader knows ",
                                           kTensorHeaderVersion, "); upgrade the reader"));
  }
  const uint64_t ndim = GetLE(bytes, kOffNdim, 1);
  if (ndim > static_cast<uint64_t>(kMaxTensorDims)) {
    return Invalid("ndim", absl::StrCat(ndim, " dimensions, at most ", kMaxTensorDims));
  }
  const uint64_t header_size = GetLE(bytes, kOffHeaderSize, 2);
  if (header_size != TensorHeaderSize(static_cast<int>(ndim))) {
    return Invalid("header_size", absl::StrCat(header_size, ", but ndim ", ndim, " needs ",
                                               TensorHeaderSize(static_cast<int>(ndim))));
  }
  if (bytes.size() != header_size) {
    return Invalid("length", absl::StrCat(bytes.size(), " bytes, but header_size is ",
                                          header_size));
  }
  if (GetLE(bytes, kOffReserved8, 1) != 0 || GetLE(bytes, kOffReserved32, 4) != 0) {
    return Invalid("reserved", "bytes 11..15 must be zero in version 1");
  }
  TensorMeta meta;
  meta.dtype = static_cast<DType>(GetLE(bytes, kOffDType, 1));
  meta.byte_order = static_cast<ByteOrder>(GetLE(bytes, kOffByteOrder, 1));
  meta.storage_offset = static_cast<int64_t>(GetLE(bytes, kOffStorageOffset, 8));
  meta.data_size = GetLE(bytes, kOffDataSize, 8);
  meta.shape.resize(ndim);
  meta.strides.resize(ndim);
  for (uint64_t i = 0; i < ndim; ++i) {
    meta.shape[i] = static_cast<int64_t>(GetLE(bytes, kTensorHeaderFixedSize + 8 * i, 8));
    meta.strides[i] =
        static_cast<int64_t>(GetLE(bytes, kTensorHeaderFixedSize + 8 * (ndim + i), 8));
  }
  DROVER_RETURN_IF_ERROR(ValidateTensorMeta(meta, meta.data_size));
  return meta;
}

absl::StatusOr<TensorMeta> DecodeTensorHeader(absl::string_view bytes,
                                              uint64_t data_section_size) {
  absl::StatusOr<TensorMeta> meta = DecodeTensorHeader(bytes);
  if (!meta.ok()) return meta;
  if (meta->data_size > data_section_size) {
    return Invalid("data_size", absl::StrCat(meta->data_size,
                                             " bytes, but the object's data section has ",
                                             data_section_size));
  }
  return meta;
}

namespace internal {

absl::Status CheckView(const TensorMeta& meta, DType want, size_t align, const void* data,
                       size_t data_size) {
  DROVER_RETURN_IF_ERROR(ValidateTensorMeta(meta, data_size));
  if (meta.dtype != want) {
    return absl::InvalidArgumentError(absl::StrCat("tensor has dtype ", DTypeName(meta.dtype),
                                                   ", but was viewed as ", DTypeName(want)));
  }
  if (DTypeSize(meta.dtype) > 1 && meta.byte_order != HostByteOrder()) {
    auto name = [](ByteOrder o) { return o == ByteOrder::kBig ? "big-endian" : "little-endian"; };
    return absl::FailedPreconditionError(absl::StrCat(
        "tensor data is ", name(meta.byte_order), " but this host is ",
        name(HostByteOrder()), ": a typed zero-copy view needs host byte order; copy the "
        "data and swap the bytes of each ", DTypeSize(meta.dtype), "-byte element first"));
  }
  if (data == nullptr && data_size > 0) {
    return absl::InvalidArgumentError("tensor data pointer is null");
  }
  if (reinterpret_cast<uintptr_t>(data) % align != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor data at ", reinterpret_cast<uintptr_t>(data),
                     " is not aligned to ", align, " bytes for ", DTypeName(want)));
  }
  return absl::OkStatus();
}

absl::Status CheckIndex(absl::Span<const int64_t> idx, int ndim, const int64_t* shape) {
  if (static_cast<int>(idx.size()) != ndim) {
    return absl::InvalidArgumentError(
        absl::StrCat(idx.size(), " indices for a tensor of ", ndim, " dimensions"));
  }
  for (int i = 0; i < ndim; ++i) {
    if (idx[i] < 0 || idx[i] >= shape[i]) {
      return absl::OutOfRangeError(absl::StrCat("index ", idx[i], " is outside dimension ", i,
                                                " of size ", shape[i]));
    }
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace drover::object_store
