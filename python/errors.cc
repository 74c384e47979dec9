#include "python/errors.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace drover::python {
namespace {

// Owned by the module (kept alive by its attributes for the interpreter's life).
PyObject* error_type = nullptr;
PyObject* timeout_type = nullptr;

}  // namespace

void RegisterErrors(py::module_& m) {
  error_type = PyErr_NewExceptionWithDoc(
      "drover.Error",
      "A drover call failed. `code` is the canonical status code's name (NOT_FOUND, "
      "OUT_OF_RANGE, ...); the message says what and what to do.",
      PyExc_RuntimeError, nullptr);
  if (error_type == nullptr) throw py::error_already_set();
  py::tuple bases = py::make_tuple(py::handle(error_type), py::handle(PyExc_TimeoutError));
  timeout_type = PyErr_NewExceptionWithDoc("drover.TimeoutError", "A drover call's timeout passed (DEADLINE_EXCEEDED).",
                                           bases.ptr(), nullptr);
  if (timeout_type == nullptr) throw py::error_already_set();
  m.attr("Error") = py::handle(error_type);
  m.attr("TimeoutError") = py::handle(timeout_type);
}

void Raise(const absl::Status& status) {
  const std::string code = absl::StatusCodeToString(status.code());
  PyObject* type = status.code() == absl::StatusCode::kDeadlineExceeded ? timeout_type : error_type;
  py::object exc = py::reinterpret_borrow<py::object>(type)(absl::StrCat(code, ": ", status.message()));
  exc.attr("code") = code;
  PyErr_SetObject(type, exc.ptr());
  throw py::error_already_set();
}

}  // namespace drover::python
