// The Python module `drover` (python/drover.so): the consuming end of drover's pipelines
// for PyTorch scripts. A thin layer over the C++ SDK (sdk/): it makes nothing itself,
// it reads what C++ made, as torch.Tensor views of the node's object store.
//
//   import torch, drover
//   drover.init(worker_program="bazel-bin/examples/preprocess_to_ddp")  # loaders' workers
//   for batch in drover.DataLoader("MakeBatch", specs, num_workers=2, seed=7):
//       loss = model(batch[:, :16]) ...                # batch: a read-only torch view
//   q = drover.Queue.open("frames")                      # a queue C++ producers fill
//   for item in q: ...                                   # until it is closed and drained
//   w = drover.get_tensor("weights-7")                   # an object by id
//
// Which views are writable, and how read-only is enforced: python/torch_view.h.
// Values: python/values.h. Errors: drover.Error (`code`, "CODE: message") and
// drover.TimeoutError (python/errors.h). Blocking calls release the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "drover/data_loader.h"
#include "drover/internal/pipeline_api.h"
#include "drover/shared_tensor.h"
#include "drover/task.h"
#include "python/errors.h"
#include "python/torch_view.h"
#include "python/values.h"
#include "sdk/internal/runtime_internal.h"
#include "sdk/internal/tensor_internal.h"

namespace drover::python {
namespace {

// A loader input packed by PackPython, packed again as it is into the call's arguments.
struct PackedInput {
  std::shared_ptr<const msgpack::object_handle> value;
};

}  // namespace
}  // namespace drover::python

namespace msgpack {
MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS) {
namespace adaptor {
template <>
struct pack<drover::python::PackedInput> {
  template <typename Stream>
  packer<Stream>& operator()(packer<Stream>& o, const drover::python::PackedInput& v) const {
    return o.pack(v.value->get());
  }
};
}  // namespace adaptor
}  // MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS)
}  // namespace msgpack

