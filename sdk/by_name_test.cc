// drover/by_name.h without a runtime: the codec (values pack and decode, tensors travel
// inline), its failure paths, input checks and invalid handles. Queues, objects and
// loaders on a cluster: tests/torch_consumer_test (through the Python module).
#include "drover/by_name.h"

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace drover::by_name {
namespace {

TEST(ByNameTest, EncodeThenDecodeReadsTheValueAndItsTensors) {
  absl::StatusOr<Tensor> t = Tensor::FromVector(std::vector<float>{1, 2, 3});
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<EncodedValue> enc = Encode([&](Packer& pk) {
    pk.pack_map(2);
    pk.pack(std::string("x"));
    pk.pack(*t);
    pk.pack(std::string("n"));
    pk.pack(int64_t{7});
    return absl::OkStatus();
  });
  ASSERT_TRUE(enc.ok()) << enc.status();

  absl::StatusOr<DecodedValue> dec = Decode(ReceivedValue::FromBytes(enc->bytes()));
  ASSERT_TRUE(dec.ok()) << dec.status();
  const msgpack::object& o = dec->object();
  ASSERT_EQ(o.type, msgpack::type::MAP);
  ASSERT_EQ(o.via.map.size, 2u);
  EXPECT_EQ(o.via.map.ptr[0].val.type, msgpack::type::EXT);
  EXPECT_EQ(o.via.map.ptr[0].val.via.ext.type(), kTensorExtension);
  EXPECT_EQ(o.via.map.ptr[1].val.as<int64_t>(), 7);
  ASSERT_EQ(dec->extensions().size(), 1u);
  const Tensor* got = std::get_if<Tensor>(&dec->extensions()[0]);
  ASSERT_NE(got, nullptr);
  absl::StatusOr<absl::Span<const float>> values = got->span<float>();
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(std::vector<float>(values->begin(), values->end()), (std::vector<float>{1, 2, 3}));
}

TEST(ByNameTest, EncodeReturnsTheWritersError) {
  absl::StatusOr<EncodedValue> enc = Encode([](Packer& pk) {
    pk.pack_array(1);
    return absl::InvalidArgumentError("element [0] is a set");
  });
  EXPECT_EQ(enc.status(), absl::InvalidArgumentError("element [0] is a set"));
}

TEST(ByNameTest, EncodeLetsTheWritersExceptionThrough) {
  EXPECT_THROW((void)Encode([](Packer&) -> absl::Status { throw std::runtime_error("python raised"); }),
               std::runtime_error);
}

TEST(ByNameTest, DecodeRefusesWhatIsNotAValueAndForeignExtensions) {
  absl::StatusOr<DecodedValue> bad = Decode(ReceivedValue::FromBytes("\xc1"));  // never used
  EXPECT_TRUE(absl::IsDataLoss(bad.status())) << bad.status();

  absl::StatusOr<EncodedValue> ref = Encode([](Packer& pk) {
    pk.pack_ext(1, 'R');
    pk.pack_ext_body("x", 1);
    return absl::OkStatus();
  });
  ASSERT_TRUE(ref.ok()) << ref.status();
  absl::StatusOr<DecodedValue> dec = Decode(ReceivedValue::FromBytes(ref->bytes()));
  EXPECT_TRUE(absl::IsInvalidArgument(dec.status())) << dec.status();
  EXPECT_NE(dec.status().message().find("extension type 82"), std::string::npos) << dec.status();
}

TEST(ByNameTest, LoaderInputsMustEachBeOneValue) {
  auto inputs = std::make_shared<std::vector<std::string>>();
  inputs->push_back(std::string("\x01", 1));      // 1
  inputs->push_back(std::string("\x01\x02", 2));  // 1, then 2: two values
  LoaderOptions options;
  options.name = "specs";
  absl::StatusOr<AnyLoader> l = AnyLoader::Start(inputs, "MakeBatch", "", options);
  EXPECT_TRUE(absl::IsInvalidArgument(l.status())) << l.status();
  EXPECT_NE(l.status().message().find("loader 'specs': input 1 is not exactly one msgpack value"),
            std::string::npos)
      << l.status();
}

TEST(ByNameTest, InvalidHandlesFailCleanly) {
  AnyLoader loader;
  EXPECT_FALSE(loader.valid());
  EXPECT_TRUE(absl::IsFailedPrecondition(loader.Next().status()));
  EXPECT_TRUE(loader.skipped().empty());
  EXPECT_EQ(loader.progress().total, 0);
  AnyQueue queue;
  EXPECT_TRUE(absl::IsFailedPrecondition(queue.Put(EncodedValue(), absl::Seconds(1))));
  EXPECT_TRUE(absl::IsFailedPrecondition(AnyRef().Get(absl::Seconds(1)).status()));
}

}  // namespace
}  // namespace drover::by_name
