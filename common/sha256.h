// SHA-256 (OpenSSL's libcrypto), hex-encoded: content addresses of code packages.
#ifndef DROVER_COMMON_SHA256_H_
#define DROVER_COMMON_SHA256_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace drover {

// The sha256 of a file's contents, 64 lowercase hex characters.
absl::StatusOr<std::string> Sha256File(const std::string& path);
// The sha256 of `data`.
std::string Sha256Hex(absl::string_view data);
// True for 64 lowercase hex characters.
bool IsSha256Hex(absl::string_view s);

// Moves the finished file `tmp` to `path` if its contents hash to `hash` (sha256 hex):
// content-addressed files never appear under their name half-written or wrong. On any
// failure `tmp` is removed and the error says what `tmp` held (DATA_LOSS for a hash
// that does not match).
absl::Status PlaceIfHashMatches(const std::string& tmp, const std::string& path,
                                const std::string& hash);

}  // namespace drover

#endif  // DROVER_COMMON_SHA256_H_
