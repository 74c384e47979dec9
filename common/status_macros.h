// Early-return helpers for absl::Status and absl::StatusOr. Header-only and free of
// gRPC, so any library (including the object store and the public SDK) may use them.
//
//   DROVER_RETURN_IF_ERROR(file.Write(bytes));
//   DROVER_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Connect(path));
//   DROVER_ASSIGN_OR_RETURN(auto refs, client->Get(ids, timeout));
#ifndef DROVER_COMMON_STATUS_MACROS_H_
#define DROVER_COMMON_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Evaluates an absl::Status expression and returns it from the enclosing function if it
// is not OK.
#define DROVER_RETURN_IF_ERROR(expr)          \
  do {                                        \
    ::absl::Status _drover_st = (expr);       \
    if (!_drover_st.ok()) return _drover_st;  \
  } while (0)

// Evaluates an absl::StatusOr<T> expression; on error returns its status from the
// enclosing function, otherwise moves the value into `lhs` (a declaration such as
// `auto x` or an existing variable). Expands to more than one statement: do not use it
// as the body of an unbraced if or loop.
#define DROVER_ASSIGN_OR_RETURN(lhs, expr) \
  DROVER_ASSIGN_OR_RETURN_IMPL_(DROVER_STATUS_CONCAT_(_drover_statusor_, __LINE__), lhs, expr)

#define DROVER_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return std::move(tmp).status();      \
  lhs = *std::move(tmp)

#define DROVER_STATUS_CONCAT_INNER_(a, b) a##b
#define DROVER_STATUS_CONCAT_(a, b) DROVER_STATUS_CONCAT_INNER_(a, b)

#endif  // DROVER_COMMON_STATUS_MACROS_H_
