// Conversions between absl::Status (used everywhere inside drover) and grpc::Status
// (used only at the RPC edge). Codes map 1:1; messages are kept.
#ifndef DROVER_COMMON_STATUS_H_
#define DROVER_COMMON_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace drover {

grpc::Status ToGrpcStatus(const absl::Status& s);
absl::Status FromGrpcStatus(const grpc::Status& s);

// Evaluates an absl::Status expression and returns it from the enclosing function
// if it is not OK.
#define DROVER_RETURN_IF_ERROR(expr)        \
  do {                                      \
    ::absl::Status _st = (expr);            \
    if (!_st.ok()) return _st;              \
  } while (0)

}  // namespace drover

#endif  // DROVER_COMMON_STATUS_H_
