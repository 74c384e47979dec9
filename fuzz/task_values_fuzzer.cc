// Fuzzes the decoding of task values (arguments, results, Put values) that arrive from
// peers: msgpack (drover/internal/codec.h Unpack and Decode) into the types remote
// functions take, tensors included (DecodeTensorExt), with a store whose objects are
// not the size the values claim. See task_value_check.h for what is checked.
//
// DROVER_FUZZ_WRITE_SEEDS=DIR writes the seed corpus (encoded sample values) to DIR
// and exits.
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "common/log.h"
#include "fuzz/task_value_check.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  drover::SetMinLogLevel(drover::LogLevel::kError);
  if (const char* dir = std::getenv("DROVER_FUZZ_WRITE_SEEDS")) {
    int n = 0;
    for (const std::string& v : drover::fuzz::SeedValues()) {
      std::ofstream(std::string(dir) + "/value-" + std::to_string(++n), std::ios::binary) << v;
    }
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  drover::fuzz::FakeStore store;
  drover::internal::ScopedCodecContext scope(&store);
  drover::fuzz::DecodeAsEveryType(
      absl::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
