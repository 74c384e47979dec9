// Values between Python and drover's wire form (msgpack with drover's extensions,
// drover/by_name.h), for the Python module: Python inputs of a DataLoader packed for
// the C++ functions that take them, values to send, and received values (queue items,
// loader results) made into Python objects whose tensors are torch views of the store
// (torch_view.h).
//
// Receiving takes two steps so that the GIL is not held while waiting:
// by_name::Decode decodes the value's extensions into drover objects (tensors pulled
// from other nodes, shared tensors attached, queues found; this may block), then
// ToPython builds the Python objects (quick; needs the GIL).
//
// Thread safety: PackPython, EncodePython and ToPython need the GIL.
#ifndef DROVER_PYTHON_VALUES_H_
#define DROVER_PYTHON_VALUES_H_

#include <memory>
#include <string>
#include <variant>
#include <vector>

#include <pybind11/pybind11.h>

#include "absl/status/statusor.h"
#include "drover/by_name.h"

namespace drover::python {

namespace py = pybind11;

// The msgpack bytes of `value`: None, bool, int (64-bit), float, str, bytes, and lists,
// tuples and dicts of them. A list or tuple packs as an array, which a C++ struct with
// MSGPACK_DEFINE(a, b, ...) reads field by field: (step, lo, hi, seed) is a BatchSpec.
// INVALID_ARGUMENT naming the type (and where in the value) for anything else.
absl::StatusOr<std::string> PackPython(py::handle value);

// The value to send (a queue item, drover.put): as PackPython, and torch.Tensor too
// (any dtype drover has, any device: copied once, into this node's store when at
// least 64 KiB, where the value sent seals it in place; a C++ receiver on this node reads
// those bytes without a copy). A sealed drover view sent on is copied like any tensor.
// INVALID_ARGUMENT naming the element for what cannot be sent. Needs the GIL (released
// around the copies).
absl::StatusOr<by_name::EncodedValue> EncodePython(py::handle value);

// The Python object: None, bool, int, float, str, bytes, list (msgpack arrays: C++
// vectors, tuples and structs), dict, torch.Tensor (drover tensors and shared tensors,
// torch_view.h), drover.Queue. Raises a Python exception on failure.
py::object ToPython(by_name::DecodedValue& value);

// What drover.Queue wraps (the module registers the class; ToPython casts to it).
struct QueueHandle {
  by_name::AnyQueue queue;
};

}  // namespace drover::python

#endif  // DROVER_PYTHON_VALUES_H_
