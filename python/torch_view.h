// torch.Tensor views of drover tensors for the Python module: the same memory, never a
// copy, handed to torch through DLPack (torch.utils.dlpack.from_dlpack).
//
// Read-only where the object is sealed. torch 1.13 has no read-only tensors (and warns,
// then writes anyway, for a read-only buffer), so it is the MMU that refuses: the
// process maps its node's store arena a second time, read-only (the same memfd pages,
// PROT_READ; by_name::ReadOnlyAddress), and views of sealed objects point into that
// mapping. A write through one
// (an in-place op, `t[0] = 1`) faults: the process dies with SIGSEGV, as a C++ write to
// a sealed object's page would. Clone a view (`t.clone()`) to modify it. Writable views:
// SharedTensors (mutable objects, written in place by every holder, Hogwild), and
// tensors that travelled inline (up to 64 KiB: a private copy of this process).
//
// Ownership: a view owns what it needs: the drover::Tensor (pinning the object, and
// freeing an owned one when the view goes) or the SharedTensor handle (keeping this
// process attached). torch releases it when the view's storage is freed, from any
// thread; the read-only mapping stays for the life of the process.
//
// Thread safety: the functions need the GIL; the mapping is made once under a lock.
#ifndef DROVER_PYTHON_TORCH_VIEW_H_
#define DROVER_PYTHON_TORCH_VIEW_H_

#include <pybind11/pybind11.h>

#include "drover/shared_tensor.h"
#include "drover/tensor.h"

namespace drover::python {

namespace py = pybind11;

// A torch.Tensor over `t`'s elements: read-only if they are a sealed store object
// (see above), writable otherwise; writable in any case with `mutable_object` (`t`
// views a mutable store object: a SharedTensor of another process, read by id).
// Raises drover.Error when the read-only mapping cannot be made.
py::object TorchView(Tensor t, bool mutable_object = false);
// A writable torch.Tensor over a shared tensor's elements. Raises drover.Error after
// Release.
py::object TorchView(SharedTensor t);

}  // namespace drover::python

#endif  // DROVER_PYTHON_TORCH_VIEW_H_
