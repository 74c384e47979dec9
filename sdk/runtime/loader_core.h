// LoaderCore: the consumer's side of a drover::DataLoader, without the types: it starts
// the worker actors (loader_worker.h), hands them chunks of positions within the
// prefetch window, collects their outcomes, retries the items of workers that died,
// orders or not, applies the error policy, and draws the progress line. The template
// in data_loader.h decodes what Next returns.
//
// Dispatch: at most num_workers * prefetch positions are admitted (sent, running, or
// made and not yet returned by Next); each worker holds at most `prefetch` of them, and
// the least loaded live worker gets the next call. A call carries about 2 ms of work
// (by the items' measured run time; one item until it is known), at most prefetch/2
// items, so a worker always has its next call queued and fast items do not pay a call
// each. Retries go before new positions.
//
// Thread safety: none; the loader's one consumer thread calls it (outcomes complete on
// the runtime's threads, and Next waits for them).
#ifndef DROVER_SDK_RUNTIME_LOADER_CORE_H_
#define DROVER_SDK_RUNTIME_LOADER_CORE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "drover/data_loader.h"
#include "drover/task.h"
#include "sdk/runtime/context.h"
#include "sdk/runtime/loader_worker.h"
#include "sdk/runtime/loader_workers.h"
#include "sdk/runtime/progress_bar.h"

namespace drover::internal {

class LoaderCore {
 public:
  // `workers` runs the calls (MakeActorLoaderWorkers; a fake in unit tests).
  LoaderCore(std::unique_ptr<LoaderWorkers> workers, LoaderInputs inputs, std::string function,
             LoaderOptions options);
  ~LoaderCore();
  LoaderCore(const LoaderCore&) = delete;
  LoaderCore& operator=(const LoaderCore&) = delete;

  // Starts the workers and waits (up to start_timeout) until they are ready.
  absl::Status Start();
  absl::StatusOr<LoaderResult> Next();

  // "item 17", or "batch 3 (items 96..127)".
  std::string Describe(int64_t position) const;
  absl::Status DecodeError(int64_t position, const absl::Status& error);
  std::vector<SkippedItem> skipped() const { return skipped_; }
  LoaderProgress progress() const;

 private:
  struct Worker {
    int64_t in_flight = 0;
    bool dead = false;
    // Its items' run times as it measured them (ChunkSize).
    int64_t run_us_total = 0;
    int64_t runs = 0;
    // It runs a suspect's call alone: nothing else is sent to it until that call ends.
    bool exclusive = false;
  };
  struct Call {
    uint64_t id = 0;  // LoaderWorkers::Send's
    size_t worker = 0;
    // A suspect's call, sent to an idle worker with nothing queued behind it: a death
    // while it runs is the suspect's.
    bool exclusive = false;
    std::vector<int64_t> positions;
  };
  // A made (or failed) position waiting for Next.
  struct Made {
    absl::Status error;  // the item's (kStop), if it failed
    OwnedValue value;
  };

  // Sends calls until the window or the workers are full.
  absl::Status Dispatch();
  // Waits for at least one call to finish and takes in its outcomes.
  absl::Status Collect();
  void TakeOutcomes(const Call& call, std::vector<LoaderOutcome> outcomes);
  // The call's failure as a whole (its worker's death), or its outcomes.
  void Finish(Call& call, absl::StatusOr<std::vector<LoaderOutcome>> outcomes);
  // The call failed as a whole: its worker died (or is dead for good). Which item killed
  // it is known only for an exclusive call (a worker runs the calls it holds one after
  // another and sends their replies after a batch of them, so a death can also lose the
  // replies of calls that finished before it): only that item is charged. The items of
  // any other failed call become suspects, each run again in an exclusive call of its own.
  void CallFailed(const Call& call, const absl::Status& error);
  void Failed(int64_t position, absl::Status error);
  // The next deliverable position, if any (and takes it out).
  bool TakeReady(int64_t* position, Made* made);
  void Deliver();
  int64_t Admitted() const { return next_position_ - delivered_ - static_cast<int64_t>(skipped_.size()); }

  const std::unique_ptr<LoaderWorkers> runner_;
  const LoaderInputs inputs_;
  const std::string function_;
  const LoaderOptions options_;
  // Items per call to `w` now: about kWorkPerCallUs of work by the mean run time of
  // the items it ran (as its worker measured them; all workers' mean until it ran one),
  // fewer when results are large (each call's results stay under kBytesPerCall).
  int64_t ChunkSize(const Worker& w) const;
  // Items a worker may hold (sent, running): `prefetch`, or two calls' worth of short
  // items (so a worker always has its next call queued).
  int64_t InFlightLimit(const Worker& w) const;
  int64_t run_us_total_ = 0;
  int64_t runs_ = 0;
  int64_t result_bytes_total_ = 0;
  std::vector<Worker> workers_;
  std::map<uint64_t, Call> calls_;  // sent and not finished, by id
  std::deque<int64_t> retry_;
  // Items in a call whose worker died: each runs in an exclusive call until it is made
  // or fails for good.
  std::set<int64_t> suspects_;
  int64_t next_position_ = 0;
  int64_t next_ordered_ = 0;  // ordered: the position Next returns next
  std::map<int64_t, Made> made_;
  std::deque<int64_t> arrival_;  // unordered: made positions in the order they finished
  std::map<int64_t, int> attempts_;
  std::vector<SkippedItem> skipped_;
  int64_t delivered_ = 0;
  int64_t retried_ = 0;
  int64_t calls_sent_ = 0;
  absl::Status stopped_;  // kStop: the error every later Next returns
  absl::Status last_death_;  // why the last call failed as a whole
  absl::Time started_;
  std::unique_ptr<ProgressBar> bar_;
};

}  // namespace drover::internal

#endif  // DROVER_SDK_RUNTIME_LOADER_CORE_H_
