// drover::DataLoader and drover::ParallelMap: preprocessing on every core of the
// cluster, feeding one consumer (a training loop) as torch.utils.data.DataLoader feeds
// one from worker processes.
//
//   absl::StatusOr<drover::Tensor> Decode(int64_t index, uint64_t seed);   // one item
//   DROVER_REMOTE(Decode);
//
//   drover::LoaderOptions options;
//   options.num_workers = 8;
//   options.prefetch = 4;
//   auto loader = drover::DataLoader<drover::Tensor>::Create(
//       drover::IndexRange{0, 20000}, Decode, options);
//   while (true) {
//     absl::StatusOr<drover::Tensor> x = loader->Next();
//     if (absl::IsOutOfRange(x.status())) break;        // the end of the data set
//     if (!x.ok()) return x.status();                    // names the item, its node, why
//     Train(*x);
//   }
//
// The data set is an index range or a list of inputs (file names, shards: any value a
// task takes). The function is registered with DROVER_REMOTE and takes the input (or,
// per batch, a std::vector of inputs: batch_size of them, the last batch shorter) and
// the item's seed: `Out F(In input, uint64_t seed)` or `Out F(std::vector<In>, uint64_t)`
// (returning Out, absl::StatusOr<Out>; it may throw).
//
// Workers: num_workers actors, started once and kept for the loader's life (persistent
// workers), spread over the nodes (or on one node). A worker may hold state made once
// by a factory (open files, a tokenizer): with Create(inputs, factory, &T::Method,
// options), `T* factory(drover::WorkerInfo)` runs in each worker at its start and the
// method is called per item. A call carries several items when they are fast (about
// 2 ms of work, at most prefetch/2), so each worker has its next call queued and fast
// items do not pay a round trip each.
//
// Backpressure: at most num_workers * prefetch items are being made or waiting to be
// taken; workers get more only as the consumer takes results. So the memory held is
// bounded by the prefetch, not by the data set. Results' tensors live in the stores of
// the nodes that made them (in place for a consumer on the same node, pulled once to
// another) and are freed when the consumer's last copy of them goes.
//
// Order: ordered (default) gives results in input order, whatever order they finish
// in; unordered gives them as they finish. Either way the results are those of a serial
// run: an item's output depends only on its input and seed (ItemSeed(seed, position)),
// never on the worker that made it.
//
// Failures: an item whose function fails (an error status, an exception) is reported
// as "item 17 (on node-2, worker 1): <message>" (a batch as "batch 3 (items 96..127)"):
// with OnError::kStop that error is what Next returns (in its place in the order) and
// the loader stops; with kSkip the item is left out and listed in skipped(). An item
// whose worker died (killed, crashed) runs again, on the restarted or another worker,
// up to max_retries times; then it fails the same way, naming the death.
//
// Progress: on a terminal, a line on stderr (items done, items/s, ETA) updated a few
// times a second; nothing when stderr is not a terminal (logs stay clean), unless
// Progress::kOn.
//
// Pinned memory: with pin_memory, every tensor of a result is in this node's store
// arena when Next returns it (small ones, which travel inline, are copied there), the
// host memory a process with a GPU registers once with its device copier; CopyToDevice
// then copies it to the device as torch's pin_memory + .cuda() does.
//
// Thread safety: a DataLoader is used by one consumer thread at a time (it is movable,
// not copyable). Destroying it stops its workers.
//
// Errors (absl canonical codes): OUT_OF_RANGE the end (every item delivered or
// skipped); the item's own code and message, prefixed with the item (kStop);
// INVALID_ARGUMENT bad options (num_workers or prefetch < 1, batch_size that does not
// match the function), an unregistered function; FAILED_PRECONDITION no drover::Init;
// the actor layer's errors (e.g. no node has the workers' resources: DEADLINE_EXCEEDED
// from Create after start_timeout).
#ifndef DROVER_SDK_INCLUDE_DROVER_DATA_LOADER_H_
#define DROVER_SDK_INCLUDE_DROVER_DATA_LOADER_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "drover/internal/codec.h"
#include "drover/internal/pipeline_api.h"
#include "drover/internal/registry.h"
#include "drover/tensor.h"
#include "drover/types.h"

