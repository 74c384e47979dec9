// The cluster token: a random secret created by the head at start, kept in an
// owner-only file, and carried by every RPC in the "x-drover-token" metadata entry.
#ifndef DROVER_COMMON_AUTH_H_
#define DROVER_COMMON_AUTH_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/client_context.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/status.h"

namespace drover {

inline constexpr char kTokenMetadataKey[] = "x-drover-token";

// 32 random bytes from the kernel, hex-encoded.
std::string GenerateToken();

// Reads a token file; refuses files readable by group or others, because a token
// anyone can read is no secret.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// Returns the token in `path`, creating the file (mode 0600) with a fresh token if it
// does not exist.
absl::StatusOr<std::string> LoadOrCreateTokenFile(const std::string& path);

// True if `got` equals `want`, comparing in time that does not depend on where they
// first differ (for secrets: tokens, session ids, login codes).
bool SecretsEqual(absl::string_view got, absl::string_view want);

// OK if the call carries `token`; UNAUTHENTICATED (naming what to do) otherwise.
// Constant-time comparison.
grpc::Status CheckToken(const grpc::ServerContextBase& ctx, const std::string& token);

}  // namespace drover

#endif  // DROVER_COMMON_AUTH_H_
