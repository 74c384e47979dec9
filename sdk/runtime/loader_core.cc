#include "sdk/runtime/loader_core.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/status_macros.h"
#include "object_store/device_copier.h"
#include "sdk/runtime/store_tensor.h"

namespace drover {
namespace internal {
namespace {

// The work a call should carry, so that fast items do not each pay a call (a call
// costs ~50 µs of the machine's CPU: 2.5% of this).
constexpr int64_t kWorkPerCallUs = 2000;
// Most items in one call, and most bytes of results one call brings back: short items
// with small results go in large calls, beyond `prefetch`, and memory stays bounded
// by what `prefetch` items or two such calls per worker hold.
constexpr int64_t kMaxItemsPerCall = 512;
constexpr int64_t kBytesPerCall = 1 << 20;

// CUDA where the program linked //gpu:cuda_copier, else host memory only.
object_store::DeviceCopier* ProcessCopier() { return object_store::ProcessDeviceCopier(); }

// The real workers: LoaderWorker actors through the runtime.
class ActorLoaderWorkers final : public LoaderWorkers {
 public:
  ActorLoaderWorkers(RuntimeContext* ctx, std::string function, std::string factory,
                     const LoaderOptions& options)
      : ctx_(ctx), function_(std::move(function)), factory_(std::move(factory)), options_(options) {}
  ~ActorLoaderWorkers() override {
    for (ActorHandle<LoaderWorker>& h : handles_) (void)Kill(h);
  }

  absl::Status Start(int64_t n, int max_restarts, absl::Time deadline) override {
    for (int64_t i = 0; i < n; ++i) {
      LoaderWorkerSpec spec;
      spec.function = function_;
      spec.factory = factory_;
      spec.info = WorkerInfo{i, n, options_.seed, options_.name};
      auto actor = Actor(MakeLoaderWorker).SetResources(options_.resources).SetMaxRestarts(max_restarts);
      if (!options_.node_id.empty()) {
        actor.SetNodeAffinity(options_.node_id);
      } else {
        actor.SetSpread(options_.spread);
      }
      handles_.push_back(actor.Remote(std::move(spec)));
    }
    for (size_t i = 0; i < handles_.size(); ++i) {
      absl::Status s = handles_[i].WaitReady(std::max(deadline - absl::Now(), absl::ZeroDuration()));
      if (!s.ok()) {
        return absl::Status(s.code(), absl::StrCat("loader '", options_.name, "': worker ", i,
                                                   " did not start: ", s.message()));
      }
    }
    return absl::OkStatus();
  }

  uint64_t Send(size_t worker, std::vector<LoaderCall> calls) override {
    const uint64_t id = next_id_++;
    sent_.emplace(id, handles_[worker].Task(&LoaderWorker::Run).Remote(std::move(calls)));
    return id;
  }

  std::vector<Finished> Wait() override {
    std::vector<uint64_t> ids;
    std::vector<std::shared_ptr<RefState>> states;
    for (const auto& [id, ref] : sent_) {
      ids.push_back(id);
      states.push_back(RefAccess::State(ref));
    }
    WaitRefs(states, 1, absl::InfiniteDuration());
    std::vector<Finished> out;
    for (size_t i : WaitRefs(states, static_cast<int>(states.size()), absl::ZeroDuration())) {
      auto it = sent_.find(ids[i]);
      out.push_back(Finished{ids[i], Get(it->second, absl::ZeroDuration())});
      sent_.erase(it);
    }
    return out;
  }

  bool DeadForGood(size_t worker) override {
    absl::Status alive = WaitActorReady(ActorAccess::State(handles_[worker]), absl::ZeroDuration());
    return !alive.ok() && alive.code() != absl::StatusCode::kDeadlineExceeded;
  }

  absl::Status PinHostMemory() override {
    if (ctx_->store->store() == nullptr || !ProcessCopier()->HasDevice()) return absl::OkStatus();
    object_store::Client* store = ctx_->store->store();
    return ProcessCopier()->RegisterHostMemory(const_cast<uint8_t*>(store->arena_base()),
                                               store->arena_capacity());
  }

