// Task values from peers (drover/internal/codec.h): what Decode refuses, without a
// runtime or a cluster. Round trips of every kind of value are in tests/tasks_test.cc.
#include "drover/internal/codec.h"

#include <map>
#include <string>
#include <vector>

#include "drover/task.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "object_store/tensor.h"

namespace drover::internal {
namespace {

using ::testing::HasSubstr;

struct StringWriter {
  std::string* s;
  void write(const char* data, size_t n) { s->append(data, n); }
};

// A value holding `ext` as a tensor extension.
std::string TensorValue(const std::string& ext) {
  std::string value;
  StringWriter w{&value};
  msgpack::packer<StringWriter> pk(w);
  pk.pack_ext(ext.size(), kTensorExtType);
  pk.pack_ext_body(ext.data(), static_cast<uint32_t>(ext.size()));
  return value;
}

TEST(CodecTest, TensorRoundTripsInline) {
  absl::StatusOr<Tensor> t = Tensor::FromVector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  ASSERT_TRUE(t.ok());
  absl::StatusOr<EncodedValue> e = Encode(*t, /*ctx=*/nullptr);
  ASSERT_TRUE(e.ok()) << e.status();
  absl::StatusOr<Tensor> back = Decode<Tensor>(ValueView{e->bytes, nullptr}, nullptr);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->shape(), (std::vector<int64_t>{2, 3}));
  absl::StatusOr<absl::Span<const float>> v = back->span<float>();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ((*v)[5], 6.0f);
}

// Found by //fuzz:task_values: msgpack-c allocates an array's or map's elements when it
// reads their count, so a few bytes claiming millions of elements made the decoder
// allocate hundreds of MiB (2^32 elements: ~100 GiB) before it found the bytes missing.
// Counts are now limited by the bytes the value has.
TEST(CodecTest, CountsBeyondTheValuesBytesAreRefusedBeforeAllocating) {
  for (const std::string& bad : {std::string("\xdd\x00\xff\xff\xff", 5),          // array32
                                 std::string("\xdf\x01\x00\xb0\x60\x01\x02", 7),  // map32
                                 std::string("\x91\xdc\xff\xff", 4)}) {           // nested
    absl::StatusOr<std::vector<int>> v = Decode<std::vector<int>>(ValueView{bad, nullptr}, nullptr);
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.status().code(), absl::StatusCode::kDataLoss) << v.status();
    EXPECT_THAT(v.status().message(), HasSubstr("size overflow")) << v.status();
  }
  // A tensor value whose inner msgpack claims a huge map is refused the same way.
  const std::string value =
      TensorValue(std::string("\x94\x01\x00\xc4\x00\xdf\x01\x00\xb0\x60", 10));
  absl::StatusOr<Tensor> t = Decode<Tensor>(ValueView{value, nullptr}, nullptr);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("size overflow")) << t.status();
}

TEST(CodecTest, TensorWhoseHeaderClaimsMoreThanItsBytesIsRefused) {
  // A [2, 3] float32 header (24 bytes of storage) with only 8 bytes inline.
  absl::StatusOr<std::string> header = object_store::EncodeTensorHeader(
      object_store::ContiguousMeta(object_store::DType::kFloat32, {2, 3}));
  ASSERT_TRUE(header.ok());
  std::string ext;
  {
    StringWriter w{&ext};
    msgpack::packer<StringWriter> pk(w);
    pk.pack_array(4);
    pk.pack(1);
    pk.pack(0);
    pk.pack_bin(static_cast<uint32_t>(header->size()));
    pk.pack_bin_body(header->data(), static_cast<uint32_t>(header->size()));
    pk.pack_bin(8);
    pk.pack_bin_body("12345678", 8);
  }
  const std::string value = TensorValue(ext);
  absl::StatusOr<Tensor> t = Decode<Tensor>(ValueView{value, nullptr}, nullptr);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr("header is not valid"));
}

// A store that keeps what it is given in memory: the codec's store context is an
// argument, so a test can hand it one.
class MemoryStoreContext : public CodecContext {
 public:
  absl::StatusOr<StoredRef> Store(absl::string_view data, absl::string_view metadata) override {
    StoredRef r{"obj-" + std::to_string(objects_.size()), "node-1", data.size()};
    objects_[r.object_id] = std::string(data);
    return r;
  }
  absl::StatusOr<ValueView> Load(const StoredRef& ref) override {
    auto it = objects_.find(ref.object_id);
    if (it == objects_.end()) return absl::NotFoundError(ref.object_id);
    return ValueView{it->second, nullptr};
  }
  absl::StatusOr<Buffer> LoadBuffer(const StoredRef& ref) override {
    auto it = objects_.find(ref.object_id);
    if (it == objects_.end()) return absl::NotFoundError(ref.object_id);
    return Buffer::CopyOf(it->second);
  }
  std::string node_id() override { return "node-1"; }
  size_t size() const { return objects_.size(); }

 private:
  std::map<std::string, std::string> objects_;
};

TEST(CodecTest, TheStoreContextIsAnArgument) {
  absl::StatusOr<Tensor> big = Tensor::FromVector(std::vector<float>(64 * 1024, 1.5f), {64 * 1024});
  ASSERT_TRUE(big.ok());
  // No context: inline, whatever its size.
  absl::StatusOr<EncodedValue> inline_value = Encode(*big, nullptr);
  ASSERT_TRUE(inline_value.ok()) << inline_value.status();
  EXPECT_TRUE(inline_value->stored.empty());
  EXPECT_GT(inline_value->bytes.size(), 64u * 1024 * 4);
  // A context: the tensor goes through it, and the value only names the object.
  MemoryStoreContext store;
  absl::StatusOr<EncodedValue> stored = Encode(*big, &store);
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_EQ(stored->stored.size(), 1u);
  EXPECT_EQ(store.size(), 1u);
  EXPECT_LT(stored->bytes.size(), 1024u);
  absl::StatusOr<Tensor> back = Decode<Tensor>(ValueView{stored->bytes, nullptr}, &store);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->shape(), big->shape());
  absl::StatusOr<absl::Span<const float>> span = back->span<float>();
  ASSERT_TRUE(span.ok()) << span.status();
  EXPECT_EQ((*span)[12345], 1.5f);
}

}  // namespace
}  // namespace drover::internal
