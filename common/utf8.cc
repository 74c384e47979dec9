#include "common/utf8.h"

#include <cstdint>

namespace drover {

size_t InvalidUtf8At(absl::string_view s) {
  const auto byte = [&s](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(s[i])); };
  for (size_t i = 0; i < s.size();) {
    const uint32_t c = byte(i);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (n == 0 || n > s.size() - i) return i;
    for (size_t k = 1; k < n; ++k) {
      if ((byte(i + k) & 0xc0) != 0x80) return i;
    }
    const uint32_t cp =
        n == 1   ? c
        : n == 2 ? ((c & 0x1f) << 6) | (byte(i + 1) & 0x3f)
        : n == 3 ? ((c & 0x0f) << 12) | ((byte(i + 1) & 0x3f) << 6) | (byte(i + 2) & 0x3f)
                 : ((c & 0x07) << 18) | ((byte(i + 1) & 0x3f) << 12) |
                       ((byte(i + 2) & 0x3f) << 6) | (byte(i + 3) & 0x3f);
    // The shortest form only; no surrogates (they encode UTF-16, not characters); at
    // most U+10FFFF (where Unicode ends).
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
        (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) {
      return i;
    }
    i += n;
  }
  return absl::string_view::npos;
}

}  // namespace drover