  void Release(const std::vector<StoredRef>& refs) override { ctx_->store->Delete(refs); }

 private:
  RuntimeContext* const ctx_;
  const std::string function_;
  const std::string factory_;
  const LoaderOptions options_;
  std::vector<ActorHandle<LoaderWorker>> handles_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, ObjectRef<std::vector<LoaderOutcome>>> sent_;
};

}  // namespace

std::unique_ptr<LoaderWorkers> MakeActorLoaderWorkers(RuntimeContext* ctx, std::string function,
                                                      std::string factory,
                                                      const LoaderOptions& options) {
  return std::make_unique<ActorLoaderWorkers>(ctx, std::move(function), std::move(factory), options);
}

LoaderCore::LoaderCore(std::unique_ptr<LoaderWorkers> workers, LoaderInputs inputs,
                       std::string function, LoaderOptions options)
    : runner_(std::move(workers)),
      inputs_(std::move(inputs)),
      function_(std::move(function)),
      options_(std::move(options)) {}

int64_t LoaderCore::ChunkSize(const Worker& w) const {
  if (runs_ == 0) return 1;
  const int64_t mean_us = std::max<int64_t>(1, w.runs > 0 ? w.run_us_total / w.runs : run_us_total_ / runs_);
  const int64_t mean_bytes = std::max<int64_t>(1, result_bytes_total_ / runs_);
  // Results that fit in a call's bytes: a call may carry more than prefetch/2 items,
  // unless the prefetch is tiny (under 4: the caller asked for items one by one).
  const int64_t by_bytes = options_.prefetch < 4 ? options_.prefetch / 2
                                                 : std::max<int64_t>(options_.prefetch / 2, kBytesPerCall / mean_bytes);
  const int64_t most = std::max<int64_t>(1, std::min(kMaxItemsPerCall, by_bytes));
  return std::clamp<int64_t>((kWorkPerCallUs + mean_us - 1) / mean_us, 1, most);
}

int64_t LoaderCore::InFlightLimit(const Worker& w) const {
  return std::max<int64_t>(options_.prefetch, 2 * ChunkSize(w));
}

LoaderCore::~LoaderCore() {
  // Results made and never taken: nobody will free their objects but us.
  std::vector<StoredRef> left;
  for (auto& [pos, m] : made_) left.insert(left.end(), m.value.owned.begin(), m.value.owned.end());
  if (!left.empty()) runner_->Release(left);
}

std::string LoaderCore::Describe(int64_t position) const {
  if (inputs_.batch_size <= 0) return absl::StrCat("item ", inputs_.first_index + position);
  const int64_t first = position * inputs_.batch_size;
  const int64_t last = std::min(inputs_.items, first + inputs_.batch_size) - 1;
  return absl::StrCat("batch ", position, " (items ", inputs_.first_index + first, "..",
                      inputs_.first_index + last, ")");
}

absl::Status LoaderCore::DecodeError(int64_t position, const absl::Status& error) {
  return absl::Status(error.code(), absl::StrCat("loader '", options_.name, "': ", Describe(position),
                                                 ": its result does not decode: ", error.message()));
}

absl::Status LoaderCore::Start() {
  if (options_.num_workers < 1 || options_.prefetch < 1 || options_.max_retries < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loader '", options_.name, "': num_workers and prefetch must be at least 1 and max_retries at "
        "least 0 (got ", options_.num_workers, ", ", options_.prefetch, ", ", options_.max_retries, ")"));
  }
  if (inputs_.batched != (options_.batch_size > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loader '", options_.name, "': ", function_,
        inputs_.batched ? " takes a batch (a std::vector of inputs): set batch_size > 0"
                        : " takes one input: batch_size must be 0 (or take a std::vector of inputs)"));
  }
  // An item that kills every worker it runs on costs up to max_retries + 2 deaths (one
  // in a call that is not exclusive, charged to no item: CallFailed; max_retries + 1
  // charged to it): a lone worker outlives one such item and goes on with the rest.
  DROVER_RETURN_IF_ERROR(runner_->Start(options_.num_workers, options_.max_retries + 2,
                                        absl::Now() + options_.start_timeout));
  workers_.resize(static_cast<size_t>(options_.num_workers));
  if (options_.pin_memory) DROVER_RETURN_IF_ERROR(runner_->PinHostMemory());
  const int mode = static_cast<int>(options_.progress);
  if (std::unique_ptr<ProgressLine> line = LoaderLine(mode)) {
    bar_ = std::make_unique<ProgressBar>(options_.name, inputs_.batched ? "batches" : "items",
                                         inputs_.count, std::move(line), &PrintToStderr,
                                         Clock::Real());
  }
  started_ = absl::Now();
  return absl::OkStatus();
}

