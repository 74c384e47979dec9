#include "python/torch_view.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "drover/by_name.h"
#include "python/errors.h"

namespace drover::python {
namespace {

// DLPack (github.com/dmlc/dlpack, the ABI of v0.x that torch 1.13 reads), declared here:
// the structs are the whole contract.
struct DLDevice {
  int32_t device_type;  // 1: CPU
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;  // 0 int, 1 uint, 2 float, 4 bfloat
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

// What a view owns: whatever keeps its memory (a Tensor, a SharedTensor), and the
// arrays the DLTensor points at.
struct ViewContext {
  std::shared_ptr<const void> keep;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  DLManagedTensor managed{};
};

void DeleteView(DLManagedTensor* m) { delete static_cast<ViewContext*>(m->manager_ctx); }

// torch renames a capsule it consumed to "used_dltensor" and owns the tensor from then
// on; a capsule never consumed still owns it.
void DestroyCapsule(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    m->deleter(m);
  }
}

// bool goes as uint8 (torch 1.13's DLPack has no bool) and is viewed back as bool.
DLDataType DLTypeOf(DType d) {
  switch (d) {
    case DType::kFloat16: return {2, 16, 1};
    case DType::kBFloat16: return {4, 16, 1};
    case DType::kFloat32: return {2, 32, 1};
    case DType::kFloat64: return {2, 64, 1};
    case DType::kInt8: return {0, 8, 1};
    case DType::kUInt8: return {1, 8, 1};
    case DType::kInt16: return {0, 16, 1};
    case DType::kInt32: return {0, 32, 1};
    case DType::kInt64: return {0, 64, 1};
    case DType::kBool: return {1, 8, 1};
  }
  return {1, 8, 1};
}

py::module_ Torch() {
  static PyObject* torch = py::module_::import("torch").release().ptr();  // for the process's life
  return py::reinterpret_borrow<py::module_>(torch);
}

// A torch.Tensor over `data` (not copied), owning `keep` until torch lets go.
py::object MakeView(const void* data, DType dtype, const std::vector<int64_t>& shape,
                    const std::vector<int64_t>& strides, std::shared_ptr<const void> keep) {
  py::object torch_dtype = Torch().attr(DTypeName(dtype).c_str());
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  if (numel == 0) return Torch().attr("empty")(py::cast(shape), py::arg("dtype") = torch_dtype);
  auto ctx = std::make_unique<ViewContext>();
  ctx->keep = std::move(keep);
  ctx->shape = shape;
  ctx->strides = strides;
  DLTensor& t = ctx->managed.dl_tensor;
  t.data = const_cast<void*>(data);
  t.device = {1, 0};
  t.ndim = static_cast<int32_t>(shape.size());
  t.dtype = DLTypeOf(dtype);
  t.shape = ctx->shape.data();
  t.strides = ctx->strides.data();
  t.byte_offset = 0;
  ctx->managed.manager_ctx = ctx.get();
  ctx->managed.deleter = DeleteView;
  py::capsule capsule(&ctx->managed, "dltensor", DestroyCapsule);
  ctx.release();  // the capsule owns it now
  static PyObject* from_dlpack =
      py::object(py::module_::import("torch.utils.dlpack").attr("from_dlpack")).release().ptr();
  py::object view = py::reinterpret_borrow<py::object>(from_dlpack)(capsule);
  if (dtype == DType::kBool) view = view.attr("view")(torch_dtype);
  return view;
}

// The strides (in elements) of a row-major array of `shape` (torch's rule: a dimension
// of size 0 counts as 1).
std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t i = shape.size(); i > 1; --i) strides[i - 2] = strides[i - 1] * std::max<int64_t>(shape[i - 1], 1);
  return strides;
}

}  // namespace

py::object TorchView(Tensor t, bool mutable_object) {
  const void* data = t.raw_data();
  if (!t.writable() && !mutable_object) data = ValueOrRaise(by_name::ReadOnlyAddress(data));
  const DType dtype = t.dtype();
  const std::vector<int64_t> shape = t.shape();
  const std::vector<int64_t> strides = t.strides();
  return MakeView(data, dtype, shape, strides, std::make_shared<const Tensor>(std::move(t)));
}

py::object TorchView(SharedTensor t) {
  void* data = ValueOrRaise(t.raw_data());
  const DType dtype = t.dtype();
  const std::vector<int64_t> shape = t.shape();
  return MakeView(data, dtype, shape, RowMajorStrides(shape),
                  std::make_shared<const SharedTensor>(std::move(t)));
}

}  // namespace drover::python