namespace drover {

// The worker a factory runs in.
struct WorkerInfo {
  int64_t worker_id = 0;    // 0 .. num_workers - 1
  int64_t num_workers = 0;
  uint64_t seed = 0;        // LoaderOptions::seed
  std::string loader;       // LoaderOptions::name
  MSGPACK_DEFINE(worker_id, num_workers, seed, loader)
};

// The inputs begin, begin + 1, ..., end - 1.
struct IndexRange {
  int64_t begin = 0;
  int64_t end = 0;
};

struct LoaderOptions {
  // Worker actors, each with `resources`.
  int num_workers = 2;
  Resources resources = {1, 0, 0, {}};  // 1 CPU
  // Items in flight per worker (being made or waiting to be taken).
  int prefetch = 16;
  // Results in input order (true) or as they finish.
  bool ordered = true;
  // 0: the function takes one input. n > 0: it takes a std::vector of n inputs.
  int64_t batch_size = 0;
  // Seeds: item (or batch) i gets ItemSeed(seed, i).
  uint64_t seed = 0;
  enum class OnError { kStop, kSkip };
  OnError on_error = OnError::kStop;
  // Runs of an item whose worker died, after the first.
  int max_retries = 3;
  // Workers over the nodes (spread) or where they fit first; or all on `node_id`.
  bool spread = true;
  std::string node_id;
  enum class Progress { kAuto, kOn, kOff };
  Progress progress = Progress::kAuto;
  // In messages and the progress line.
  std::string name = "data";
  // Stage every result tensor in this node's store arena (see above).
  bool pin_memory = false;
  // How long Create waits for the workers to start.
  absl::Duration start_timeout = absl::Minutes(2);
};

// The seed of item (or batch) `position` of a loader with `seed`: a pure function, so
// a serial run reproduces a loader's results.
uint64_t ItemSeed(uint64_t seed, int64_t position);

// Copies a contiguous tensor's bytes to `device` (kHostDevice = -1: host memory at
// `dst`) through this process's device copier: CUDA where the program linked the CUDA
// copier and has a GPU, host memory only otherwise (FAILED_PRECONDITION for a device
// then). `dst` must hold t.nbytes().
absl::Status CopyToDevice(const Tensor& t, int device, void* dst);

// An item the loader left out (OnError::kSkip).
struct SkippedItem {
  int64_t position = 0;  // the item's (or batch's) position in the inputs
  absl::Status error;    // names the item, its node and why
};

// A result with its position in the inputs (the item's, or the batch's number).
template <typename Out>
struct LoaderItem {
  int64_t position = 0;
  Out value;
};

// How far a loader is.
struct LoaderProgress {
  int64_t total = 0;      // items (or batches)
  int64_t delivered = 0;  // returned by Next
  int64_t skipped = 0;
  int64_t retried = 0;    // runs again after a worker died
  int64_t in_flight = 0;  // being made or waiting to be taken
  double items_per_second = 0;
  // Calls sent to the workers: short items go many to a call (about 2 ms of their
  // measured work each), so a call's ~50 µs of overhead does not eat the parallelism.
  int64_t calls = 0;
};

namespace internal {

// The type-erased loader in the runtime (sdk/runtime/loader_core.h).
class LoaderCore;

// The data set as the core sees it.
struct LoaderInputs {
  int64_t count = 0;        // positions: items, or batches
  int64_t items = 0;        // inputs
  bool batched = false;     // the function takes a std::vector of inputs
  int64_t batch_size = 0;   // inputs per position when batched (0 otherwise)
  int64_t first_index = 0;  // the index of input 0 (an IndexRange's begin), for messages
  // The function's first argument for a position.
  std::function<absl::StatusOr<EncodedValue>(int64_t position)> encode;
};

struct LoaderResult {
  int64_t position = 0;
  OwnedValue value;
};

// `function_key` and `factory_key` are FunctionKeys (the factory's empty for a plain function).
absl::StatusOr<std::shared_ptr<LoaderCore>> StartLoader(LoaderInputs inputs, const std::string& function_key,
                                                        const std::string& factory_key,
                                                        const LoaderOptions& options);
// The same with the function (and factory: "" for none) named as DROVER_REMOTE
// registered them in the workers' program, which need not be this process's binary
// (InitOptions::worker_program; the Python module): the names are resolved in the
// workers, whose start fails naming a function their program does not have.
absl::StatusOr<std::shared_ptr<LoaderCore>> StartLoaderByName(LoaderInputs inputs, const std::string& function,
                                                              const std::string& factory,
                                                              const LoaderOptions& options);
absl::StatusOr<LoaderResult> LoaderNext(LoaderCore& core);
// A result that did not decode as the loader's type, as an error naming the item.
absl::Status LoaderDecodeError(LoaderCore& core, int64_t position, const absl::Status& error);
std::vector<SkippedItem> LoaderSkipped(const LoaderCore& core);
LoaderProgress LoaderProgressOf(const LoaderCore& core);

// The function's input type: P itself, or the element type of a batch.
template <typename P>
struct BatchOf {
  static constexpr bool value = false;
  using type = P;
};
template <typename P>
struct BatchOf<std::vector<P>> {
  static constexpr bool value = true;
  using type = P;
};

// The inputs as the loader's core sees them: how many positions, and the encoded
// argument of each (one input, or a batch of them).
template <typename In, typename Arg>
LoaderInputs MakeLoaderInputs(std::shared_ptr<const std::vector<In>> inputs, int64_t batch_size) {
  LoaderInputs out;
  const int64_t n = static_cast<int64_t>(inputs->size());
  constexpr bool kBatch = BatchOf<Arg>::value;
  out.count = kBatch ? (batch_size > 0 ? (n + batch_size - 1) / batch_size : 0) : n;
  out.items = n;
  out.batched = kBatch;
  out.batch_size = kBatch ? batch_size : 0;
  out.encode = [inputs, batch_size](int64_t position) -> absl::StatusOr<EncodedValue> {
    if constexpr (kBatch) {
      const size_t first = static_cast<size_t>(position * batch_size);
      const size_t last = std::min(inputs->size(), first + static_cast<size_t>(batch_size));
      return Encode(std::vector<In>(inputs->begin() + first, inputs->begin() + last),
                    DefaultCodecContext());
    } else {
      return Encode((*inputs)[static_cast<size_t>(position)], DefaultCodecContext());
    }
  };
  return out;
}

template <typename Arg>
LoaderInputs MakeRangeInputs(IndexRange range, int64_t batch_size) {
  LoaderInputs out;
  const int64_t n = std::max<int64_t>(0, range.end - range.begin);
  constexpr bool kBatch = BatchOf<Arg>::value;
  out.count = kBatch ? (batch_size > 0 ? (n + batch_size - 1) / batch_size : 0) : n;
  out.items = n;
  out.batched = kBatch;
  out.batch_size = kBatch ? batch_size : 0;
  out.first_index = range.begin;
  out.encode = [range, batch_size, n](int64_t position) -> absl::StatusOr<EncodedValue> {
    if constexpr (kBatch) {
      std::vector<int64_t> batch;
      for (int64_t i = position * batch_size; i < std::min(n, (position + 1) * batch_size); ++i) {
        batch.push_back(range.begin + i);
      }
      return Encode(batch, /*ctx=*/nullptr);  // indices: plain values
    } else {
      return Encode(range.begin + position, /*ctx=*/nullptr);
    }
  };
  return out;
}

}  // namespace internal

template <typename Out>
class DataLoader {
 public:
  DataLoader(DataLoader&&) = default;
  DataLoader& operator=(DataLoader&&) = default;

