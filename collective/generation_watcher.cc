#include "collective/generation_watcher.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/rpc.h"
#include "common/status.h"

namespace drover::collective {
namespace {

// How long one WatchGeneration call waits at the scheduler before it is renewed.
constexpr absl::Duration kPollWait = absl::Seconds(20);

struct Registry {
  absl::Mutex mu;
  std::map<std::tuple<std::string, std::string, int, int>, std::weak_ptr<GenerationWatcher>>
      watchers ABSL_GUARDED_BY(mu);
};

Registry& GetRegistry() {
  static Registry* r = new Registry;
  return *r;
}

}  // namespace

std::shared_ptr<GenerationWatcher> GenerationWatcher::Get(const KvClientOptions& kv, int rank) {
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  auto key = std::make_tuple(kv.scheduler_address, kv.job_id, kv.generation, rank);
  if (auto existing = r.watchers[key].lock()) return existing;
  std::shared_ptr<GenerationWatcher> w(new GenerationWatcher(kv, rank));
  r.watchers[key] = w;
  return w;
}

GenerationWatcher::GenerationWatcher(KvClientOptions kv, int rank)
    : kv_(std::move(kv)),
      rank_(rank),
      stub_(proto::Scheduler::NewStub(MakeChannel(kv_.scheduler_address))) {
  thread_ = std::thread([this] { Run(); });
}

GenerationWatcher::~GenerationWatcher() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (call_ != nullptr) call_->TryCancel();
  }
  thread_.join();
}

void GenerationWatcher::Run() {
  absl::Duration backoff = absl::Milliseconds(50);
  while (true) {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, kv_.token,
                   std::chrono::milliseconds(absl::ToInt64Milliseconds(kPollWait + kv_.call_timeout)));
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      call_ = &ctx;
    }
    proto::WatchGenerationRequest req;
    req.mutable_scope()->set_job_id(kv_.job_id);
    req.mutable_scope()->set_generation(kv_.generation);
    req.set_rank(rank_);
    req.set_wait_timeout_ms(absl::ToInt64Milliseconds(kPollWait));
    proto::WatchGenerationReply reply;
    grpc::Status s = stub_->WatchGeneration(&ctx, req, &reply);
    {
      absl::MutexLock lock(&mu_);
      call_ = nullptr;
      if (stopping_) return;
    }
    if (s.ok()) {
      backoff = absl::Milliseconds(50);
      if (!reply.ended()) continue;
      Deliver(absl::AbortedError(reply.description()));
      return;
    }
    const auto code = s.error_code();
    if (code != grpc::StatusCode::UNAVAILABLE && code != grpc::StatusCode::DEADLINE_EXCEEDED) {
      // NOT_FOUND, UNAUTHENTICATED, UNIMPLEMENTED (an older scheduler): nothing to watch.
      DROVER_LOG(WARNING) << "watching job " << kv_.job_id << " generation " << kv_.generation
                          << " for failures: " << FromGrpcStatus(s)
                          << "; collective groups will rely on their timeouts";
      return;
    }
    // The scheduler is restarting or unreachable: try again, without spinning.
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), backoff);
    if (stopping_) return;
    backoff = std::min(backoff * 2, absl::Seconds(2));
  }
}

void GenerationWatcher::Deliver(absl::Status notice) {
  {
    absl::MutexLock lock(&mu_);
    notice_ = notice;
  }
  absl::MutexLock lock(&callbacks_mu_);
  for (auto& [id, callback] : callbacks_) callback(notice);
  callbacks_.clear();
}

int GenerationWatcher::Subscribe(Callback callback) {
  absl::MutexLock lock(&callbacks_mu_);
  const int id = next_id_++;
  std::optional<absl::Status> notice;
  {
    absl::MutexLock l(&mu_);
    notice = notice_;
  }
  if (notice) {
    callback(*notice);
  } else {
    callbacks_[id] = std::move(callback);
  }
  return id;
}

void GenerationWatcher::Unsubscribe(int id) {
  absl::MutexLock lock(&callbacks_mu_);
  callbacks_.erase(id);
}

std::optional<absl::Status> GenerationWatcher::Notice(absl::Duration wait) {
  absl::MutexLock lock(&mu_);
  auto arrived = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return notice_.has_value(); };
  if (wait > absl::ZeroDuration()) mu_.AwaitWithTimeout(absl::Condition(&arrived), wait);
  return notice_;
}

}  // namespace drover::collective
