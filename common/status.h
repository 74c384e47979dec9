// Conversions between absl::Status (used everywhere inside drover) and grpc::Status
// (used only at the RPC edge). Codes map 1:1; messages are kept.
#ifndef DROVER_COMMON_STATUS_H_
#define DROVER_COMMON_STATUS_H_

#include "absl/status/status.h"
#include "common/status_macros.h"  // IWYU pragma: export
#include "grpcpp/support/status.h"

namespace drover {

grpc::Status ToGrpcStatus(const absl::Status& s);
absl::Status FromGrpcStatus(const grpc::Status& s);

}  // namespace drover

#endif  // DROVER_COMMON_STATUS_H_