  // A loader over `inputs` calling `fn` (registered with DROVER_REMOTE) per item or
  // per batch.
  template <typename In, typename R, typename Arg>
  static absl::StatusOr<DataLoader> Create(std::vector<In> inputs, R (*fn)(Arg, uint64_t),
                                           LoaderOptions options = {}) {
    using A = std::decay_t<Arg>;
    CheckTypes<R, A, In>();
    return Start(internal::MakeLoaderInputs<In, A>(
                     std::make_shared<const std::vector<In>>(std::move(inputs)), options.batch_size),
                 internal::FunctionKey(fn), "", options);
  }
  template <typename R, typename Arg>
  static absl::StatusOr<DataLoader> Create(IndexRange range, R (*fn)(Arg, uint64_t),
                                           LoaderOptions options = {}) {
    using A = std::decay_t<Arg>;
    CheckTypes<R, A, int64_t>();
    return Start(internal::MakeRangeInputs<A>(range, options.batch_size), internal::FunctionKey(fn),
                 "", options);
  }
  // Persistent workers with state: `factory` (registered) makes a T in each worker,
  // whose `method` (registered) is called per item or per batch.
  template <typename In, typename T, typename R, typename Arg>
  static absl::StatusOr<DataLoader> Create(std::vector<In> inputs, T* (*factory)(WorkerInfo),
                                           R (T::*method)(Arg, uint64_t), LoaderOptions options = {}) {
    using A = std::decay_t<Arg>;
    CheckTypes<R, A, In>();
    return Start(internal::MakeLoaderInputs<In, A>(
                     std::make_shared<const std::vector<In>>(std::move(inputs)), options.batch_size),
                 internal::FunctionKey(method), internal::FunctionKey(factory), options);
  }
  template <typename T, typename R, typename Arg>
  static absl::StatusOr<DataLoader> Create(IndexRange range, T* (*factory)(WorkerInfo),
                                           R (T::*method)(Arg, uint64_t), LoaderOptions options = {}) {
    using A = std::decay_t<Arg>;
    CheckTypes<R, A, int64_t>();
    return Start(internal::MakeRangeInputs<A>(range, options.batch_size), internal::FunctionKey(method),
                 internal::FunctionKey(factory), options);
  }