void LoaderCore::Failed(int64_t position, absl::Status error) {
  suspects_.erase(position);  // failed for good: not run again
  if (options_.on_error == LoaderOptions::OnError::kSkip) {
    skipped_.push_back(SkippedItem{position, std::move(error)});
    return;
  }
  made_[position] = Made{std::move(error), {}};
  arrival_.push_back(position);
}

absl::Status LoaderCore::Dispatch() {
  int64_t window = 0;
  for (const Worker& w : workers_) window += InFlightLimit(w);
  for (;;) {
    Worker* best = nullptr;
    size_t best_index = 0;
    for (size_t i = 0; i < workers_.size(); ++i) {
      Worker& w = workers_[i];
      if (w.dead || w.exclusive || w.in_flight >= InFlightLimit(w)) continue;
      if (best == nullptr || w.in_flight < best->in_flight) {
        best = &w;
        best_index = i;
      }
    }
    if (best == nullptr) break;
    std::vector<LoaderCall> calls;
    std::vector<int64_t> positions;
    const bool exclusive = !retry_.empty() && suspects_.count(retry_.front()) > 0;
    if (exclusive && best->in_flight > 0) break;  // wait for an idle worker
    const int64_t chunk = exclusive ? 1 : ChunkSize(*best);
    const int64_t limit = InFlightLimit(*best);
    while (static_cast<int64_t>(positions.size()) < chunk &&
           best->in_flight + static_cast<int64_t>(positions.size()) < limit) {
      int64_t pos;
      if (!retry_.empty()) {
        if (!exclusive && suspects_.count(retry_.front()) > 0) break;
        pos = retry_.front();
        retry_.pop_front();
      } else if (next_position_ < inputs_.count && Admitted() < window) {
        pos = next_position_++;
      } else {
        break;
      }
      absl::StatusOr<EncodedValue> input = inputs_.encode(pos);
      if (!input.ok()) {
        Failed(pos, absl::Status(input.status().code(), absl::StrCat(Describe(pos), ": its input does not encode: ",
                                                                    input.status().message())));
        if (exclusive) break;
        continue;
      }
      calls.push_back(LoaderCall{pos, std::move(input->bytes), ItemSeed(options_.seed, pos)});
      positions.push_back(pos);
    }
    if (positions.empty()) {
      if (exclusive) continue;  // the suspect failed to encode: look again
      break;
    }
    best->in_flight += static_cast<int64_t>(positions.size());
    best->exclusive = exclusive;
    ++calls_sent_;
    const uint64_t id = runner_->Send(best_index, std::move(calls));
    calls_.emplace(id, Call{id, best_index, exclusive, std::move(positions)});
  }
  return absl::OkStatus();
}

absl::Status LoaderCore::Collect() {
  if (calls_.empty()) {
    if (!retry_.empty() || next_position_ < inputs_.count) {
      // Work is left but no worker takes it: every one is dead.
      return stopped_ = absl::AbortedError(absl::StrCat("loader '", options_.name, "': all ", workers_.size(),
                                                        " workers are dead; the last: ", last_death_.message()));
    }
    return absl::OkStatus();
  }
  for (LoaderWorkers::Finished& f : runner_->Wait()) {
    auto it = calls_.find(f.call);
    if (it == calls_.end()) continue;  // not ours (cannot happen): nothing to account
    Call call = std::move(it->second);
    calls_.erase(it);
    Finish(call, std::move(f.outcomes));
  }
  return absl::OkStatus();
}

