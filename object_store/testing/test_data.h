// Deterministic test bytes and a checksum, shared by the store's tests and store_tool,
// so that a process can check bytes another process wrote.
#ifndef DROVER_OBJECT_STORE_TESTING_TEST_DATA_H_
#define DROVER_OBJECT_STORE_TESTING_TEST_DATA_H_

#include <cstdint>
#include <cstring>

#include "absl/types/span.h"

namespace drover::object_store::testing {

// Fills `out` with a pseudo-random sequence determined by `seed` (xorshift64*).
inline void FillPattern(absl::Span<uint8_t> out, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  size_t i = 0;
  for (; i + 8 <= out.size(); i += 8) {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    uint64_t v = x * 0x2545F4914F6CDD1Dull;
    memcpy(out.data() + i, &v, 8);
  }
  for (; i < out.size(); ++i) out[i] = static_cast<uint8_t>(x >> (8 * (i % 8)));
}

// FNV-1a style 64-bit checksum, 8 bytes at a time.
inline uint64_t Checksum(absl::Span<const uint8_t> data) {
  uint64_t h = 0xcbf29ce484222325ull ^ data.size();
  size_t i = 0;
  for (; i + 8 <= data.size(); i += 8) {
    uint64_t v;
    memcpy(&v, data.data() + i, 8);
    h = (h ^ v) * 0x100000001b3ull;
  }
  for (; i < data.size(); ++i) h = (h ^ data[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace drover::object_store::testing

#endif  // DROVER_OBJECT_STORE_TESTING_TEST_DATA_H_
