#include "drover/tensor.h"

#include <atomic>
#include <cstring>
#include <limits>
#include <new>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "object_store/tensor.h"

namespace drover {
namespace {

namespace os = object_store;

constexpr size_t kAlignment = 64;

// Heap memory of this process, 64-byte aligned.
class HeapStorage final : public internal::Storage {
 public:
  // Null when the memory cannot be had. REQUIRES: size > 0.
  static std::shared_ptr<HeapStorage> New(size_t size, bool writable) {
    void* p = ::operator new(size, std::align_val_t(kAlignment), std::nothrow);
    if (p == nullptr) return nullptr;
    return std::shared_ptr<HeapStorage>(new HeapStorage(static_cast<uint8_t*>(p), writable));
  }
  ~HeapStorage() override { ::operator delete(data_, std::align_val_t(kAlignment)); }
  HeapStorage(const HeapStorage&) = delete;
  HeapStorage& operator=(const HeapStorage&) = delete;

  uint8_t* data() const { return data_; }
  bool writable() const override { return writable_; }

 private:
  HeapStorage(uint8_t* data, bool writable) : data_(data), writable_(writable) {}
  uint8_t* const data_;
  const bool writable_;
};

absl::Status OutOfMemory(size_t bytes) {
  return absl::ResourceExhaustedError(
      absl::StrCat("cannot allocate ", bytes, " bytes for a tensor in this process"));
}

std::string ShapeText(DType dtype, const std::vector<int64_t>& shape) {
  return absl::StrCat(DTypeName(dtype), "[", absl::StrJoin(shape, ", "), "]");
}

// The byte size of a contiguous tensor of `shape`, after checking the dtype and shape.
absl::StatusOr<size_t> ContiguousBytes(DType dtype, const std::vector<int64_t>& shape) {
  const size_t elem = DTypeSize(dtype);
  if (elem == 0) return absl::InvalidArgumentError(absl::StrCat("unknown ", DTypeName(dtype)));
  if (shape.size() > static_cast<size_t>(kMaxTensorDims)) {
    return absl::InvalidArgumentError(absl::StrCat("a tensor has at most ", kMaxTensorDims,
                                                   " dimensions, not ", shape.size()));
  }
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape [", absl::StrJoin(shape, ", "), "] has a negative dimension"));
    }
    if (d != 0 && numel > std::numeric_limits<int64_t>::max() / static_cast<int64_t>(elem) / d) {
      return absl::InvalidArgumentError(
          absl::StrCat(ShapeText(dtype, shape), " is too large"));
    }
    numel *= d;
  }
  return static_cast<size_t>(numel) * elem;
}

// Copies the elements of `t` (any strides) into `out`, densely in row-major order.
void CopyElements(const Tensor& t, uint8_t* out) {
  const size_t elem = DTypeSize(t.dtype());
  const auto* base = static_cast<const uint8_t*>(t.raw_data());
  const int64_t n = t.numel();
  if (n == 0) return;
  std::vector<int64_t> idx(t.ndim(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (int d = 0; d < t.ndim(); ++d) off += idx[d] * t.strides()[d];
    std::memcpy(out + i * elem, base + off * static_cast<int64_t>(elem), elem);
    for (int d = t.ndim() - 1; d >= 0; --d) {  // next index, last dimension fastest
      if (++idx[d] < t.shape()[d]) break;
      idx[d] = 0;
    }
  }
}

const std::string& NoObjectId() {
  static const std::string* const kNone = new std::string();
  return *kNone;
}

}  // namespace

const std::string& internal::Storage::object_id() const { return NoObjectId(); }

Buffer Buffer::CopyOf(absl::Span<const uint8_t> bytes) {
  if (bytes.empty()) return Buffer();
  std::shared_ptr<HeapStorage> s = HeapStorage::New(bytes.size(), /*writable=*/false);
  if (s == nullptr) throw std::bad_alloc();  // as std::string would
  std::memcpy(s->data(), bytes.data(), bytes.size());
  const uint8_t* data = s->data();
  return Buffer(std::move(s), data, bytes.size());
}