void LoaderCore::Finish(Call& call, absl::StatusOr<std::vector<LoaderOutcome>> outcomes) {
  Worker& w = workers_[call.worker];
  w.in_flight -= static_cast<int64_t>(call.positions.size());
  if (call.exclusive) w.exclusive = false;
  if (outcomes.ok()) {
    TakeOutcomes(call, *std::move(outcomes));
  } else {
    CallFailed(call, outcomes.status());
  }
}

void LoaderCore::TakeOutcomes(const Call& call, std::vector<LoaderOutcome> outcomes) {
  std::map<int64_t, bool> expected;
  for (int64_t p : call.positions) expected[p] = false;
  for (LoaderOutcome& o : outcomes) {
    auto it = expected.find(o.position);
    if (it == expected.end() || it->second) continue;  // not asked for: ignore
    it->second = true;
    suspects_.erase(o.position);
    run_us_total_ += o.run_us;
    ++runs_;
    Worker& w = workers_[call.worker];
    w.run_us_total += o.run_us;
    ++w.runs;
    int64_t result_bytes = static_cast<int64_t>(o.value.size());
    for (const WireRef& r : o.owned) result_bytes += static_cast<int64_t>(r.size);
    result_bytes_total_ += result_bytes;
    if (o.code != 0) {
      Failed(o.position, absl::Status(static_cast<absl::StatusCode>(o.code),
                                      absl::StrCat("loader '", options_.name, "': ", Describe(o.position), " (on ",
                                                   o.node, ", worker ", call.worker, "): ", o.message)));
      continue;
    }
    Made m;
    auto bytes = std::make_shared<const std::string>(std::move(o.value));
    m.value.view = ValueView{*bytes, bytes};
    m.value.pin = options_.pin_memory;
    for (const WireRef& r : o.owned) m.value.owned.push_back(StoredRef{r.object_id, r.node_id, r.size});
    made_[o.position] = std::move(m);
    arrival_.push_back(o.position);
  }
  for (auto& [p, seen] : expected) {
    if (!seen) Failed(p, absl::InternalError(absl::StrCat(Describe(p), ": its worker returned no outcome for it")));
  }
}

void LoaderCore::CallFailed(const Call& call, const absl::Status& error) {
  Worker& w = workers_[call.worker];
  last_death_ = error;
  // Dead for good (restarts used up)? Then it takes no more calls.
  if (runner_->DeadForGood(call.worker)) w.dead = true;
  for (int64_t p : call.positions) {
    if (call.exclusive && ++attempts_[p] > options_.max_retries) {
      Failed(p, absl::Status(error.code(), absl::StrCat("loader '", options_.name, "': ", Describe(p),
                                                        ": its worker died ", attempts_[p], " times running it; the last time: ",
                                                        error.message())));
      continue;
    }
    suspects_.insert(p);
    retry_.push_back(p);
    ++retried_;
  }
}

bool LoaderCore::TakeReady(int64_t* position, Made* made) {
  if (options_.ordered) {
    for (const SkippedItem& s : skipped_) {
      if (s.position == next_ordered_) {
        ++next_ordered_;
        return TakeReady(position, made);
      }
    }
    auto it = made_.find(next_ordered_);
    if (it == made_.end()) return false;
    *position = it->first;
    *made = std::move(it->second);
    made_.erase(it);
    ++next_ordered_;
    return true;
  }
  while (!arrival_.empty()) {
    auto it = made_.find(arrival_.front());
    arrival_.pop_front();
    if (it == made_.end()) continue;
    *position = it->first;
    *made = std::move(it->second);
    made_.erase(it);
    return true;
  }
  return false;
}

absl::StatusOr<LoaderResult> LoaderCore::Next() {
  if (!stopped_.ok()) return stopped_;
  for (;;) {
    int64_t position = 0;
    Made made;
    if (TakeReady(&position, &made)) {
      if (!made.error.ok()) {
        stopped_ = made.error;
        if (bar_) bar_->Finish(delivered_);
        return stopped_;
      }
      ++delivered_;
      if (bar_) bar_->Update(delivered_);
      return LoaderResult{position, std::move(made.value)};
    }
    if (delivered_ + static_cast<int64_t>(skipped_.size()) >= inputs_.count) {
      if (bar_) bar_->Finish(delivered_);
      return absl::OutOfRangeError(absl::StrCat("loader '", options_.name, "' is done: ", delivered_,
                                                " delivered, ", skipped_.size(), " skipped"));
    }
    DROVER_RETURN_IF_ERROR(Dispatch());
    DROVER_RETURN_IF_ERROR(Collect());
  }
}

