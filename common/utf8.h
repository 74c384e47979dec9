// Strict UTF-8 validation (RFC 3629): what protobuf string fields accept.
//
// Protobuf refuses a string field that is not UTF-8 at parse time (the receiver drops
// the whole message with only a log line), so text a caller gives is checked here first
// and refused with an error naming where the bad byte is. Thread-safe (pure function).
#ifndef DROVER_COMMON_UTF8_H_
#define DROVER_COMMON_UTF8_H_

#include <cstddef>

#include "absl/strings/string_view.h"

namespace drover {

// The offset of the first byte of `s` that does not start a well-formed UTF-8 sequence
// (a bad or truncated sequence, an overlong form, a surrogate U+D800..U+DFFF, a code
// point past U+10FFFF), or absl::string_view::npos if all of `s` is UTF-8.
size_t InvalidUtf8At(absl::string_view s);

}  // namespace drover

#endif  // DROVER_COMMON_UTF8_H_
