// Fuzzes what a worker reads from its peers (sdk/runtime/worker_server.cc): a byte
// stream split into frames by FrameReader (common/framed_socket.h), arriving in pieces
// as reads return them; each frame parsed as a TaskFrame, or as a WorkerControl on the
// agent's connection; and for each task pushed, the worker's path to the user's code:
// the function found by name in the registry, its inline arguments unpacked
// (drover/internal/codec.h Unpack) and the function invoked, which decodes them into
// its parameter types (tensors included). The functions below read every tensor they
// get, so a view outside its bytes is caught.
//
// DROVER_FUZZ_WRITE_SEEDS=DIR writes the seed corpus (streams of real frames) to DIR
// and exits.
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/framed_socket.h"
#include "common/log.h"
#include "drover/internal/registry.h"
#include "drover/task.h"
#include "fuzz/task_value_check.h"
#include "proto/task.pb.h"

namespace fuzz_functions {

int64_t SumTensor(drover::Tensor t) {
  drover::fuzz::CheckTensor(t);
  return t.numel();
}
std::string Join(std::vector<std::string> parts, std::map<std::string, double> weights) {
  return parts.empty() ? std::string() : parts[0] + std::to_string(weights.size());
}
size_t Count(drover::fuzz::Record r, std::vector<drover::Tensor> ts) {
  for (const drover::Tensor& t : ts) drover::fuzz::CheckTensor(t);
  return r.values.size() + ts.size();
}

}  // namespace fuzz_functions

using fuzz_functions::Count;
using fuzz_functions::Join;
using fuzz_functions::SumTensor;
DROVER_REMOTE(SumTensor, Join, Count);

namespace {

// As WorkerServer::Execute does up to the user's code: find, unpack, invoke.
void RunTask(const drover::proto::TaskSpec& spec) {
  using namespace drover::internal;
  const FunctionInfo* fn = FindFunctionByName(spec.function());
  if (fn == nullptr || fn->kind != FunctionKind::kFunction) return;
  class Args : public ArgList {
   public:
    size_t size() const override { return handles.size(); }
    const msgpack::object& at(size_t i) const override { return handles[i].get(); }
    std::vector<msgpack::object_handle> handles;
  } args;
  args.handles.resize(spec.args_size());
  for (int i = 0; i < spec.args_size(); ++i) {
    if (spec.args(i).has_stored()) return;  // needs a store: the worker loads it first
    if (!Unpack(spec.args(i).value(), &args.handles[i]).ok()) return;
  }
  drover::fuzz::FakeStore store;
  ScopedCodecContext scope(&store);
  InvokeResult r = fn->invoke(nullptr, args);
  if (!r.status.ok() && r.status.code() != absl::StatusCode::kInvalidArgument) std::abort();
}

void OnPayload(std::string_view payload, bool control) {
  if (control) {
    drover::proto::WorkerControl msg;
    (void)msg.ParseFromArray(payload.data(), static_cast<int>(payload.size()));
    return;
  }
  drover::proto::TaskFrame frame;
  if (!frame.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) return;
  if (frame.has_push()) RunTask(frame.push());
}

void WriteSeeds(const std::string& dir) {
  using namespace drover;
  std::vector<std::string> values = fuzz::SeedValues();
  auto push = [](const char* function, const std::vector<std::string>& args) {
    proto::TaskFrame f;
    f.mutable_push()->set_seq(1);
    f.mutable_push()->set_function(function);
    for (const std::string& a : args) f.mutable_push()->add_args()->set_value(a);
    std::string out;
    AppendFrame(f, &out);
    return out;
  };
  proto::TaskFrame hello;
  hello.mutable_hello()->set_token("token");
  hello.mutable_hello()->set_lease_id("lease-1");
  std::string hello_frame;
  AppendFrame(hello, &hello_frame);
  // SeedValues: [0] a tensor, [1] a vector of tensors, [4] strings, [5] a map, [8] a Record.
  std::map<std::string, std::string> seeds = {
      {"sum-tensor", hello_frame + push("SumTensor", {values[0]})},
      {"join", push("Join", {values[4], values[5]})},
      {"count", push("Count", {values[8], values[1]})},
  };
  for (const auto& [name, bytes] : seeds) {
    std::ofstream(dir + "/" + name, std::ios::binary) << std::string(1, '\0') << bytes;
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  drover::SetMinLogLevel(drover::LogLevel::kError);
  if (const char* dir = std::getenv("DROVER_FUZZ_WRITE_SEEDS")) {
    WriteSeeds(dir);
    std::exit(0);
  }
  return 0;
}

// Input: one byte (bit 0: the agent's control connection; the rest: the read size),
// then the stream.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool control = data[0] & 1;
  const size_t step = 1 + (data[0] >> 1) * 3;
  drover::FrameReader reader;
  for (size_t pos = 1; pos < size;) {
    const size_t n = std::min(step, size - pos);
    std::memcpy(reader.WritePtr(n), data + pos, n);
    reader.Commit(n);
    pos += n;
    std::string_view payload;
    while (true) {
      absl::StatusOr<bool> got = reader.Next(&payload);
      if (!got.ok()) return 0;  // the worker closes the connection
      if (!*got) break;
      OnPayload(payload, control);
    }
  }
  return 0;
}