LoaderProgress LoaderCore::progress() const {
  LoaderProgress p;
  p.total = inputs_.count;
  p.delivered = delivered_;
  p.skipped = static_cast<int64_t>(skipped_.size());
  p.retried = retried_;
  p.calls = calls_sent_;
  p.in_flight = Admitted() - static_cast<int64_t>(made_.size());
  const double secs = absl::ToDoubleSeconds(absl::Now() - started_);
  p.items_per_second = secs > 0 ? static_cast<double>(delivered_) / secs : 0;
  return p;
}

absl::StatusOr<std::shared_ptr<LoaderCore>> StartLoader(LoaderInputs inputs, const std::string& function_key,
                                                        const std::string& factory_key,
                                                        const LoaderOptions& options) {
  if (CurrentRuntimeContext() == nullptr) return absl::FailedPreconditionError("a DataLoader needs drover::Init first");
  const FunctionInfo* fn = FindFunctionByKey(function_key);
  const FunctionInfo* factory = factory_key.empty() ? nullptr : FindFunctionByKey(factory_key);
  if (fn == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("loader '", options.name, "': ", DescribeUnregistered(function_key),
                                                   " is not registered: add it to DROVER_REMOTE(...)"));
  }
  if (!factory_key.empty() && (factory == nullptr || *factory->cls != *fn->cls)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loader '", options.name, "': ", factory == nullptr ? DescribeUnregistered(factory_key) : factory->name,
        factory == nullptr ? " is not registered: add it to DROVER_REMOTE(...)"
                           : absl::StrCat(" makes a ", TypeName(*factory->cls), ", not the class of ", fn->name)));
  }
  return StartLoaderByName(std::move(inputs), fn->name, factory == nullptr ? "" : factory->name, options);
}

absl::StatusOr<std::shared_ptr<LoaderCore>> StartLoaderByName(LoaderInputs inputs, const std::string& function,
                                                              const std::string& factory,
                                                              const LoaderOptions& options) {
  RuntimeContext* ctx = CurrentRuntimeContext();
  if (ctx == nullptr) return absl::FailedPreconditionError("a DataLoader needs drover::Init first");
  if (function.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("loader '", options.name, "': no function named"));
  }
  auto core = std::make_shared<LoaderCore>(MakeActorLoaderWorkers(ctx, function, factory, options),
                                           std::move(inputs), function, options);
  DROVER_RETURN_IF_ERROR(core->Start());
  return core;
}

absl::StatusOr<LoaderResult> LoaderNext(LoaderCore& core) { return core.Next(); }
absl::Status LoaderDecodeError(LoaderCore& core, int64_t position, const absl::Status& error) {
  return core.DecodeError(position, error);
}
std::vector<SkippedItem> LoaderSkipped(const LoaderCore& core) { return core.skipped(); }
LoaderProgress LoaderProgressOf(const LoaderCore& core) { return core.progress(); }

}  // namespace internal

uint64_t ItemSeed(uint64_t seed, int64_t position) {
  // splitmix64 of (seed, position).
  uint64_t x = seed ^ (static_cast<uint64_t>(position) * 0x9e3779b97f4a7c15ull);
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

absl::Status CopyToDevice(const Tensor& t, int device, void* dst) {
  if (!t.is_contiguous()) {
    return absl::FailedPreconditionError(absl::StrCat("CopyToDevice of a non-contiguous ", t.Describe(),
                                                      " tensor: Clone() it first"));
  }
  object_store::DeviceBuffer buf{device, dst};
  return internal::ProcessCopier()->FromHost(t.raw_data(), &buf, t.nbytes());
}

}  // namespace drover
