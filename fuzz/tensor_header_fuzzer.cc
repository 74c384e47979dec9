// Fuzzes DecodeTensorHeader (object_store/tensor.h): the header of a tensor object is
// read from shared memory any process of the node can write, so whatever the bytes,
// decoding must not read past them, and a header it accepts must give views that stay
// inside the data section.
//
// Input: 4 bytes of data-section size (little-endian, at most 64 KiB used), then the
// header bytes.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "fuzz/tensor_check.h"
#include "object_store/tensor.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace drover::object_store;
  if (size < 4) return 0;
  uint32_t section = 0;
  std::memcpy(&section, data, 4);
  section %= 64 * 1024 + 1;
  // The header in a block of its own size, so a read past it is caught.
  std::unique_ptr<char[]> header(new char[size - 4]);
  std::memcpy(header.get(), data + 4, size - 4);
  absl::string_view bytes(header.get(), size - 4);

  absl::StatusOr<TensorMeta> meta = DecodeTensorHeader(bytes, section);
  if (!meta.ok()) {
    if (meta.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  // A decoded header encodes back to the same bytes (the format has one encoding).
  absl::StatusOr<std::string> again = EncodeTensorHeader(*meta);
  if (!again.ok() || *again != bytes) std::abort();
  // Every view of it stays inside a data section of exactly `section` bytes.
  std::unique_ptr<uint8_t[]> storage(new uint8_t[section + 1]);
  std::memset(storage.get(), 0x5a, section);
  absl::Status s = drover::fuzz::TouchTensor(*meta, storage.get(), section);
  if (!s.ok() && s.code() != absl::StatusCode::kFailedPrecondition) std::abort();  // byte order
  return 0;
}
