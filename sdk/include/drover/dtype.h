// Element types of tensors: DType, its size and name, and DTypeOf<T>.
//
// One definition for the SDK's public API (drover/tensor.h) and the object store's
// tensor format (object_store/tensor.h aliases these). That is why this header is a
// leaf: it includes only the standard library, so the store can include it without
// reaching up into the rest of the SDK.
//
// Thread safety: pure functions and constants.
#ifndef DROVER_SDK_INCLUDE_DROVER_DTYPE_H_
#define DROVER_SDK_INCLUDE_DROVER_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace drover {

// Element types. The numeric values are part of the store's tensor header
// (docs/object_store.md): never renumber, only append.
enum class DType : uint8_t {
  kFloat16 = 1,
  kBFloat16 = 2,
  kFloat32 = 3,
  kFloat64 = 4,
  kInt8 = 5,
  kUInt8 = 6,
  kInt16 = 7,
  kInt32 = 8,
  kInt64 = 9,
  kBool = 10,
};

// Bytes of one element; 0 for a value that is not a DType.
inline size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kInt16:
      return 2;
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kFloat64:
    case DType::kInt64:
      return 8;
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kBool:
      return 1;
  }
  return 0;
}

// "float32", ...; "dtype(<n>)" for a value that is not a DType.
inline std::string DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kInt8: return "int8";
    case DType::kUInt8: return "uint8";
    case DType::kInt16: return "int16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kBool: return "bool";
  }
  return "dtype(" + std::to_string(static_cast<int>(dtype)) + ")";
}

// 16-bit floats are stored and moved, not computed on: their bits.
struct Float16 {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

// The DType of a C++ element type (a compile error for a type without one).
template <typename T>
struct DTypeOf;
template <> struct DTypeOf<Float16> { static constexpr DType value = DType::kFloat16; };
template <> struct DTypeOf<BFloat16> { static constexpr DType value = DType::kBFloat16; };
template <> struct DTypeOf<float> { static constexpr DType value = DType::kFloat32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::kFloat64; };
template <> struct DTypeOf<int8_t> { static constexpr DType value = DType::kInt8; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::kUInt8; };
template <> struct DTypeOf<int16_t> { static constexpr DType value = DType::kInt16; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::kInt32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::kInt64; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::kBool; };

}  // namespace drover

#endif  // DROVER_SDK_INCLUDE_DROVER_DTYPE_H_
