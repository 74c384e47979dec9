#include "object_store/tensor.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace drover::object_store {
namespace {

using ::testing::HasSubstr;

// 64-byte aligned bytes, as the store's data section is.
struct AlignedBuffer {
  explicit AlignedBuffer(size_t n) : size(n) {
    ptr = static_cast<char*>(std::aligned_alloc(64, ((n + 63) / 64 + 1) * 64));
    std::memset(ptr, 0, ((n + 63) / 64 + 1) * 64);
  }
  ~AlignedBuffer() { std::free(ptr); }
  char* ptr;
  size_t size;
};

// Encodes, decodes and checks the round trip; returns the decoded meta.
TensorMeta RoundTrip(const TensorMeta& meta) {
  absl::StatusOr<std::string> header = EncodeTensorHeader(meta);
  EXPECT_TRUE(header.ok()) << header.status();
  if (!header.ok()) return {};
  EXPECT_EQ(header->size(), TensorHeaderSize(meta.ndim()));
  EXPECT_EQ(header->substr(0, 4), "DRTN");
  absl::StatusOr<TensorMeta> back = DecodeTensorHeader(*header, meta.data_size);
  EXPECT_TRUE(back.ok()) << back.status();
  if (!back.ok()) return {};
  EXPECT_EQ(*back, meta);
  return *back;
}

template <typename T>
void TypedRoundTrip() {
  const DType dtype = DTypeOf<T>::value;
  TensorMeta meta = ContiguousMeta(dtype, {2, 3, 4});
  EXPECT_EQ(meta.data_size, 24 * sizeof(T)) << DTypeName(dtype);
  EXPECT_EQ(DTypeSize(dtype), sizeof(T));
  TensorMeta back = RoundTrip(meta);
  AlignedBuffer buf(meta.data_size);
  for (size_t i = 0; i < meta.data_size; ++i) buf.ptr[i] = static_cast<char>(i * 7 + 1);
  absl::StatusOr<TensorView<T>> view = ViewAs<T>(back, buf.ptr, buf.size);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->size(), 24);
  EXPECT_EQ(view->data(), reinterpret_cast<const T*>(buf.ptr));  // zero copy
  // Element (1, 2, 3) is the last one of a contiguous 2x3x4 tensor.
  EXPECT_EQ(&(*view)(1, 2, 3), reinterpret_cast<const T*>(buf.ptr) + 23);
  EXPECT_EQ(&(*view)(1, 0, 2), reinterpret_cast<const T*>(buf.ptr) + 14);
}

TEST(TensorTest, RoundTripEveryDType) {
  TypedRoundTrip<Float16>();
  TypedRoundTrip<BFloat16>();
  TypedRoundTrip<float>();
  TypedRoundTrip<double>();
  TypedRoundTrip<int8_t>();
  TypedRoundTrip<uint8_t>();
  TypedRoundTrip<int16_t>();
  TypedRoundTrip<int32_t>();
  TypedRoundTrip<int64_t>();
  TypedRoundTrip<bool>();
  for (DType d : kAllDTypes) {
    TensorMeta meta = ContiguousMeta(d, {5, 1, 7});
    meta.storage_offset = 3;
    meta.data_size += 3 * DTypeSize(d);
    RoundTrip(meta);
  }
}

TEST(TensorTest, ExactByteLayout) {
  TensorMeta meta;
  meta.dtype = DType::kInt32;
  meta.byte_order = ByteOrder::kLittle;
  meta.shape = {2, 3};
  meta.strides = {3, 1};
  meta.storage_offset = 1;
  meta.data_size = 28;
  absl::StatusOr<std::string> h = EncodeTensorHeader(meta);
  ASSERT_TRUE(h.ok()) << h.status();
  const unsigned char want[] = {
      'D', 'R', 'T', 'N', 1, 0, 64, 0,  // magic, version 1, header_size 64
      8, 0, 2, 0, 0, 0, 0, 0,           // int32, little, ndim 2, reserved
      1, 0, 0, 0, 0, 0, 0, 0,           // storage_offset 1
      28, 0, 0, 0, 0, 0, 0, 0,          // data_size 28
      2, 0, 0, 0, 0, 0, 0, 0,           // shape[0]
      3, 0, 0, 0, 0, 0, 0, 0,           // shape[1]
      3, 0, 0, 0, 0, 0, 0, 0,           // strides[0]
      1, 0, 0, 0, 0, 0, 0, 0,           // strides[1]
  };
  ASSERT_EQ(h->size(), sizeof(want));
  EXPECT_EQ(std::memcmp(h->data(), want, sizeof(want)), 0);
}