Buffer Buffer::CopyOf(absl::string_view bytes) {
  return CopyOf(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

absl::string_view Buffer::metadata() const {
  return storage_ == nullptr ? absl::string_view() : storage_->metadata();
}

bool Buffer::in_store() const { return storage_ != nullptr && storage_->in_store(); }

const std::string& Buffer::object_id() const {
  return storage_ == nullptr ? NoObjectId() : storage_->object_id();
}

Tensor::Tensor() : shape_{0}, strides_{1} {}

namespace {

std::atomic<internal::LargeTensorAllocator> large_allocator{nullptr};
std::atomic<size_t> large_min_bytes{0};

}  // namespace

namespace internal {

void SetLargeTensorAllocator(LargeTensorAllocator allocator, size_t min_bytes) {
  large_min_bytes.store(min_bytes);
  large_allocator.store(allocator);
}

}  // namespace internal

absl::StatusOr<Tensor> Tensor::Empty(DType dtype, std::vector<int64_t> shape) {
  DROVER_ASSIGN_OR_RETURN(const size_t bytes, ContiguousBytes(dtype, shape));
  Tensor t;
  t.dtype_ = dtype;
  t.strides_ = os::ContiguousStrides(shape);
  t.shape_ = std::move(shape);
  internal::LargeTensorAllocator large = large_allocator.load();
  if (large != nullptr && bytes >= large_min_bytes.load() && bytes > 0) {
    uint8_t* data = nullptr;
    std::shared_ptr<internal::Storage> s = large(bytes, dtype, t.shape_, &data);
    if (s != nullptr) {
      std::memset(data, 0, bytes);
      t.storage_ = Buffer(std::move(s), data, bytes);
      return t;
    }
  }
  if (bytes > 0) {
    std::shared_ptr<HeapStorage> s = HeapStorage::New(bytes, /*writable=*/true);
    if (s == nullptr) return OutOfMemory(bytes);
    std::memset(s->data(), 0, bytes);
    const uint8_t* data = s->data();
    t.storage_ = Buffer(std::move(s), data, bytes);
  }
  return t;
}

absl::StatusOr<Tensor> Tensor::FromBytes(DType dtype, std::vector<int64_t> shape,
                                         const void* bytes, size_t size) {
  DROVER_ASSIGN_OR_RETURN(const size_t want, ContiguousBytes(dtype, shape));
  if (want != size) {
    return absl::InvalidArgumentError(absl::StrCat(
        size / DTypeSize(dtype), " values do not fill a tensor of ", ShapeText(dtype, shape),
        " (", want / DTypeSize(dtype), " elements)"));
  }
  DROVER_ASSIGN_OR_RETURN(Tensor t, Empty(dtype, std::move(shape)));
  if (size > 0) std::memcpy(const_cast<void*>(t.raw_data()), bytes, size);
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

size_t Tensor::nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype_); }

bool Tensor::is_contiguous() const { return contiguous_; }

bool Tensor::writable() const {
  return storage_.storage_ != nullptr && storage_.storage_->writable();
}

std::string Tensor::Describe() const { return ShapeText(dtype_, shape_); }

const void* Tensor::raw_data() const {
  if (storage_.data() == nullptr) return nullptr;
  return storage_.data() + storage_offset_ * static_cast<int64_t>(DTypeSize(dtype_));
}

absl::Status Tensor::CheckAccess(DType want, bool write) const {
  if (want != dtype_) {
    return absl::InvalidArgumentError(absl::StrCat("the tensor (", Describe(), ") holds ",
                                                   DTypeName(dtype_), " elements, not ",
                                                   DTypeName(want)));
  }
  if (!contiguous_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the tensor (", Describe(), ", strides [", absl::StrJoin(strides_, ", "),
        "]) is not contiguous; Clone() makes a contiguous copy"));
  }
  if (write && !writable()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the tensor (", Describe(), ") is read-only",
        in_store() ? absl::StrCat(": it is store object '", object_id(), "'") : "",
        "; Clone() makes a writable copy"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> Tensor::Clone() const {
  DROVER_ASSIGN_OR_RETURN(Tensor t, Empty(dtype_, shape_));
  auto* out = static_cast<uint8_t*>(const_cast<void*>(t.raw_data()));
  if (contiguous_) {
    if (nbytes() > 0) std::memcpy(out, raw_data(), nbytes());
  } else {
    CopyElements(*this, out);
  }
  return t;
}

}  // namespace drover
