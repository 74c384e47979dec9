// LoaderWorkers: the seam between a DataLoader's dispatch logic (LoaderCore) and the
// worker actors that run its items. The real one (MakeActorLoaderWorkers) starts
// LoaderWorker actors through the runtime; unit tests give LoaderCore a fake that
// finishes, fails or kills calls as each test needs, in milliseconds.
//
// Thread safety: none; the loader's one consumer thread calls it.
#ifndef DROVER_SDK_RUNTIME_LOADER_WORKERS_H_
#define DROVER_SDK_RUNTIME_LOADER_WORKERS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "drover/data_loader.h"
#include "sdk/runtime/context.h"
#include "sdk/runtime/loader_worker.h"

namespace drover::internal {

class LoaderWorkers {
 public:
  virtual ~LoaderWorkers() = default;

  // Starts `n` workers (restarted up to `max_restarts` times each when they die) and
  // waits until each is ready or `deadline` passes. The error names the worker.
  virtual absl::Status Start(int64_t n, int max_restarts, absl::Time deadline) = 0;
  // Sends `calls` to worker `worker` as one call; its id is used by Wait.
  virtual uint64_t Send(size_t worker, std::vector<LoaderCall> calls) = 0;

  struct Finished {
    uint64_t call = 0;
    // The worker's outcomes, or why the call failed as a whole (its worker died).
    absl::StatusOr<std::vector<LoaderOutcome>> outcomes;
  };
  // Waits until at least one sent, unfinished call has finished; returns every one that
  // has. REQUIRES: a call is outstanding.
  virtual std::vector<Finished> Wait() = 0;
  // Whether `worker` is dead for good (its restarts used up): it takes no more calls.
  virtual bool DeadForGood(size_t worker) = 0;

  // Lets the device copier read the store's memory directly (pin_memory).
  virtual absl::Status PinHostMemory() = 0;
  // Frees stored results that were made and never taken.
  virtual void Release(const std::vector<StoredRef>& refs) = 0;
};

// LoaderWorker actors of `function` (made by `factory`, "" for none), placed as
// `options` says, through the runtime of `ctx`.
std::unique_ptr<LoaderWorkers> MakeActorLoaderWorkers(RuntimeContext* ctx, std::string function,
                                                      std::string factory,
                                                      const LoaderOptions& options);

}  // namespace drover::internal

#endif  // DROVER_SDK_RUNTIME_LOADER_WORKERS_H_
