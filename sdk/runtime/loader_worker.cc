#include "sdk/runtime/loader_worker.h"

#include <deque>
#include <stdexcept>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "drover/task.h"

namespace drover::internal {
namespace {

// The arguments of one call: objects unpacked from msgpack bytes this list keeps.
class Args : public ArgList {
 public:
  absl::Status Add(std::string bytes) {
    bytes_.push_back(std::move(bytes));  // unpacked objects may point into them
    handles_.emplace_back();
    return Unpack(bytes_.back(), &handles_.back());
  }
  size_t size() const override { return handles_.size(); }
  const msgpack::object& at(size_t i) const override { return handles_[i].get(); }

 private:
  std::deque<std::string> bytes_;
  std::deque<msgpack::object_handle> handles_;
};

std::string Msgpack(const WorkerInfo& info) {
  absl::StatusOr<EncodedValue> enc = Encode(info, /*ctx=*/nullptr);  // plain values
  return enc.ok() ? enc->bytes : std::string();
}

}  // namespace

LoaderWorker::LoaderWorker(LoaderWorkerSpec spec) : spec_(std::move(spec)) {
  fn_ = FindFunctionByName(spec_.function);
  if (fn_ == nullptr || (spec_.factory.empty() ? fn_->kind != FunctionKind::kFunction
                                               : fn_->kind != FunctionKind::kMethod)) {
    throw std::runtime_error(absl::StrCat(spec_.function, " is not a registered ",
                                          spec_.factory.empty() ? "function" : "method",
                                          " in this binary (DROVER_REMOTE)"));
  }
  if (spec_.factory.empty()) return;
  const FunctionInfo* factory = FindFunctionByName(spec_.factory);
  if (factory == nullptr || factory->kind != FunctionKind::kFactory) {
    throw std::runtime_error(absl::StrCat(spec_.factory, " is not a registered factory in this binary"));
  }
  Args args;
  if (absl::Status s = args.Add(Msgpack(spec_.info)); !s.ok()) throw std::runtime_error(std::string(s.message()));
  bool user_error = false;
  absl::StatusOr<void*> made = factory->create(args, &user_error);
  if (!made.ok()) {
    throw std::runtime_error(absl::StrCat(spec_.factory, " failed in worker ", spec_.info.worker_id, " on node ",
                                          NodeId(), ": ", made.status().message()));
  }
  state_ = *made;
  deleter_ = factory->deleter;
}

LoaderWorker::~LoaderWorker() {
  if (state_ != nullptr && deleter_ != nullptr) deleter_(state_);
}

LoaderOutcome LoaderWorker::RunOne(LoaderCall& call) {
  LoaderOutcome out;
  out.position = call.position;
  out.node = NodeId();
  Args args;
  absl::Status s = args.Add(std::move(call.input));
  absl::StatusOr<EncodedValue> seed = Encode(call.seed, /*ctx=*/nullptr);
  if (s.ok()) s = seed.ok() ? args.Add(std::move(seed->bytes)) : seed.status();
  InvokeResult r;
  const absl::Time start = absl::Now();
  if (s.ok()) {
    try {
      r = fn_->invoke(state_, args);
    } catch (const std::exception& e) {
      r.status = absl::UnknownError(absl::StrCat("threw ", TypeName(typeid(e)), ": ", e.what()));
    } catch (...) {
      r.status = absl::UnknownError("threw an exception that is not a std::exception");
    }
    s = r.status;
  }
  out.run_us = absl::ToInt64Microseconds(absl::Now() - start);
  if (!s.ok()) {
    out.code = static_cast<int32_t>(s.code());
    out.message = std::string(s.message());
    return out;
  }
  out.value = std::move(r.value.bytes);
  for (const StoredRef& o : r.value.stored) out.owned.push_back(WireRef{o.object_id, o.node_id, o.size});
  return out;
}

std::vector<LoaderOutcome> LoaderWorker::Run(std::vector<LoaderCall> calls) {
  std::vector<LoaderOutcome> out;
  out.reserve(calls.size());
  for (LoaderCall& c : calls) out.push_back(RunOne(c));
  return out;
}

LoaderWorker* MakeLoaderWorker(LoaderWorkerSpec spec) { return new LoaderWorker(std::move(spec)); }

}  // namespace drover::internal

DROVER_REMOTE(drover::internal::MakeLoaderWorker, &drover::internal::LoaderWorker::Run);
