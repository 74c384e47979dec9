// Python exceptions for absl::Status, for the Python module: drover.Error (a
// RuntimeError) with `code`, the canonical code's name ("NOT_FOUND"), and the message
// "CODE: message"; drover.TimeoutError (also a builtin TimeoutError) for
// DEADLINE_EXCEEDED.
//
// Thread safety: RegisterErrors runs once at import; Raise needs the GIL.
#ifndef DROVER_PYTHON_ERRORS_H_
#define DROVER_PYTHON_ERRORS_H_

#include <utility>

#include <pybind11/pybind11.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace drover::python {

namespace py = pybind11;

// Defines drover.Error and drover.TimeoutError in `m`.
void RegisterErrors(py::module_& m);

// Raises the exception of `status`. REQUIRES: !status.ok().
[[noreturn]] void Raise(const absl::Status& status);

inline void RaiseIfError(const absl::Status& status) {
  if (!status.ok()) Raise(status);
}
template <typename T>
T ValueOrRaise(absl::StatusOr<T> v) {
  if (!v.ok()) Raise(v.status());
  return *std::move(v);
}

}  // namespace drover::python

#endif  // DROVER_PYTHON_ERRORS_H_
