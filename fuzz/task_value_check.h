// Fuzzing helpers for the task layer's values: decoding a msgpack value into the types
// remote functions take (drover/internal/codec.h Decode), tensors among them
// (DecodeTensorExt, sdk/runtime/tensor_codec.cc), with a codec context that serves
// "store objects" of a size unrelated to what a value claims; and the seed values the
// fuzzers start from. Header-only, testonly; used by the task_frames and task_values
// fuzzers.
#ifndef DROVER_FUZZ_TASK_VALUE_CHECK_H_
#define DROVER_FUZZ_TASK_VALUE_CHECK_H_

#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "drover/internal/codec.h"
#include "drover/task.h"
#include "drover/tensor.h"
#include "fuzz/tensor_check.h"
#include "object_store/tensor.h"
#include "sdk/internal/tensor_internal.h"

namespace drover::fuzz {

// Serves LoadBuffer with `size % 4097` bytes: a stored tensor's real object may be
// smaller than the size its value names, and the header must be checked against the
// bytes that came, not the claim.
class FakeStore : public internal::CodecContext {
 public:
  absl::StatusOr<internal::StoredRef> Store(absl::string_view, absl::string_view) override {
    return absl::UnavailableError("no store in the fuzzer");
  }
  absl::StatusOr<internal::ValueView> Load(const internal::StoredRef&) override {
    return absl::NotFoundError("no store in the fuzzer");
  }
  absl::StatusOr<Buffer> LoadBuffer(const internal::StoredRef& ref) override {
    if (ref.object_id.empty()) return absl::NotFoundError("no such object");
    return Buffer::CopyOf(std::string(ref.size % 4097, '\x5a'));
  }
  std::string node_id() override { return "fuzz-node"; }
};

// A decoded tensor must describe memory inside its own storage: checked, then read.
inline void CheckTensor(const Tensor& t) {
  const object_store::TensorMeta meta = internal::TensorAccess::MetaOf(t);
  const Buffer& storage = internal::TensorAccess::StorageOf(t);
  absl::Status s = TouchTensor(meta, storage.data(), storage.size());
  if (!s.ok()) std::abort();  // a decoded tensor that reaches outside its bytes
}

struct Record {
  std::string name;
  std::vector<double> values;
  std::map<std::string, int64_t> counts;
  MSGPACK_DEFINE(name, values, counts);
};

// Decodes `bytes` as each of several types a remote function might take. Errors are
// fine (INVALID_ARGUMENT for another type, DATA_LOSS for bytes that do not decode);
// nothing may crash, throw out, or give a tensor that reaches outside its bytes.
// No store: a value naming a store object cannot be read (as in a process without a
// runtime).
inline void DecodeAsEveryType(absl::string_view bytes) {
  const internal::ValueView view{bytes, nullptr};
  auto expect = [](const absl::Status& s) {
    if (!s.ok() && s.code() != absl::StatusCode::kInvalidArgument &&
        s.code() != absl::StatusCode::kDataLoss) {
      std::abort();
    }
  };
  {
    absl::StatusOr<Tensor> t = internal::Decode<Tensor>(view, /*ctx=*/nullptr);
    if (t.ok()) CheckTensor(*t);
    expect(t.status());
  }
  {
    absl::StatusOr<std::vector<Tensor>> ts = internal::Decode<std::vector<Tensor>>(view, /*ctx=*/nullptr);
    if (ts.ok()) {
      for (const Tensor& t : *ts) CheckTensor(t);
    }
    expect(ts.status());
  }
  expect(internal::Decode<int64_t>(view, /*ctx=*/nullptr).status());
  expect(internal::Decode<std::string>(view, /*ctx=*/nullptr).status());
  expect(internal::Decode<std::vector<std::string>>(view, /*ctx=*/nullptr).status());
  expect(internal::Decode<std::map<std::string, double>>(view, /*ctx=*/nullptr).status());
  expect(internal::Decode<std::optional<std::vector<float>>>(view, /*ctx=*/nullptr).status());
  expect(internal::Decode<std::tuple<int, std::string, bool>>(view, /*ctx=*/nullptr).status());
  expect(internal::Decode<Record>(view, /*ctx=*/nullptr).status());
}

// Values of the kinds above, encoded as a caller would (tensors inline).
inline std::vector<std::string> SeedValues() {
  std::vector<std::string> out;
  auto add = [&](const auto& v) {
    absl::StatusOr<internal::EncodedValue> e = internal::Encode(v, /*ctx=*/nullptr);
    if (!e.ok()) std::abort();
    out.push_back(e->bytes);
  };
  absl::StatusOr<Tensor> t = Tensor::FromVector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  absl::StatusOr<Tensor> i = Tensor::FromVector(std::vector<int64_t>{7, 8, 9});
  if (!t.ok() || !i.ok()) std::abort();
  add(*t);
  add(std::vector<Tensor>{*t, *i});
  add(int64_t{42});
  add(std::string("hello"));
  add(std::vector<std::string>{"a", "bc"});
  add(std::map<std::string, double>{{"lr", 0.1}, {"momentum", 0.9}});
  add(std::optional<std::vector<float>>(std::vector<float>{1.5f}));
  add(std::make_tuple(3, std::string("x"), true));
  add(Record{"r", {1.0, 2.0}, {{"n", 3}}});
  return out;
}

}  // namespace drover::fuzz

#endif  // DROVER_FUZZ_TASK_VALUE_CHECK_H_
