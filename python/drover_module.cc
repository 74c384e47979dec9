// The Python module `drover` (python/drover.so): the Python end of drover's pipelines
// for PyTorch scripts. A thin layer over the C++ SDK (sdk/): it reads what C++ made, as
// torch.Tensor views of the node's object store, and answers: queue puts and
// drover.put of values whose tensors are copied once into the store (values.h).
//
//   import torch, drover
//   drover.init(worker_program="bazel-bin/examples/preprocess_to_ddp")  # loaders' workers
//   for batch in drover.DataLoader("MakeBatch", specs, num_workers=2, seed=7):
//       loss = model(batch[:, :16]) ...                # batch: a read-only torch view
//   q = drover.Queue.open("frames")                      # a queue C++ producers fill
//   for item in q: answers.put(f(item))                  # until it is closed and drained
//   w = drover.get_tensor("weights-7")                   # an object by id
//
// The Python API reference is the docstrings below (help(drover)) and python/drover.pyi,
// installed beside the module; keep the three in step.
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
#include "drover/by_name.h"
#include "drover/data_loader.h"
#include "drover/queue.h"
#include "drover/shared_tensor.h"
#include "drover/task.h"
#include "python/errors.h"
#include "python/torch_view.h"
#include "python/values.h"

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
py::object FromWire(by_name::ReceivedValue value) {
  absl::StatusOr<by_name::DecodedValue> r;
  {
    py::gil_scoped_release unlocked;
    r = by_name::Decode(std::move(value));
  }
  by_name::DecodedValue v = ValueOrRaise(std::move(r));
  return ToPython(v);
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
    absl::StatusOr<by_name::TensorById> got = by_name::GetTensor(id, wait);
    if (got.ok()) {
      mutable_object = got->is_mutable;
      t = std::move(got->tensor);
    } else {
      t = got.status();
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
  absl::StatusOr<by_name::AnyQueue> c;
  {
    py::gil_scoped_release unlocked;
    c = by_name::AnyQueue::Open(name, wait);
  }
  return QueueHandle{ValueOrRaise(std::move(c))};
}

std::vector<by_name::ReceivedValue> QueueTake(QueueHandle& q, const py::object& timeout, int max_items) {
  if (max_items < 1) throw py::value_error("max_items must be at least 1");
  const absl::Duration wait = Timeout(timeout);
  absl::StatusOr<std::vector<by_name::ReceivedValue>> items;
  {
    py::gil_scoped_release unlocked;
    items = q.queue.Get(wait, max_items);
  }
  return ValueOrRaise(std::move(items));
}

py::object QueueGetOne(QueueHandle& q, const py::object& timeout) {
  return FromWire(std::move(QueueTake(q, timeout, 1).front()));
}

py::list QueueGetMany(QueueHandle& q, int max_items, const py::object& timeout) {
  std::vector<by_name::ReceivedValue> items = QueueTake(q, timeout, max_items);
  py::list out;
  // Every item is decoded (so objects no tensor takes are freed) before the first error.
  std::vector<absl::StatusOr<by_name::DecodedValue>> decoded;
  {
    py::gil_scoped_release unlocked;
    for (by_name::ReceivedValue& v : items) decoded.push_back(by_name::Decode(std::move(v)));
  }
  for (auto& r : decoded) {
    by_name::DecodedValue v = ValueOrRaise(std::move(r));
    out.append(ToPython(v));
  }
  return out;
}

py::object QueueNext(QueueHandle& q) {
  std::vector<by_name::ReceivedValue> items;
  {
    const absl::Duration forever = absl::InfiniteDuration();
    absl::StatusOr<std::vector<by_name::ReceivedValue>> got;
    {
      py::gil_scoped_release unlocked;
      got = q.queue.Get(forever, 1);
    }
    if (absl::IsOutOfRange(got.status())) throw py::stop_iteration();
    items = ValueOrRaise(std::move(got));
  }
  return FromWire(std::move(items.front()));
}

py::dict QueueInfoDict(QueueHandle& q) {
  absl::StatusOr<QueueInfo> info;
  {
    py::gil_scoped_release unlocked;
    info = q.queue.Info();
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

// EncodePython's value, or ValueError (what cannot be sent) / drover.Error.
by_name::EncodedValue EncodeOrRaise(const py::object& value) {
  absl::StatusOr<by_name::EncodedValue> enc = EncodePython(value);
  if (absl::IsInvalidArgument(enc.status())) throw py::value_error(std::string(enc.status().message()));
  return ValueOrRaise(std::move(enc));
}

void QueuePutValue(QueueHandle& q, const py::object& value, const py::object& timeout) {
  const absl::Duration wait = Timeout(timeout);
  by_name::EncodedValue enc = EncodeOrRaise(value);
  absl::Status s;
  {
    py::gil_scoped_release unlocked;
    s = q.queue.Put(std::move(enc), wait);
  }
  RaiseIfError(s);
}

QueueHandle CreateQueue(const std::string& name, uint64_t capacity, bool keep_until_drained,
                        const py::object& drain_timeout) {
  if (!worker_program_set) {
    Raise(absl::FailedPreconditionError(
        "a queue is hosted by a process of this job running the C++ worker program: call "
        "drover.init(worker_program=PATH) first, or open a queue a C++ program created (Queue.open)"));
  }
  QueueOptions options;
  options.name = name;
  options.capacity = capacity;
  options.keep_until_drained = keep_until_drained;
  options.drain_timeout = Timeout(drain_timeout);
  absl::StatusOr<by_name::AnyQueue> c;
  {
    py::gil_scoped_release unlocked;
    c = by_name::AnyQueue::Create(options);
  }
  return QueueHandle{ValueOrRaise(std::move(c))};
}

// ---- drover.put / drover.get ----

// What drover.ObjectRef wraps: a reference to a value in the cluster's store.
struct RefHandle {
  by_name::AnyRef ref;
};

RefHandle PutObject(const py::object& value) {
  by_name::EncodedValue enc = EncodeOrRaise(value);
  py::gil_scoped_release unlocked;
  return RefHandle{by_name::AnyRef::Put(std::move(enc))};
}

py::object GetObjectValue(const RefHandle& ref, const py::object& timeout) {
  const absl::Duration wait = Timeout(timeout);
  absl::StatusOr<by_name::DecodedValue> r;
  {
    py::gil_scoped_release unlocked;
    absl::StatusOr<by_name::ReceivedValue> v = ref.ref.Get(wait);
    r = v.ok() ? by_name::Decode(*std::move(v)) : absl::StatusOr<by_name::DecodedValue>(v.status());
  }
  by_name::DecodedValue v = ValueOrRaise(std::move(r));
  return ToPython(v);
}

// ---- drover.DataLoader ----

// One pass over a loader's data set: its workers live as long as this does.
class LoaderPass {
 public:
  explicit LoaderPass(by_name::AnyLoader loader) : loader_(std::move(loader)) {}
  ~LoaderPass() { Close(); }

  py::object Next() {
    if (!loader_.valid()) throw py::stop_iteration();
    absl::StatusOr<LoaderItem<by_name::DecodedValue>> r;
    {
      py::gil_scoped_release unlocked;
      r = loader_.Next();
    }
    if (absl::IsOutOfRange(r.status())) {
      Finish();
      throw py::stop_iteration();
    }
    LoaderItem<by_name::DecodedValue> item = ValueOrRaise(std::move(r));
    return ToPython(item.value);
  }

  py::list Skipped() const {
    py::list out;
    for (const SkippedItem& s : loader_.valid() ? loader_.skipped() : skipped_) {
      out.append(py::make_tuple(s.position, absl::StrCat(absl::StatusCodeToString(s.error.code()), ": ",
                                                         s.error.message())));
    }
    return out;
  }

  py::dict Progress() const {
    const LoaderProgress p = loader_.valid() ? loader_.progress() : progress_;
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
    if (!loader_.valid()) return;
    by_name::AnyLoader loader = std::move(loader_);
    if (Py_IsInitialized() && PyGILState_Check() && !_Py_IsFinalizing()) {
      py::gil_scoped_release unlocked;  // killing the workers takes round trips
      loader = by_name::AnyLoader();
    }
  }

 private:
  // The end: keep what skipped() and progress() report, and let the workers go.
  void Finish() {
    skipped_ = loader_.skipped();
    progress_ = loader_.progress();
    Close();
  }

  by_name::AnyLoader loader_;
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
    options_.resources = Resources();
    options_.resources.cpus = cpus;
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
    auto packed = std::make_shared<std::vector<std::string>>();
    size_t i = 0;
    for (py::handle item : py::iter(inputs)) {
      absl::StatusOr<std::string> bytes = PackPython(item);
      if (!bytes.ok()) throw py::value_error(absl::StrCat("input ", i, ": ", bytes.status().message()));
      packed->push_back(*std::move(bytes));
      ++i;
    }
    inputs_ = std::move(packed);
  }

  size_t Len() const {
    const int64_t n = inputs_ ? static_cast<int64_t>(inputs_->size()) : std::max<int64_t>(0, range_.end - range_.begin);
    return static_cast<size_t>(options_.batch_size > 0 ? (n + options_.batch_size - 1) / options_.batch_size : n);
  }

  std::shared_ptr<LoaderPass> Iter() {
    absl::StatusOr<by_name::AnyLoader> loader;
    {
      py::gil_scoped_release unlocked;
      loader = inputs_ != nullptr ? by_name::AnyLoader::Start(inputs_, function_, factory_, options_)
                                  : by_name::AnyLoader::Start(range_, function_, factory_, options_);
    }
    auto pass = std::make_shared<LoaderPass>(ValueOrRaise(std::move(loader)));
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
  std::shared_ptr<const std::vector<std::string>> inputs_;
  std::shared_ptr<LoaderPass> last_;
};

}  // namespace
}  // namespace drover::python

PYBIND11_MODULE(drover, m) {
  using namespace drover::python;  // NOLINT: the module's own namespace
  // Each docstring starts with its Python signature, written for people (pybind11's
  // generated one names C++-flavoured types: `object`, `drover::python::QueueHandle`).
  py::options options;
  options.disable_function_signatures();
  m.doc() = R"doc(drover for PyTorch scripts: the Python side of drover's pipelines.

Reads what C++ made, as torch.Tensor views of the node's shared memory (no copy;
read-only where sealed: a write to such a view faults, clone() it to modify), and
answers: puts items and values whose tensors go into the store once, where a C++
reader on the node reads them in place.

    import torch, drover
    drover.init()                                   # join the cluster (DROVER_* env)
    q = drover.Queue.open("frames", timeout=30)     # a queue a C++ producer made
    answers = drover.Queue.open("answers")
    for item in q:                                  # ends when closed and drained
        answers.put({"sum": float(item["x"].sum()), "y": item["x"] * 2})
    answers.close()
    ref = drover.put(torch.ones(4)); drover.get(ref)
    for batch in drover.DataLoader("MakeBatch", specs, num_workers=2):   # C++ workers
        ...                                         # needs drover.init(worker_program=)

Values: None, bool, int (64-bit), float, str, bytes, torch.Tensor, and lists,
tuples and dicts of them (a tuple or list is a msgpack array: what a C++ struct
with MSGPACK_DEFINE reads). C++ vectors, tuples and structs come back as lists,
MSGPACK_DEFINE_MAP structs as dicts, tensors as torch views, queues as
drover.Queue.

Errors: drover.Error (its `code` is the status code's name, e.g. "NOT_FOUND";
str() is "CODE: message"), drover.TimeoutError for waits that ran out (also a
drover.Error), ValueError for bad arguments. Blocking calls release the GIL.
Timeouts are seconds; None waits forever.)doc";
  RegisterErrors(m);

  m.def("init", &Init, py::arg("worker_program") = "", py::arg("worker_args") = std::vector<std::string>{},
        py::arg("address") = "", py::arg("token_file") = "",
        R"doc(init(worker_program="", worker_args=[], address="", token_file="") -> None

Connects this process to the cluster: inside a `drover run` job as a part of that
job, else as a driver job of its own (ended when this process exits or calls
shutdown()). address / token_file: the scheduler and the cluster token file
(default: DROVER_ADDRESS / DROVER_TOKEN_FILE, then the local cluster's files).
worker_program: a C++ binary built with drover's SDK, whose DROVER_REMOTE functions
this process's DataLoaders call and which hosts the queues it creates; shipped to
the nodes like a C++ driver's own binary. worker_args: its arguments.
Raises drover.Error (ALREADY_EXISTS if called twice; UNAVAILABLE if no scheduler
answers).)doc");
  m.def(
      "shutdown",
      [] {
        py::gil_scoped_release unlocked;
        drover::Shutdown();
      },
      R"doc(shutdown() -> None

Leaves the cluster; a driver job ends here. First closes the queues this process
created with keep_until_drained=True and waits until their consumers took every
item (see Queue.create). Harmless when not initialized.)doc");
  m.def("is_initialized", &drover::IsInitialized, "is_initialized() -> bool\n\nTrue between init() and shutdown().");
  m.def("job_id", &drover::JobId, "job_id() -> str\n\nThis process's job ('' before init()).");
  m.def("node_id", &drover::NodeId, "node_id() -> str\n\nThe node this process runs on ('' before init()).");
  m.def("get_tensor", &GetTensor, py::arg("object_id"), py::arg("timeout") = 30.0,
        R"doc(get_tensor(object_id, timeout=30.0) -> torch.Tensor

The tensor object `object_id` (put by any process of this cluster, e.g. with C++
Objects::PutTensor or as a store tensor's object_id()) as a torch.Tensor view:
read-only if sealed, writable for a SharedTensor. Pulled to this node first if it is
elsewhere. drover.TimeoutError if it did not appear within `timeout` s; drover.Error
NOT_FOUND at once for an object of a job this cluster never ran or that ended.)doc");
  m.def("store_usage", &StoreUsageDict,
        "store_usage() -> dict\n\nThis node's object store: {'capacity': bytes, 'used': bytes, 'objects': count}.");

  py::class_<RefHandle>(m, "ObjectRef",
                        "A value in the cluster's object store, made by drover.put(). Read it with drover.get(ref). "
                        "The value lives while a reference to it does (in this process: this object).")
      .def_property_readonly(
          "id", [](const RefHandle& r) { return r.ref.id(); },
          "The object's id ('<job>.<owner>.<n>').")
      .def("__repr__",
           [](const RefHandle& r) { return absl::StrCat("drover.ObjectRef('", r.ref.id(), "')"); });
  m.def("put", &PutObject, py::arg("value"),
        R"doc(put(value) -> drover.ObjectRef

Stores `value` (see the module's help for what a value may hold) and returns its
reference at once. Tensors of 64 KiB or more are copied once into this node's
object store (smaller ones travel inside the value). Needs init(). ValueError
naming the element that cannot be sent.)doc");
  m.def("get", &GetObjectValue, py::arg("ref"), py::arg("timeout") = py::none(),
        R"doc(get(ref, timeout=None) -> object

The value of `ref` (a drover.ObjectRef), waiting up to `timeout` s: tensors as
read-only torch views of the store (zero copy on this node). drover.TimeoutError
when it is not ready in time.)doc");

  py::class_<QueueHandle>(m, "Queue",
                          R"doc(A drover::Queue: a FIFO shared by every process of the cluster.

Open one a C++ program created (Queue.open(name)) or create one
(Queue.create(...)); take items with get(), get_many() or iteration (which ends
when the queue is closed and drained), add items with put(), close() it when no
more will come. Items are values (see help(drover)); their tensors are store
objects the taker owns: read in place on this node, freed with the last view.)doc")
      .def_static("open", &OpenQueue, py::arg("name"), py::arg("timeout") = 10.0,
                  R"doc(Queue.open(name, timeout=10.0) -> drover.Queue

The queue created with `name` (C++: QueueOptions::name), waiting up to
`timeout` s for it to exist. drover.TimeoutError if it did not.)doc")
      .def_static("create", &CreateQueue, py::arg("name") = "", py::arg("capacity") = 0,
                  py::arg("keep_until_drained") = false, py::arg("drain_timeout") = 3600.0,
                  R"doc(Queue.create(name="", capacity=0, keep_until_drained=False, drain_timeout=3600.0) -> drover.Queue

A new queue, hosted by a process of this job: this needs init(worker_program=...)
(the C++ program that hosts it). name: makes it findable with Queue.open (unique
among the cluster's live queues and actors). capacity: most items queued at once, a
put waits while it is full (0: unbounded). keep_until_drained: shutdown() (and the
end of this process) first closes the queue and waits, up to drain_timeout s, until
consumers took every item, so the job (and the queue) outlive the producer's work.)doc")
      .def("put", &QueuePutValue, py::arg("value"), py::arg("timeout") = py::none(),
           R"doc(put(value, timeout=None) -> None

Appends `value`, waiting up to `timeout` s while the queue is full. Tensors of 64
KiB or more are copied once into this node's store and only their ids travel: a
C++ consumer on this node reads them in place (elsewhere: pulled once).
drover.TimeoutError when there was no room in time; drover.Error
FAILED_PRECONDITION once the queue is closed; ValueError for what cannot be sent.)doc")
      .def("get", &QueueGetOne, py::arg("timeout") = py::none(),
           R"doc(get(timeout=None) -> object

The item at the front, waiting up to `timeout` s (None: forever).
drover.TimeoutError when none came; drover.Error with code OUT_OF_RANGE when the
queue is closed and empty; ABORTED when its host died (the message says why).)doc")
      .def("get_many", &QueueGetMany, py::arg("max_items"), py::arg("timeout") = py::none(),
           R"doc(get_many(max_items, timeout=None) -> list

Up to `max_items` items in one round trip (at least one, waiting up to `timeout` s
for it): for many small items. Errors as get().)doc")
      .def(
          "close",
          [](QueueHandle& q) {
            absl::Status s;
            {
              py::gil_scoped_release unlocked;
              s = q.queue.Close();
            }
            RaiseIfError(s);
          },
          R"doc(close() -> None

No more items: puts fail from now on, gets take what is left and then end
(OUT_OF_RANGE; iteration stops). Any process may close; closing twice is harmless.)doc")
      .def(
          "destroy",
          [](QueueHandle& q) {
            absl::Status s;
            {
              py::gil_scoped_release unlocked;
              s = q.queue.Destroy();
            }
            RaiseIfError(s);
          },
          R"doc(destroy() -> None

Ends the queue now, freeing the items left; every later call on it fails.)doc")
      .def("info", &QueueInfoDict,
           R"doc(info() -> dict

The queue's counters: size (items queued), capacity, closed, puts, gets,
waiting_puts, waiting_gets, stored_bytes (of the queued items' tensors).)doc")
      .def_property_readonly(
          "name", [](const QueueHandle& q) { return q.queue.name(); }, "The queue's name.")
      .def(
          "__iter__", [](QueueHandle& q) -> QueueHandle& { return q; }, py::return_value_policy::reference_internal,
          "Iterating takes items (as get()) until the queue is closed and drained.")
      .def("__next__", &QueueNext, "The next item; StopIteration once the queue is closed and drained.");

  py::class_<LoaderPass, std::shared_ptr<LoaderPass>>(
      m, "_LoaderPass", "One pass over a DataLoader's data (what iter(loader) returns); its workers live as long as it.")
      .def(
          "__iter__", [](std::shared_ptr<LoaderPass> p) { return p; }, "The pass itself.")
      .def("__next__", &LoaderPass::Next,
           "The next batch; StopIteration at the end; drover.Error for an item's error (on_error='stop').")
      .def("close", &LoaderPass::Close, "Stops the workers; what is left of the pass is dropped.")
      .def_property_readonly("skipped", &LoaderPass::Skipped,
                             "[(position, 'CODE: message'), ...]: the items skipped (on_error='skip').")
      .def_property_readonly("progress", &LoaderPass::Progress,
                             "{'total', 'delivered', 'skipped', 'retried', 'in_flight', 'items_per_second'}.");

  py::class_<Loader>(m, "DataLoader",
                     R"doc(DataLoader(function, inputs, *, batch_size=0, num_workers=2, prefetch=16, ordered=True,
           seed=0, on_error="stop", max_retries=3, spread=True, node="", cpus=1.0,
           name="data", pin_memory=False, progress="auto", start_timeout=120.0, factory="")

Items made by `function`, a DROVER_REMOTE function of the C++ worker program
(init(worker_program=...)), on `num_workers` workers of the cluster, iterated as a
torch.utils.data.DataLoader: each iter() is a pass with workers of its own.
inputs: a range (step 1) or an iterable of values, one per item, passed as the
function's arguments (a tuple: several). batch_size > 0: the function takes a list
of that many inputs. prefetch: items in flight per worker. ordered: results in
input order (else as they finish; the same set). seed: each item's seed is
ItemSeed(seed, position), so a run equals a serial one. on_error: "stop" (the
item's error is raised where it comes) or "skip" (listed in .skipped).
max_retries: runs of items whose worker died. spread / node / cpus: placement of
the workers. pin_memory: results' tensors staged in this node's store. progress:
a progress line on stderr ("auto": when it is a terminal). factory: a registered
factory whose object's `function` method the workers call.)doc")
      .def(py::init<std::string, py::object, int64_t, int, int, bool, uint64_t, std::string, int, bool, std::string,
                    double, std::string, bool, std::string, double, std::string>(),
           py::arg("function"), py::arg("inputs"), py::kw_only(), py::arg("batch_size") = 0,
           py::arg("num_workers") = 2, py::arg("prefetch") = 16, py::arg("ordered") = true, py::arg("seed") = 0,
           py::arg("on_error") = "stop", py::arg("max_retries") = 3, py::arg("spread") = true,
           py::arg("node") = "", py::arg("cpus") = 1.0, py::arg("name") = "data", py::arg("pin_memory") = false,
           py::arg("progress") = "auto", py::arg("start_timeout") = 120.0, py::arg("factory") = "",
           "A DataLoader over `inputs` (the workers start at each iter()); see help(drover.DataLoader).")
      .def("__len__", &Loader::Len, "Batches (or items) per pass.")
      .def("__iter__", &Loader::Iter, "A new pass (_LoaderPass) with workers of its own.")
      .def_property("seed", &Loader::seed, &Loader::set_seed, "The seed of the next pass.")
      .def_property_readonly(
          "skipped", [](const Loader& l) { return l.last() ? l.last()->Skipped() : py::list(); },
          "The last pass's skipped items: [(position, 'CODE: message'), ...].")
      .def_property_readonly(
          "progress", [](const Loader& l) { return l.last() ? l.last()->Progress() : py::dict(); },
          "The last pass's progress (see _LoaderPass.progress).");
}
