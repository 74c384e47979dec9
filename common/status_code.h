// absl::StatusCode carried as a number between processes (in records one process
// writes and another reads, e.g. the SDK's tensor-collective agreement round). A
// number read from a peer is untrusted: StatusCodeFromWire maps anything that is not a
// canonical code to kUnknown. Header-only, no gRPC (common/status.h converts
// grpc::Status).
#ifndef DROVER_COMMON_STATUS_CODE_H_
#define DROVER_COMMON_STATUS_CODE_H_

#include <cstdint>

#include "absl/status/status.h"

namespace drover {

inline int32_t StatusCodeToWire(absl::StatusCode code) { return static_cast<int32_t>(code); }

inline absl::StatusCode StatusCodeFromWire(int32_t wire) {
  using C = absl::StatusCode;
  for (C code : {C::kOk, C::kCancelled, C::kUnknown, C::kInvalidArgument, C::kDeadlineExceeded,
                 C::kNotFound, C::kAlreadyExists, C::kPermissionDenied, C::kResourceExhausted,
                 C::kFailedPrecondition, C::kAborted, C::kOutOfRange, C::kUnimplemented,
                 C::kInternal, C::kUnavailable, C::kDataLoss, C::kUnauthenticated}) {
    if (StatusCodeToWire(code) == wire) return code;
  }
  return C::kUnknown;
}

}  // namespace drover

#endif  // DROVER_COMMON_STATUS_CODE_H_