namespace drover::python {
namespace {

bool worker_program_set = false;

// Seconds (None: forever) as a Duration. Raises ValueError for a negative or NaN one.
absl::Duration Timeout(const py::object& seconds) {
  if (seconds.is_none()) return absl::InfiniteDuration();
  const double s = seconds.cast<double>();
  if (!(s >= 0)) throw py::value_error(absl::StrCat("a timeout is seconds >= 0 or None, not ", s));
  return std::isinf(s) ? absl::InfiniteDuration() : absl::Seconds(s);
}

// Makes a received value into Python objects: decodes it (may wait) without the GIL.
py::object FromWire(const internal::OwnedValue& value) {
  absl::StatusOr<std::unique_ptr<Received>> r;
  {
    py::gil_scoped_release unlocked;
    r = Receive(value);
  }
  return ToPython(*ValueOrRaise(std::move(r)));
}

void Init(const std::string& worker_program, const std::vector<std::string>& worker_args,
          const std::string& address, const std::string& token_file) {
  if (RunningAsWorker()) {
    Raise(absl::FailedPreconditionError(
        "this process was started by a drover agent to serve tasks, which a Python process cannot do: "
        "loaders' workers run the C++ program given as drover.init(worker_program=...)"));
  }
  std::vector<std::string> args;
  for (py::handle a : py::module_::import("sys").attr("argv")) args.push_back(py::str(a));
  if (args.empty()) args.push_back("python");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  InitOptions options;
  options.address = address;
  options.token_file = token_file;
  options.worker_program = worker_program;
  options.worker_args = worker_args;
  absl::Status s;
  {
    py::gil_scoped_release unlocked;
    s = drover::Init(static_cast<int>(argv.size()), argv.data(), options);
  }
  RaiseIfError(s);
  worker_program_set = !worker_program.empty();
}

py::object GetTensor(const std::string& id, const py::object& timeout) {
  const absl::Duration wait = Timeout(timeout);
  absl::StatusOr<Tensor> t;
  bool mutable_object = false;
  {
    py::gil_scoped_release unlocked;
    absl::StatusOr<object_store::ObjectRef> ref = internal::GetObject(id, wait);
    if (ref.ok()) {
      mutable_object = ref->is_mutable();
      t = internal::TensorAccess::TensorFromObject(*std::move(ref));
    } else {
      t = ref.status();
    }
  }
  return TorchView(ValueOrRaise(std::move(t)), mutable_object);
}

py::dict StoreUsageDict() {
  const StoreUsage u = ValueOrRaise(NodeStoreUsage());
  py::dict d;
  d["capacity"] = u.capacity;
  d["used"] = u.used;
  d["objects"] = u.objects;
  return d;
}

// ---- drover.Queue ----

QueueHandle OpenQueue(const std::string& name, const py::object& timeout) {
  const absl::Duration wait = Timeout(timeout);
  absl::StatusOr<std::shared_ptr<internal::QueueClient>> c;
  {
    py::gil_scoped_release unlocked;
    c = internal::OpenQueue(name, wait);
  }
  return QueueHandle{ValueOrRaise(std::move(c))};
}

std::vector<internal::OwnedValue> QueueTake(QueueHandle& q, const py::object& timeout, int max_items) {
  if (max_items < 1) throw py::value_error("max_items must be at least 1");
  const absl::Duration wait = Timeout(timeout);
  absl::StatusOr<std::vector<internal::OwnedValue>> items;
  {
    py::gil_scoped_release unlocked;
    items = internal::QueueGet(*q.client, wait, max_items);
  }
  return ValueOrRaise(std::move(items));
}

py::object QueueGetOne(QueueHandle& q, const py::object& timeout) {
  return FromWire(QueueTake(q, timeout, 1).front());
}

py::list QueueGetMany(QueueHandle& q, int max_items, const py::object& timeout) {
  std::vector<internal::OwnedValue> items = QueueTake(q, timeout, max_items);
  py::list out;
  // Every item is decoded (so objects no tensor takes are freed) before the first error.
  std::vector<absl::StatusOr<std::unique_ptr<Received>>> received;
  {
    py::gil_scoped_release unlocked;
    for (const internal::OwnedValue& v : items) received.push_back(Receive(v));
  }
  for (auto& r : received) out.append(ToPython(*ValueOrRaise(std::move(r))));
  return out;
}

py::object QueueNext(QueueHandle& q) {
  std::vector<internal::OwnedValue> items;
  {
    const absl::Duration forever = absl::InfiniteDuration();
    absl::StatusOr<std::vector<internal::OwnedValue>> got;
    {
      py::gil_scoped_release unlocked;
      got = internal::QueueGet(*q.client, forever, 1);
    }
    if (absl::IsOutOfRange(got.status())) throw py::stop_iteration();
    items = ValueOrRaise(std::move(got));
  }
  return FromWire(items.front());
}

py::dict QueueInfoDict(QueueHandle& q) {
  absl::StatusOr<QueueInfo> info;
  {
    py::gil_scoped_release unlocked;
    info = internal::QueueStats(*q.client);
  }
  const QueueInfo i = ValueOrRaise(std::move(info));
  py::dict d;
  d["size"] = i.size;
  d["capacity"] = i.capacity;
  d["closed"] = i.closed;
  d["puts"] = i.puts;
  d["gets"] = i.gets;
  d["waiting_puts"] = i.waiting_puts;
  d["waiting_gets"] = i.waiting_gets;
  d["stored_bytes"] = i.stored_bytes;
  return d;
}

// ---- drover.DataLoader ----

// One pass over a loader's data set: its workers live as long as this does.
class LoaderPass {
 public:
  explicit LoaderPass(std::shared_ptr<internal::LoaderCore> core) : core_(std::move(core)) {}
  ~LoaderPass() { Close(); }

  py::object Next() {
    if (core_ == nullptr) throw py::stop_iteration();
    absl::StatusOr<internal::LoaderResult> r;
    {
      py::gil_scoped_release unlocked;
      r = internal::LoaderNext(*core_);
    }
    if (absl::IsOutOfRange(r.status())) {
      Finish();
      throw py::stop_iteration();
    }
    internal::LoaderResult result = ValueOrRaise(std::move(r));
    absl::StatusOr<std::unique_ptr<Received>> value;
    {
      py::gil_scoped_release unlocked;
      value = Receive(result.value);
    }
    if (!value.ok()) Raise(internal::LoaderDecodeError(*core_, result.position, value.status()));
    return ToPython(**value);
  }

  py::list Skipped() const {
    py::list out;
    for (const SkippedItem& s : core_ ? internal::LoaderSkipped(*core_) : skipped_) {
      out.append(py::make_tuple(s.position, absl::StrCat(absl::StatusCodeToString(s.error.code()), ": ",
                                                         s.error.message())));
    }
    return out;
  }

  py::dict Progress() const {
    const LoaderProgress p = core_ ? internal::LoaderProgressOf(*core_) : progress_;
    py::dict d;
    d["total"] = p.total;
    d["delivered"] = p.delivered;
    d["skipped"] = p.skipped;
    d["retried"] = p.retried;
    d["in_flight"] = p.in_flight;
    d["items_per_second"] = p.items_per_second;
    return d;
  }

  // Stops the workers (what is left of the pass is dropped).
  void Close() {
    if (core_ == nullptr) return;
    std::shared_ptr<internal::LoaderCore> core = std::move(core_);
    if (Py_IsInitialized() && PyGILState_Check() && !_Py_IsFinalizing()) {
      py::gil_scoped_release unlocked;  // killing the workers takes round trips
      core.reset();
    }
  }

