// Fuzzing helper: reads elements of a tensor through the typed view its meta gives, so
// that a view reaching outside its bytes is caught by AddressSanitizer (the callers
// hold the bytes in a heap block of exactly their size). Header-only, testonly.
#ifndef DROVER_FUZZ_TENSOR_CHECK_H_
#define DROVER_FUZZ_TENSOR_CHECK_H_

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "object_store/tensor.h"

namespace drover::fuzz {

template <typename T>
void TouchView(const object_store::TensorView<T>& v, size_t max_elements) {
  const int nd = v.ndim();
  std::vector<int64_t> idx(nd, 0);
  auto touch = [&] {
    int64_t off = 0;
    for (int i = 0; i < nd; ++i) off += idx[i] * v.stride(i);
    unsigned char bytes[sizeof(T)];
    std::memcpy(bytes, v.data() + off, sizeof(T));  // ASan checks the whole element
    // The checked accessor reads the same element. Not for bool: its bytes come from
    // outside and may be neither 0 nor 1, and loading such a bool is undefined (as in
    // any C++ view of foreign bytes; see docs/fuzzing.md).
    if constexpr (!std::is_same_v<T, bool>) {
      absl::StatusOr<T> checked = v.At(idx);
      if (!checked.ok() || std::memcmp(&*checked, bytes, sizeof(T)) != 0) std::abort();
    }
  };
  if (v.size() == 0) return;
  touch();  // the first element
  for (int i = 0; i < nd; ++i) idx[i] = v.dim(i) - 1;
  touch();  // the last one: the largest offset the view addresses
  std::fill(idx.begin(), idx.end(), 0);
  for (size_t n = 0; n < max_elements; ++n) {
    touch();
    int d = nd - 1;
    while (d >= 0 && ++idx[d] == v.dim(d)) idx[d--] = 0;
    if (d < 0) break;
  }
}

// Views `data` (`size` bytes) as `meta` says and reads its corners and up to
// `max_elements` elements. Returns the view's status (an error for a meta that does not
// fit the bytes, the wrong byte order, misaligned data).
inline absl::Status TouchTensor(const object_store::TensorMeta& meta, const void* data,
                                size_t size, size_t max_elements = 4096) {
  using object_store::DType;
  using object_store::ViewAs;
  auto run = [&](auto tag) -> absl::Status {
    using T = decltype(tag);
    absl::StatusOr<object_store::TensorView<T>> v = ViewAs<T>(meta, data, size);
    if (!v.ok()) return v.status();
    TouchView(*v, max_elements);
    return absl::OkStatus();
  };
  switch (meta.dtype) {
    case DType::kFloat16: return run(object_store::Float16{});
    case DType::kBFloat16: return run(object_store::BFloat16{});
    case DType::kFloat32: return run(float{});
    case DType::kFloat64: return run(double{});
    case DType::kInt8: return run(int8_t{});
    case DType::kUInt8: return run(uint8_t{});
    case DType::kInt16: return run(int16_t{});
    case DType::kInt32: return run(int32_t{});
    case DType::kInt64: return run(int64_t{});
    case DType::kBool: return run(bool{});
  }
  return absl::InvalidArgumentError("unknown dtype");
}

}  // namespace drover::fuzz

#endif  // DROVER_FUZZ_TENSOR_CHECK_H_