TEST(TensorTest, ScalarEmptyAndMaxDims) {
  TensorMeta scalar = ContiguousMeta(DType::kFloat64, {});
  EXPECT_EQ(NumElements(scalar), 1);
  EXPECT_EQ(scalar.data_size, 8u);
  RoundTrip(scalar);
  double value = 2.5;
  auto sv = ViewAs<double>(scalar, &value, sizeof(value));
  ASSERT_TRUE(sv.ok()) << sv.status();
  EXPECT_EQ(sv->ndim(), 0);
  EXPECT_EQ(*sv->at(), 2.5);

  TensorMeta empty = ContiguousMeta(DType::kFloat32, {4, 0, 3});
  EXPECT_EQ(NumElements(empty), 0);
  EXPECT_EQ(empty.data_size, 0u);
  EXPECT_TRUE(IsContiguous(empty));
  RoundTrip(empty);
  auto ev = ViewAs<float>(empty, nullptr, 0);
  ASSERT_TRUE(ev.ok()) << ev.status();
  EXPECT_EQ(ev->size(), 0);

  TensorMeta big = ContiguousMeta(DType::kUInt8, std::vector<int64_t>(kMaxTensorDims, 2));
  EXPECT_EQ(big.data_size, 1u << kMaxTensorDims);
  RoundTrip(big);
  TensorMeta too_big = ContiguousMeta(DType::kUInt8, std::vector<int64_t>(17, 1));
  absl::StatusOr<std::string> h = EncodeTensorHeader(too_big);
  EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(h.status().message()), HasSubstr("ndim"));
}