 private:
  // The end: keep what skipped() and progress() report, and let the workers go.
  void Finish() {
    skipped_ = internal::LoaderSkipped(*core_);
    progress_ = internal::LoaderProgressOf(*core_);
    Close();
  }

  std::shared_ptr<internal::LoaderCore> core_;
  std::vector<SkippedItem> skipped_;
  LoaderProgress progress_;
};

class Loader {
 public:
  Loader(std::string function, const py::object& inputs, int64_t batch_size, int num_workers, int prefetch,
         bool ordered, uint64_t seed, const std::string& on_error, int max_retries, bool spread,
         const std::string& node, double cpus, const std::string& name, bool pin_memory,
         const std::string& progress, double start_timeout, std::string factory)
      : function_(std::move(function)), factory_(std::move(factory)) {
    if (!worker_program_set) {
      Raise(absl::FailedPreconditionError(
          "a DataLoader's workers run a C++ program built with drover's SDK, whose DROVER_REMOTE "
          "functions it calls: call drover.init(worker_program=PATH) first"));
    }
    if (on_error != "stop" && on_error != "skip") throw py::value_error("on_error is 'stop' or 'skip'");
    if (progress != "auto" && progress != "on" && progress != "off") {
      throw py::value_error("progress is 'auto', 'on' or 'off'");
    }
    if (batch_size < 0) throw py::value_error("batch_size must be >= 0");
    options_.batch_size = batch_size;
    options_.num_workers = num_workers;
    options_.prefetch = prefetch;
    options_.ordered = ordered;
    options_.seed = seed;
    options_.on_error = on_error == "skip" ? LoaderOptions::OnError::kSkip : LoaderOptions::OnError::kStop;
    options_.max_retries = max_retries;
    options_.spread = spread;
    options_.node_id = node;
    options_.resources = Resources{.cpus = cpus};
    options_.name = name;
    options_.pin_memory = pin_memory;
    options_.progress = progress == "on"    ? LoaderOptions::Progress::kOn
                        : progress == "off" ? LoaderOptions::Progress::kOff
                                            : LoaderOptions::Progress::kAuto;
    options_.start_timeout = absl::Seconds(start_timeout);
    py::object range_type = py::module_::import("builtins").attr("range");
    if (py::isinstance(inputs, range_type) && inputs.attr("step").cast<int64_t>() == 1) {
      range_ = IndexRange{inputs.attr("start").cast<int64_t>(), inputs.attr("stop").cast<int64_t>()};
      return;
    }
    auto packed = std::make_shared<std::vector<PackedInput>>();
    size_t i = 0;
    for (py::handle item : py::iter(inputs)) {
      absl::StatusOr<std::string> bytes = PackPython(item);
      if (!bytes.ok()) throw py::value_error(absl::StrCat("input ", i, ": ", bytes.status().message()));
      // Unpacked into a zone of its own (strings copied): it outlives `bytes`.
      packed->push_back(PackedInput{std::make_shared<const msgpack::object_handle>(
          msgpack::unpack(bytes->data(), bytes->size()))});
      ++i;
    }
    inputs_ = std::move(packed);
  }

  size_t Len() const {
    const int64_t n = inputs_ ? static_cast<int64_t>(inputs_->size()) : std::max<int64_t>(0, range_.end - range_.begin);
    return static_cast<size_t>(options_.batch_size > 0 ? (n + options_.batch_size - 1) / options_.batch_size : n);
  }

  std::shared_ptr<LoaderPass> Iter() {
    internal::LoaderInputs in;
    const int64_t b = options_.batch_size;
    if (inputs_ != nullptr) {
      in = b > 0 ? internal::MakeLoaderInputs<PackedInput, std::vector<PackedInput>>(inputs_, b)
                 : internal::MakeLoaderInputs<PackedInput, PackedInput>(inputs_, 0);
    } else {
      in = b > 0 ? internal::MakeRangeInputs<std::vector<int64_t>>(range_, b)
                 : internal::MakeRangeInputs<int64_t>(range_, 0);
    }
    absl::StatusOr<std::shared_ptr<internal::LoaderCore>> core;
    {
      py::gil_scoped_release unlocked;
      core = internal::StartLoaderByName(std::move(in), function_, factory_, options_);
    }
    auto pass = std::make_shared<LoaderPass>(ValueOrRaise(std::move(core)));
    last_ = pass;
    return pass;
  }

  uint64_t seed() const { return options_.seed; }
  void set_seed(uint64_t seed) { options_.seed = seed; }
  const std::shared_ptr<LoaderPass>& last() const { return last_; }