  // The next result (see Order and Failures above); OUT_OF_RANGE after the last.
  absl::StatusOr<Out> Next() {
    absl::StatusOr<LoaderItem<Out>> item = NextItem();
    if (!item.ok()) return item.status();
    return std::move(item->value);
  }
  absl::StatusOr<LoaderItem<Out>> NextItem() {
    absl::StatusOr<internal::LoaderResult> r = internal::LoaderNext(*core_);
    if (!r.ok()) return r.status();
    absl::StatusOr<Out> v = internal::DecodeOwned<Out>(r->value);
    if (!v.ok()) return internal::LoaderDecodeError(*core_, r->position, v.status());
    return LoaderItem<Out>{r->position, *std::move(v)};
  }

  std::vector<SkippedItem> skipped() const { return internal::LoaderSkipped(*core_); }
  LoaderProgress progress() const { return internal::LoaderProgressOf(*core_); }

 private:
  explicit DataLoader(std::shared_ptr<internal::LoaderCore> core) : core_(std::move(core)) {}

  template <typename R, typename A, typename In>
  static constexpr void CheckTypes() {
    static_assert(std::is_same_v<typename internal::RemoteResult<R>::type, Out>,
                  "the function's result (R, or absl::StatusOr<R>) must be the loader's Out");
    static_assert(std::is_same_v<typename internal::BatchOf<A>::type, In>,
                  "the function must take one input (In) or a batch (std::vector<In>)");
  }
  static absl::StatusOr<DataLoader> Start(internal::LoaderInputs inputs, const std::string& function_key,
                                          const std::string& factory_key, const LoaderOptions& options) {
    absl::StatusOr<std::shared_ptr<internal::LoaderCore>> core =
        internal::StartLoader(std::move(inputs), function_key, factory_key, options);
    if (!core.ok()) return core.status();
    return DataLoader(*std::move(core));
  }

  std::shared_ptr<internal::LoaderCore> core_;
};

// Every result of `fn` over `inputs`, in input order (a DataLoader drained); the first
// error (kStop) or the results without the skipped items (kSkip).
template <typename Out, typename In, typename R, typename Arg>
absl::StatusOr<std::vector<Out>> ParallelMap(std::vector<In> inputs, R (*fn)(Arg, uint64_t),
                                             LoaderOptions options = {}) {
  options.ordered = true;
  absl::StatusOr<DataLoader<Out>> loader = DataLoader<Out>::Create(std::move(inputs), fn, options);
  if (!loader.ok()) return loader.status();
  std::vector<Out> out;
  for (;;) {
    absl::StatusOr<Out> v = loader->Next();
    if (absl::IsOutOfRange(v.status())) return out;
    if (!v.ok()) return v.status();
    out.push_back(*std::move(v));
  }
}

}  // namespace drover

#endif  // DROVER_SDK_INCLUDE_DROVER_DATA_LOADER_H_