TEST(TensorTest, ContiguousStridesAndIsContiguous) {
  EXPECT_EQ(ContiguousStrides({2, 3, 4}), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(ContiguousStrides({}), (std::vector<int64_t>{}));
  EXPECT_EQ(ContiguousStrides({3, 0, 4}), (std::vector<int64_t>{4, 4, 1}));  // as PyTorch
  TensorMeta m = ContiguousMeta(DType::kFloat32, {2, 1, 3});
  EXPECT_TRUE(IsContiguous(m));
  m.strides[1] = 99;  // a size-1 dimension's stride does not matter
  EXPECT_TRUE(IsContiguous(m));
  m.strides = {1, 1, 2};
  EXPECT_FALSE(IsContiguous(m));
  // Saturates rather than overflowing on shapes validation would reject.
  int64_t huge = int64_t{1} << 40;
  std::vector<int64_t> s = ContiguousStrides({huge, huge, huge});
  EXPECT_EQ(s[0], std::numeric_limits<int64_t>::max());
}

TEST(TensorTest, TransposeAndSliceHonorStrides) {
  // A 2x3 float matrix, row-major: m[i][j] = 10 * i + j.
  AlignedBuffer buf(6 * sizeof(float));
  float* f = reinterpret_cast<float*>(buf.ptr);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) f[i * 3 + j] = 10 * i + j;

  TensorMeta t;  // its transpose, 3x2, no copy
  t.dtype = DType::kFloat32;
  t.shape = {3, 2};
  t.strides = {1, 3};
  t.data_size = buf.size;
  EXPECT_FALSE(IsContiguous(t));
  TensorMeta back = RoundTrip(t);
  auto v = ViewAs<float>(back, buf.ptr, buf.size);
  ASSERT_TRUE(v.ok()) << v.status();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) {
      EXPECT_EQ((*v)(i, j), 10 * j + i);
      EXPECT_EQ(*v->at(i, j), 10 * j + i);
    }

  TensorMeta col;  // column 2: m[:, 2], storage offset 2, stride 3
  col.dtype = DType::kFloat32;
  col.shape = {2};
  col.strides = {3};
  col.storage_offset = 2;
  col.data_size = buf.size;
  auto c = ViewAs<float>(RoundTrip(col), buf.ptr, buf.size);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)(0), 2);
  EXPECT_EQ((*c)(1), 12);

  TensorMeta bcast;  // row 1 broadcast to 4 rows: stride 0
  bcast.dtype = DType::kFloat32;
  bcast.shape = {4, 3};
  bcast.strides = {0, 1};
  bcast.storage_offset = 3;
  bcast.data_size = buf.size;
  auto b = ViewAs<float>(RoundTrip(bcast), buf.ptr, buf.size);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)(3, 1), 11);

  EXPECT_EQ(v->at(3, 0).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(v->at(0, -1).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(v->at(0).status().code(), absl::StatusCode::kInvalidArgument);
}

// A valid header to corrupt: int16 [2, 3] contiguous, storage offset 1, 14 bytes.
TensorMeta SampleMeta() {
  TensorMeta m;
  m.dtype = DType::kInt16;
  m.byte_order = ByteOrder::kLittle;
  m.shape = {2, 3};
  m.strides = {3, 1};
  m.storage_offset = 1;
  m.data_size = 14;
  return m;
}

std::string SampleHeader() { return *EncodeTensorHeader(SampleMeta()); }

void PutU64(std::string* h, size_t off, uint64_t v) {
  for (int i = 0; i < 8; ++i) (*h)[off + i] = static_cast<char>(v >> (8 * i));
}

void ExpectRejected(const std::string& header, const std::string& field,
                    uint64_t section = std::numeric_limits<uint64_t>::max()) {
  absl::StatusOr<TensorMeta> m = DecodeTensorHeader(header, section);
  ASSERT_FALSE(m.ok()) << "accepted a header with a bad " << field;
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << m.status();
  EXPECT_THAT(std::string(m.status().message()), HasSubstr(field)) << m.status();
}

TEST(TensorTest, EveryCorruptionIsRejectedNamingTheField) {
  ASSERT_TRUE(DecodeTensorHeader(SampleHeader(), 14).ok());
  const size_t kShape0 = 32, kShape1 = 40, kStride0 = 48, kStride1 = 56;
  std::string h;

  ExpectRejected("", "length");
  ExpectRejected(SampleHeader().substr(0, 31), "length");
  ExpectRejected(SampleHeader().substr(0, 40), "length");
  ExpectRejected(SampleHeader() + "x", "length");
  h = SampleHeader(); h[0] = 'X';                 ExpectRejected(h, "magic");
  h = SampleHeader(); h[4] = 2;                   ExpectRejected(h, "version");
  h = SampleHeader(); h[4] = 0;                   ExpectRejected(h, "version");
  h = SampleHeader(); h[6] = 65;                  ExpectRejected(h, "header_size");
  h = SampleHeader(); h[10] = 17;                 ExpectRejected(h, "ndim");
  h = SampleHeader(); h[10] = 3;                  ExpectRejected(h, "header_size");
  h = SampleHeader(); h[11] = 1;                  ExpectRejected(h, "reserved");
  h = SampleHeader(); h[14] = 1;                  ExpectRejected(h, "reserved");
  for (int bad : {0, 11, 200, 255}) {
    h = SampleHeader(); h[8] = static_cast<char>(bad);  ExpectRejected(h, "dtype");
  }
  h = SampleHeader(); h[9] = 2;                   ExpectRejected(h, "byte_order");
  h = SampleHeader(); PutU64(&h, kShape1, -3);    ExpectRejected(h, "shape[1]");
  h = SampleHeader(); PutU64(&h, kStride0, -1);   ExpectRejected(h, "strides[0]");
  h = SampleHeader(); PutU64(&h, 16, -1);         ExpectRejected(h, "storage_offset");
  // Out of bounds by one element.
  h = SampleHeader(); PutU64(&h, 24, 13);         ExpectRejected(h, "beyond data_size");
  h = SampleHeader(); PutU64(&h, kShape0, 3);     ExpectRejected(h, "beyond data_size");
  h = SampleHeader(); PutU64(&h, kStride1, 2);    ExpectRejected(h, "beyond data_size");
  h = SampleHeader(); PutU64(&h, 16, 2);          ExpectRejected(h, "beyond data_size");
  h = SampleHeader(); PutU64(&h, 16, 8);          ExpectRejected(h, "storage_offset");
  // Overflows.
  h = SampleHeader(); PutU64(&h, 16, uint64_t{1} << 62);  ExpectRejected(h, "storage_offset");
  h = SampleHeader(); PutU64(&h, kShape0, uint64_t{1} << 40);
  PutU64(&h, kShape1, uint64_t{1} << 40);         ExpectRejected(h, "overflows");
  h = SampleHeader(); PutU64(&h, kShape0, uint64_t{1} << 40);
  PutU64(&h, kStride0, uint64_t{1} << 40);        ExpectRejected(h, "overflows");
  h = SampleHeader(); PutU64(&h, kStride0, (uint64_t{1} << 62));
  PutU64(&h, 24, -1);                             ExpectRejected(h, "overflow");
  // A header that claims more data than the object's data section holds.
  ExpectRejected(SampleHeader(), "data_size", 13);

  // Encode refuses what decode would refuse.
  TensorMeta m = SampleMeta();
  m.strides.pop_back();
  EXPECT_EQ(EncodeTensorHeader(m).status().code(), absl::StatusCode::kInvalidArgument);
  m = SampleMeta();
  m.data_size = 13;
  EXPECT_EQ(EncodeTensorHeader(m).status().code(), absl::StatusCode::kInvalidArgument);
}

// Independent bounds check in 128-bit arithmetic.
bool WithinBounds(const TensorMeta& m) {
  __int128 last = m.storage_offset;
  for (int i = 0; i < m.ndim(); ++i) {
    if (m.shape[i] == 0) return m.storage_offset * static_cast<__int128>(DTypeSize(m.dtype)) <=
                                m.data_size;
    last += static_cast<__int128>(m.shape[i] - 1) * m.strides[i];
  }
  return (last + 1) * static_cast<__int128>(DTypeSize(m.dtype)) <= m.data_size;
}

TEST(TensorTest, RandomByteFlipsNeverCrashAndNeverEscapeTheData) {
  TensorMeta base;
  base.dtype = DType::kFloat32;
  base.shape = {3, 4, 5};
  base.strides = {1, 3, 12};  // a permuted, non-contiguous layout
  base.storage_offset = 2;
  base.data_size = (2 + 60) * 4;
  const std::string valid = *EncodeTensorHeader(base);
  AlignedBuffer data(base.data_size);
  std::mt19937_64 rng(12345);
  int accepted = 0;
  for (int iter = 0; iter < 200000; ++iter) {
    std::string h = valid;
    int flips = 1 + rng() % 4;
    for (int k = 0; k < flips; ++k) {
      size_t pos = rng() % h.size();
      if (rng() % 2) {
        h[pos] ^= static_cast<char>(1u << (rng() % 8));
      } else {
        h[pos] = static_cast<char>(rng());
      }
    }
    if (rng() % 16 == 0) h.resize(rng() % (h.size() + 8), '\0');
    absl::StatusOr<TensorMeta> m = DecodeTensorHeader(h, data.size);
    if (!m.ok()) {
      ASSERT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << m.status();
      continue;
    }
    ++accepted;
    ASSERT_LE(m->ndim(), kMaxTensorDims);
    ASSERT_LE(m->data_size, data.size);
    ASSERT_TRUE(WithinBounds(*m));
    // Touch the first and the last element through a view: ASan would see an escape.
    if (m->dtype == DType::kFloat32 && m->byte_order == HostByteOrder() &&
        NumElements(*m) > 0) {
      auto v = ViewAs<float>(*m, data.ptr, data.size);
      ASSERT_TRUE(v.ok()) << v.status();
      std::vector<int64_t> first(m->ndim(), 0), last(m->ndim());
      for (int i = 0; i < m->ndim(); ++i) last[i] = m->shape[i] - 1;
      ASSERT_TRUE(v->At(first).ok());
      ASSERT_TRUE(v->At(last).ok());
    }
  }
  std::printf("random flips: %d of 200000 headers decoded as valid\n", accepted);
  EXPECT_GT(accepted, 0);  // some flips land on harmless values (e.g. smaller shapes)
}

TEST(TensorTest, BigEndianDataRejectedForTypedAccess) {
  if (HostByteOrder() != ByteOrder::kLittle) GTEST_SKIP() << "little-endian host only";
  TensorMeta m = ContiguousMeta(DType::kFloat32, {4});
  m.byte_order = ByteOrder::kBig;
  TensorMeta back = RoundTrip(m);  // the format can describe it...
  EXPECT_EQ(back.byte_order, ByteOrder::kBig);
  AlignedBuffer buf(m.data_size);
  auto v = ViewAs<float>(back, buf.ptr, buf.size);  // ...but a typed view refuses it
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("big-endian"));
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("little-endian"));
  // Byte order does not matter for one-byte elements.
  TensorMeta b = ContiguousMeta(DType::kUInt8, {4});
  b.byte_order = ByteOrder::kBig;
  EXPECT_TRUE(ViewAs<uint8_t>(b, buf.ptr, buf.size).ok());
}

TEST(TensorTest, ViewChecksDTypeAlignmentAndSize) {
  AlignedBuffer buf(64);
  TensorMeta m = ContiguousMeta(DType::kFloat32, {4});
  auto wrong = ViewAs<int32_t>(m, buf.ptr, buf.size);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(wrong.status().message()), HasSubstr("float32"));
  EXPECT_THAT(std::string(wrong.status().message()), HasSubstr("int32"));
  auto misaligned = ViewAs<float>(m, buf.ptr + 1, 32);
  EXPECT_EQ(misaligned.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(misaligned.status().message()), HasSubstr("aligned"));
  auto small = ViewAs<float>(m, buf.ptr, 15);  // meta says 16 bytes, memory has 15
  EXPECT_EQ(small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(small.status().message()), HasSubstr("data_size"));
}

}  // namespace
}  // namespace drover::object_store
