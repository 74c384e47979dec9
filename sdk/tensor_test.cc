// drover::Buffer and drover::Tensor: owned (heap) and in a real drover-object-store
// process through drover::Objects (zero copy, read-only, pinned until the last copy
// is gone), and the checks of typed access.
#include "drover/tensor.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/spawn.h"
#include "drover/objects.h"
#include "gtest/gtest.h"
#include "object_store/client.h"
#include "object_store/tensor.h"
#include "sdk/internal/objects_internal.h"
#include "sdk/internal/tensor_internal.h"
#include "tests/util/test_util.h"

namespace drover {
namespace {

using ::drover::testing::Runfile;
using ::drover::testing::WaitFor;
namespace os = object_store;

bool Aligned64(const void* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; }

TEST(BufferTest, CopyOfOwnsAlignedBytesSharedByItsCopies) {
  const std::string text = "hello, drover";
  Buffer b = Buffer::CopyOf(text);
  EXPECT_EQ(b.view(), text);
  EXPECT_NE(static_cast<const void*>(b.data()), static_cast<const void*>(text.data()));
  EXPECT_TRUE(Aligned64(b.data()));
  EXPECT_FALSE(b.in_store());
  EXPECT_TRUE(b.object_id().empty());
  EXPECT_TRUE(b.metadata().empty());
  Buffer copy = b;
  EXPECT_EQ(copy.data(), b.data());  // shared, not copied
  b = Buffer();
  EXPECT_EQ(copy.view(), text);  // the copy keeps the bytes
  EXPECT_TRUE(Buffer().empty());
  EXPECT_TRUE(Buffer::CopyOf("").empty());
}

TEST(TensorTest, EmptyIsZeroFilledContiguousAndWritable) {
  absl::StatusOr<Tensor> t = Tensor::Empty(DType::kFloat32, {2, 3});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t->strides(), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(t->numel(), 6);
  EXPECT_EQ(t->nbytes(), 24u);
  EXPECT_TRUE(t->is_contiguous());
  EXPECT_TRUE(t->writable());
  EXPECT_FALSE(t->in_store());
  EXPECT_EQ(t->Describe(), "float32[2, 3]");
  EXPECT_TRUE(Aligned64(t->raw_data()));
  absl::StatusOr<absl::Span<float>> w = t->mutable_span<float>();
  ASSERT_TRUE(w.ok()) << w.status();
  for (float v : *w) EXPECT_EQ(v, 0);
  (*w)[5] = 7;
  // Copies share the storage, as PyTorch tensors do.
  Tensor copy = *t;
  EXPECT_EQ((*copy.span<float>())[5], 7);

  absl::StatusOr<Tensor> scalar = Tensor::Empty(DType::kInt64, {});
  ASSERT_TRUE(scalar.ok());
  EXPECT_EQ(scalar->numel(), 1);
  EXPECT_EQ(scalar->nbytes(), 8u);
  absl::StatusOr<Tensor> none = Tensor::Empty(DType::kInt64, {4, 0});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->numel(), 0);
  EXPECT_TRUE(none->span<int64_t>()->empty());
  Tensor def;
  EXPECT_EQ(def.numel(), 0);
  EXPECT_EQ(def.raw_data(), nullptr);
}

TEST(TensorTest, BadShapesAndAccessesSayWhatIsWrong) {
  absl::StatusOr<Tensor> neg = Tensor::Empty(DType::kFloat32, {2, -1});
  EXPECT_EQ(neg.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(neg.status().message(), "negative")) << neg.status();
  EXPECT_EQ(Tensor::Empty(DType::kFloat32, std::vector<int64_t>(17, 1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Tensor::Empty(DType::kFloat64, {int64_t{1} << 40, int64_t{1} << 30}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Tensor::Empty(static_cast<DType>(99), {1}).status().code(),
            absl::StatusCode::kInvalidArgument);

  absl::StatusOr<Tensor> short_of = Tensor::FromVector<float>({1, 2, 3}, {2, 2});
  EXPECT_EQ(short_of.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(short_of.status().message(), "3 values")) << short_of.status();

  absl::StatusOr<Tensor> t = Tensor::FromVector<int32_t>({1, 2, 3, 4, 5, 6}, {3, 2});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->dtype(), DType::kInt32);
  EXPECT_EQ(std::vector<int32_t>(t->span<int32_t>()->begin(), t->span<int32_t>()->end()),
            (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  absl::StatusOr<const float*> wrong = t->data<float>();
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(wrong.status().message(), "holds int32 elements, not float32"))
      << wrong.status();
  EXPECT_EQ(Tensor::FromVector<double>({1.5, 2.5})->shape(), (std::vector<int64_t>{2}));
}

// A drover-object-store process of its own and an Objects connected to it (this node
// only: no agent).
class StoreTensorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/drover-sdk-XXXXXX";  // short: Unix socket paths are limited
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    const std::string socket = dir_ + "/store.sock";
    SpawnOptions o;
    o.argv = {Runfile("object_store/drover-object-store"), "--socket", socket, "--capacity",
              absl::StrCat(64 << 20)};
    o.stderr_path = dir_ + "/store.log";
    absl::StatusOr<pid_t> pid = Spawn(o);
    ASSERT_TRUE(pid.ok()) << pid.status();
    store_pid_ = *pid;
    ASSERT_TRUE(WaitFor([&] {
      absl::StatusOr<std::unique_ptr<Objects>> c = Objects::Connect(socket, "", "");
      if (c.ok()) objects_ = std::move(*c);
      return c.ok();
    }));
  }
  void TearDown() override {
    objects_.reset();
    if (store_pid_ > 0) {
      ::kill(store_pid_, SIGTERM);
      ::waitpid(store_pid_, nullptr, 0);
    }
    (void)!std::system(("rm -rf '" + dir_ + "'").c_str());
  }

  os::Client& store() { return internal::ObjectsAccess::Store(*objects_); }
  uint64_t Referenced() { return store().Stats()->referenced; }
  uint64_t ObjectCount() { return store().Stats()->objects; }
  bool InArena(const void* p) {
    auto* b = static_cast<const uint8_t*>(p);
    return b >= store().arena_base() && b < store().arena_base() + store().arena_capacity();
  }

  std::string dir_;
  pid_t store_pid_ = -1;
  std::unique_ptr<drover::Objects> objects_;
};

TEST_F(StoreTensorTest, GetIsZeroCopyAndPinsUntilTheLastCopyGoes) {
  ASSERT_TRUE(objects_->Put("blob", std::string(1000, 'x'), "meta").ok());
  ASSERT_EQ(Referenced(), 0u);
  absl::StatusOr<Buffer> b = objects_->Get("blob", absl::Seconds(5));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(b->in_store());
  EXPECT_EQ(b->object_id(), "blob");
  EXPECT_EQ(b->metadata(), "meta");
  EXPECT_EQ(b->view(), std::string(1000, 'x'));
  EXPECT_TRUE(InArena(b->data()));
  EXPECT_TRUE(Aligned64(b->data()));
  EXPECT_EQ(Referenced(), 1u);

  // Deleted while pinned: the bytes stay readable until the last copy goes.
  std::vector<Buffer> copies(3, *b);
  *b = Buffer();
  ASSERT_TRUE(objects_->Delete("blob").ok());
  EXPECT_EQ(copies[2].view(), std::string(1000, 'x'));
  EXPECT_EQ(Referenced(), 1u);
  const uint64_t before = ObjectCount();
  copies.pop_back();
  copies.pop_back();
  EXPECT_EQ(Referenced(), 1u);
  copies.clear();
  EXPECT_TRUE(WaitFor([&] { return Referenced() == 0 && ObjectCount() == before - 1; }))
      << "referenced " << Referenced() << " objects " << ObjectCount() << " (before " << before
      << ")";

  absl::StatusOr<Buffer> missing = objects_->Get("nothing", absl::ZeroDuration());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kDeadlineExceeded) << missing.status();
}

TEST_F(StoreTensorTest, PutTensorThenGetTensorViewsTheObjectInPlace) {
  absl::StatusOr<Tensor> t = Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(objects_->PutTensor("w", *t).ok());
  absl::StatusOr<Tensor> got = objects_->GetTensor("w", absl::Seconds(5));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->in_store());
  EXPECT_EQ(got->object_id(), "w");
  EXPECT_FALSE(got->writable());
  EXPECT_EQ(got->dtype(), DType::kFloat32);
  EXPECT_EQ(got->shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(InArena(got->raw_data()));
  absl::StatusOr<absl::Span<const float>> v = got->span<float>();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(std::vector<float>(v->begin(), v->end()), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  // The header stored with the object is the store's DRTN header of the tensor.
  absl::StatusOr<Buffer> raw = objects_->Get("w", absl::Seconds(5));
  absl::StatusOr<os::TensorMeta> meta = os::DecodeTensorHeader(raw->metadata(), raw->size());
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_EQ(*meta, os::ContiguousMeta(os::DType::kFloat32, {2, 3}));
  EXPECT_EQ(raw->data(), got->raw_data());  // one object, read in place twice

  absl::StatusOr<float*> w = got->mutable_data<float>();
  EXPECT_EQ(w.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(w.status().message(), "store object 'w'")) << w.status();
  absl::StatusOr<Tensor> mine = got->Clone();
  ASSERT_TRUE(mine.ok());
  EXPECT_TRUE(mine->writable());
  EXPECT_FALSE(mine->in_store());
  (*mine->mutable_data<float>())[0] = 42;
  EXPECT_EQ((*got->span<float>())[0], 1);  // the object is unchanged

  EXPECT_EQ(Referenced(), 1u);
  *raw = Buffer();
  Tensor copy = *got;
  *got = Tensor();
  EXPECT_EQ(Referenced(), 1u);
  EXPECT_EQ((*copy.span<float>())[5], 6);
  copy = Tensor();
  EXPECT_TRUE(WaitFor([&] { return Referenced() == 0; }));
}

TEST_F(StoreTensorTest, StridedByteSwappedAndNonTensorObjects) {
  // A transposed view: 3 x 2 over the storage of a 2 x 3 row-major tensor.
  os::TensorMeta tr = os::ContiguousMeta(os::DType::kInt32, {3, 2});
  tr.strides = {1, 3};
  const std::vector<int32_t> storage = {1, 2, 3, 4, 5, 6};
  absl::Span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(storage.data()), 24);
  ASSERT_TRUE(store().Put("t", bytes, *os::EncodeTensorHeader(tr)).ok());
  absl::StatusOr<Tensor> t = objects_->GetTensor("t", absl::Seconds(5));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->is_contiguous());
  EXPECT_EQ(t->strides(), (std::vector<int64_t>{1, 3}));
  absl::StatusOr<const int32_t*> direct = t->data<int32_t>();
  EXPECT_EQ(direct.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(direct.status().message(), "Clone()")) << direct.status();
  absl::StatusOr<Tensor> c = t->Clone();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->is_contiguous());
  auto v = c->span<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(v->begin(), v->end()), (std::vector<int32_t>{1, 4, 2, 5, 3, 6}));

  os::TensorMeta be = os::ContiguousMeta(os::DType::kInt32, {6});
  be.byte_order = os::HostByteOrder() == os::ByteOrder::kLittle ? os::ByteOrder::kBig
                                                               : os::ByteOrder::kLittle;
  ASSERT_TRUE(store().Put("be", bytes, *os::EncodeTensorHeader(be)).ok());
  absl::StatusOr<Tensor> swapped = objects_->GetTensor("be", absl::Seconds(5));
  EXPECT_EQ(swapped.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(swapped.status().message(), "byte order")) << swapped.status();

  ASSERT_TRUE(objects_->Put("plain", std::string("not a tensor")).ok());
  absl::StatusOr<Tensor> plain = objects_->GetTensor("plain", absl::Seconds(5));
  EXPECT_EQ(plain.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(plain.status().message(), "object plain is not a valid tensor"))
      << plain.status();
  // Failed reads keep no pin.
  c = Tensor();
  *t = Tensor();
  EXPECT_TRUE(WaitFor([&] { return Referenced() == 0; }));
}

}  // namespace
}  // namespace drover
