#include "python/values.h"

#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "drover/shared_tensor.h"
#include "drover/task.h"
#include "python/torch_view.h"

namespace drover::python {
namespace {

// Deeper values are refused: a C++ input is never nested this far, and a cycle
// (a list containing itself) must end somewhere.
constexpr int kMaxDepth = 64;

using by_name::Packer;

absl::Status Refuse(const std::string& where, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(where.empty() ? "the value" : "element " + where, " ", what));
}

// Tensors at least this large go into the store (sealed in place, only the id travels);
// smaller ones travel inline, as the codec does for C++ tensors.
constexpr size_t kStoreTensorBytes = 64 * 1024;

// torch.Tensor, if torch was imported (the module never imports it for this).
bool IsTorchTensor(py::handle v) {
  py::object torch = py::module_::import("sys").attr("modules").attr("get")("torch");
  if (torch.is_none()) return false;
  return py::isinstance(v, torch.attr("Tensor"));
}

// A drover tensor holding a copy of torch tensor `v` (any device, layout or strides):
// written once, into the store when it is large (so sending it copies nothing more).
absl::StatusOr<Tensor> FromTorch(py::handle v, const std::string& where) {
  py::object t = v.attr("detach")();
  if (py::str(t.attr("layout")).cast<std::string>() != "torch.strided") {
    return Refuse(where, "is a sparse torch.Tensor: send t.to_dense()");
  }
  if (py::str(t.attr("device").attr("type")).cast<std::string>() != "cpu") t = t.attr("cpu")();
  t = t.attr("contiguous")();
  std::string name = py::str(t.attr("dtype"));
  if (name.rfind("torch.", 0) == 0) name = name.substr(6);
  DType dtype{};
  bool known = false;
  for (int d = 1; d <= static_cast<int>(DType::kBool); ++d) {
    if (DTypeName(static_cast<DType>(d)) == name) {
      dtype = static_cast<DType>(d);
      known = true;
    }
  }
  if (!known) {
    return Refuse(where, absl::StrCat("is a torch.Tensor of dtype ", name,
                                      ", which drover has no type for (float16, bfloat16, float32, float64, "
                                      "int8, uint8, int16, int32, int64, bool)"));
  }
  std::vector<int64_t> shape;
  for (py::handle d : t.attr("shape")) shape.push_back(d.cast<int64_t>());
  const size_t nbytes = t.attr("numel")().cast<size_t>() * DTypeSize(dtype);
  absl::StatusOr<Tensor> out = absl::FailedPreconditionError("no store");
  // Uninitialized: the copy below writes every byte.
  if (nbytes >= kStoreTensorBytes && IsInitialized()) out = AllocateInStoreUninitialized(dtype, shape);
  if (!out.ok()) out = Tensor::Empty(dtype, shape);  // no store here: it travels as bytes
  if (!out.ok()) return out.status();
  if (nbytes > 0) {
    const auto* src = reinterpret_cast<const void*>(t.attr("data_ptr")().cast<uintptr_t>());
    void* dst = const_cast<void*>(out->raw_data());
    py::gil_scoped_release unlocked;  // `t` (holding the source) lives on meanwhile
    std::memcpy(dst, src, nbytes);
  }
  return out;
}

absl::Status Pack(py::handle v, Packer& pk, const std::string& where, int depth, bool tensors) {
  if (depth > kMaxDepth) return Refuse(where, absl::StrCat("is nested deeper than ", kMaxDepth, " levels"));
  if (v.is_none()) {
    pk.pack_nil();
  } else if (PyBool_Check(v.ptr())) {
    if (v.ptr() == Py_True) {
      pk.pack_true();
    } else {
      pk.pack_false();
    }
  } else if (PyFloat_Check(v.ptr())) {
    pk.pack_double(PyFloat_AsDouble(v.ptr()));
  } else if (tensors && IsTorchTensor(v)) {  // before ints: a tensor has __index__
    absl::StatusOr<Tensor> t = FromTorch(v, where);
    if (!t.ok()) return t.status();
    pk.pack(*t);  // the codec context in scope stores it (or seals it in place)
  } else if (PyIndex_Check(v.ptr())) {  // int, and numpy's integers
    py::int_ i = py::reinterpret_steal<py::int_>(PyNumber_Index(v.ptr()));
    if (!i) throw py::error_already_set();
    int overflow = 0;
    const long long s = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
    if (overflow == 0) {
      pk.pack(static_cast<int64_t>(s));
    } else {
      const unsigned long long u = PyLong_AsUnsignedLongLong(i.ptr());
      if (PyErr_Occurred()) {
        PyErr_Clear();
        return Refuse(where, "is an int outside the 64-bit range");
      }
      pk.pack(static_cast<uint64_t>(u));
    }
  } else if (PyUnicode_Check(v.ptr())) {
    Py_ssize_t n = 0;
    const char* s = PyUnicode_AsUTF8AndSize(v.ptr(), &n);
    if (s == nullptr) throw py::error_already_set();
    pk.pack_str(static_cast<uint32_t>(n));
    pk.pack_str_body(s, static_cast<uint32_t>(n));
  } else if (PyBytes_Check(v.ptr()) || PyByteArray_Check(v.ptr())) {
    const std::string b = PyBytes_Check(v.ptr()) ? std::string(py::reinterpret_borrow<py::bytes>(v))
                                                 : std::string(PyByteArray_AsString(v.ptr()),
                                                               static_cast<size_t>(PyByteArray_Size(v.ptr())));
    pk.pack_bin(static_cast<uint32_t>(b.size()));
    pk.pack_bin_body(b.data(), static_cast<uint32_t>(b.size()));
  } else if (PyList_Check(v.ptr()) || PyTuple_Check(v.ptr())) {
    py::sequence seq = py::reinterpret_borrow<py::sequence>(v);
    pk.pack_array(static_cast<uint32_t>(seq.size()));
    for (size_t i = 0; i < seq.size(); ++i) {
      absl::Status s = Pack(seq[i], pk, absl::StrCat(where, "[", i, "]"), depth + 1, tensors);
      if (!s.ok()) return s;
    }
  } else if (PyDict_Check(v.ptr())) {
    py::dict d = py::reinterpret_borrow<py::dict>(v);
    pk.pack_map(static_cast<uint32_t>(d.size()));
    for (auto [key, value] : d) {
      const std::string at = absl::StrCat(where, "[", std::string(py::repr(key)), "]");
      absl::Status s = Pack(key, pk, at + " (its key)", depth + 1, tensors);
      if (s.ok()) s = Pack(value, pk, at, depth + 1, tensors);
      if (!s.ok()) return s;
    }
  } else {
    return Refuse(where, absl::StrCat(
        "is a ", std::string(py::str(py::type::handle_of(v).attr("__qualname__"))),
        ", which the module cannot send (None, bool, int, float, str, bytes, ",
        tensors ? "torch.Tensor, " : "", "and lists, tuples and dicts of them",
        tensors ? ")" : "; a DataLoader's inputs hold no tensors)"));
  }
  return absl::OkStatus();
}

py::object Build(const msgpack::object& o, std::vector<by_name::DecodedValue::Extension>& exts, size_t& next) {
  switch (o.type) {
    case msgpack::type::NIL:
      return py::none();
    case msgpack::type::BOOLEAN:
      return py::bool_(o.via.boolean);
    case msgpack::type::POSITIVE_INTEGER:
      return py::int_(o.via.u64);
    case msgpack::type::NEGATIVE_INTEGER:
      return py::int_(o.via.i64);
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
      return py::float_(o.via.f64);
    case msgpack::type::STR: {
      PyObject* s = PyUnicode_DecodeUTF8(o.via.str.ptr, o.via.str.size, "surrogateescape");
      if (s == nullptr) throw py::error_already_set();
      return py::reinterpret_steal<py::object>(s);
    }
    case msgpack::type::BIN:
      return py::bytes(o.via.bin.ptr, o.via.bin.size);
    case msgpack::type::ARRAY: {
      py::list l(o.via.array.size);
      for (uint32_t i = 0; i < o.via.array.size; ++i) l[i] = Build(o.via.array.ptr[i], exts, next);
      return std::move(l);
    }
    case msgpack::type::MAP: {
      py::dict d;
      for (uint32_t i = 0; i < o.via.map.size; ++i) {
        py::object key = Build(o.via.map.ptr[i].key, exts, next);
        d[key] = Build(o.via.map.ptr[i].val, exts, next);
      }
      return std::move(d);
    }
    case msgpack::type::EXT: {
      by_name::DecodedValue::Extension& ext = exts.at(next++);
      if (auto* t = std::get_if<Tensor>(&ext)) return TorchView(std::move(*t));
      if (auto* s = std::get_if<SharedTensor>(&ext)) return TorchView(std::move(*s));
      return py::cast(QueueHandle{std::get<by_name::AnyQueue>(ext)});
    }
  }
  throw py::value_error("a value of an unknown msgpack type");
}

}  // namespace

absl::StatusOr<std::string> PackPython(py::handle value) {
  std::string out;
  by_name::ByteWriter w(&out);
  Packer pk(w);
  absl::Status s = Pack(value, pk, "", 0, /*tensors=*/false);
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<by_name::EncodedValue> EncodePython(py::handle value) {
  // A Python exception (py::error_already_set) propagates as it is; Encode frees the
  // objects stored for tensors packed before any failure.
  try {
    return by_name::Encode([&](Packer& pk) { return Pack(value, pk, "", 0, /*tensors=*/true); });
  } catch (const py::error_already_set&) {
    throw;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("cannot encode the value: ", e.what()));
  }
}

py::object ToPython(by_name::DecodedValue& value) {
  size_t next = 0;
  return Build(value.object(), value.extensions(), next);
}

}  // namespace drover::python