 private:
  const std::string function_;
  const std::string factory_;
  LoaderOptions options_;
  IndexRange range_;
  std::shared_ptr<const std::vector<PackedInput>> inputs_;
  std::shared_ptr<LoaderPass> last_;
};

}  // namespace
}  // namespace drover::python

PYBIND11_MODULE(drover, m) {
  using namespace drover::python;  // NOLINT: the module's own namespace
  using drover::internal::QueueClose;
  using drover::internal::QueueName;
  m.doc() =
      "drover for PyTorch consumers: store objects, queue items and DataLoader batches made by C++ "
      "as torch.Tensor views of the node's shared memory (no copy; read-only where sealed).";
  RegisterErrors(m);

  m.def("init", &Init, py::arg("worker_program") = "", py::arg("worker_args") = std::vector<std::string>{},
        py::arg("address") = "", py::arg("token_file") = "",
        "Connects this process to the cluster (inside a drover job: as a part of it; else as a driver job "
        "of its own). worker_program: the C++ binary (built with drover's SDK) whose DROVER_REMOTE "
        "functions DataLoaders call; shipped to the nodes like a C++ driver's own binary.");
  m.def("shutdown", [] {
    py::gil_scoped_release unlocked;
    drover::Shutdown();
  });
  m.def("is_initialized", &drover::IsInitialized);
  m.def("job_id", &drover::JobId);
  m.def("node_id", &drover::NodeId);
  m.def("get_tensor", &GetTensor, py::arg("object_id"), py::arg("timeout") = 30.0,
        "The tensor object `object_id` (put by any process of this cluster) as a torch.Tensor view: "
        "read-only if sealed, writable for a SharedTensor. Pulled to this node first if it is elsewhere.");
  m.def("store_usage", &StoreUsageDict, "This node's store: capacity, used (bytes) and objects.");

  py::class_<QueueHandle>(m, "Queue", "A drover::Queue made by C++: take its items (get, or iterate).")
      .def_static("open", &OpenQueue, py::arg("name"), py::arg("timeout") = 10.0,
                  "The queue created with `name`, waiting up to `timeout` s for it to exist.")
      .def("get", &QueueGetOne, py::arg("timeout") = py::none(),
           "The item at the front, waiting up to `timeout` s (None: forever). drover.TimeoutError when none "
           "came; drover.Error with code OUT_OF_RANGE when the queue is closed and empty.")
      .def("get_many", &QueueGetMany, py::arg("max_items"), py::arg("timeout") = py::none())
      .def("close", [](QueueHandle& q) {
        absl::Status s;
        {
          py::gil_scoped_release unlocked;
          s = QueueClose(*q.client);
        }
        RaiseIfError(s);
      })
      .def("info", &QueueInfoDict)
      .def_property_readonly("name", [](const QueueHandle& q) { return QueueName(*q.client); })
      .def("__iter__", [](QueueHandle& q) -> QueueHandle& { return q; }, py::return_value_policy::reference_internal)
      .def("__next__", &QueueNext);

  py::class_<LoaderPass, std::shared_ptr<LoaderPass>>(m, "_LoaderPass")
      .def("__iter__", [](std::shared_ptr<LoaderPass> p) { return p; })
      .def("__next__", &LoaderPass::Next)
      .def("close", &LoaderPass::Close)
      .def_property_readonly("skipped", &LoaderPass::Skipped)
      .def_property_readonly("progress", &LoaderPass::Progress);

  py::class_<Loader>(m, "DataLoader",
                     "Batches made by the worker program's registered C++ function on the cluster, iterated as a "
                     "torch.utils.data.DataLoader: each iter() is a pass with workers of its own.")
      .def(py::init<std::string, py::object, int64_t, int, int, bool, uint64_t, std::string, int, bool, std::string,
                    double, std::string, bool, std::string, double, std::string>(),
           py::arg("function"), py::arg("inputs"), py::kw_only(), py::arg("batch_size") = 0,
           py::arg("num_workers") = 2, py::arg("prefetch") = 16, py::arg("ordered") = true, py::arg("seed") = 0,
           py::arg("on_error") = "stop", py::arg("max_retries") = 3, py::arg("spread") = true,
           py::arg("node") = "", py::arg("cpus") = 1.0, py::arg("name") = "data", py::arg("pin_memory") = false,
           py::arg("progress") = "auto", py::arg("start_timeout") = 120.0, py::arg("factory") = "")
      .def("__len__", &Loader::Len)
      .def("__iter__", &Loader::Iter)
      .def_property("seed", &Loader::seed, &Loader::set_seed)
      .def_property_readonly("skipped", [](const Loader& l) { return l.last() ? l.last()->Skipped() : py::list(); })
      .def_property_readonly("progress", [](const Loader& l) { return l.last() ? l.last()->Progress() : py::dict(); });
}
