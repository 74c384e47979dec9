// LoaderWorker: one persistent worker of a drover::DataLoader, an actor that calls the
// user's registered function (or a method of the state its factory made) on chunks of
// inputs, in the worker's process, and returns each item's encoded result or error.
//
// The user's code is found by its registered name (DROVER_REMOTE) and called through
// the registry's type-erased invokers, so one actor class serves every loader; results
// are encoded in the worker as any task result is (tensors into this node's store, or
// sealed in place), and the store objects each result owns travel beside it to the
// consumer, which takes them over (store_tensor.h).
//
// Thread safety: an actor; its methods run on the worker's one thread.
#ifndef DROVER_SDK_RUNTIME_LOADER_WORKER_H_
#define DROVER_SDK_RUNTIME_LOADER_WORKER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "drover/data_loader.h"
#include "drover/internal/codec.h"
#include "drover/internal/registry.h"

namespace drover::internal {

// A store object on the wire of loader calls.
struct WireRef {
  std::string object_id;
  std::string node_id;
  uint64_t size = 0;
  MSGPACK_DEFINE(object_id, node_id, size);
};

struct LoaderWorkerSpec {
  std::string function;  // registered name: a function, or the factory's class's method
  std::string factory;   // registered name of T* factory(WorkerInfo), or ""
  WorkerInfo info;
  MSGPACK_DEFINE(function, factory, info);
};

// One item (or batch) to make.
struct LoaderCall {
  int64_t position = 0;
  std::string input;  // the msgpack of the function's first argument
  uint64_t seed = 0;
  MSGPACK_DEFINE(position, input, seed);
};

// What became of it.
struct LoaderOutcome {
  int64_t position = 0;
  int32_t code = 0;     // absl::StatusCode of the function's error; 0 if it returned a value
  std::string message;  // the error
  std::string value;    // the result's msgpack
  std::vector<WireRef> owned;
  std::string node;     // where it ran
  int64_t run_us = 0;   // how long the function took
  MSGPACK_DEFINE(position, code, message, value, owned, node, run_us);
};

class LoaderWorker {
 public:
  // Runs the factory, if any (throws std::runtime_error with its error: the actor's
  // creation then fails with it).
  explicit LoaderWorker(LoaderWorkerSpec spec);
  ~LoaderWorker();
  LoaderWorker(const LoaderWorker&) = delete;
  LoaderWorker& operator=(const LoaderWorker&) = delete;

  std::vector<LoaderOutcome> Run(std::vector<LoaderCall> calls);

 private:
  LoaderOutcome RunOne(LoaderCall& call);

  const LoaderWorkerSpec spec_;
  const FunctionInfo* fn_ = nullptr;
  void* state_ = nullptr;
  void (*deleter_)(void*) = nullptr;
};

LoaderWorker* MakeLoaderWorker(LoaderWorkerSpec spec);

}  // namespace drover::internal

#endif  // DROVER_SDK_RUNTIME_LOADER_WORKER_H_
