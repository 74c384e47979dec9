#include "node_agent/scheduler_session.h"

#include <algorithm>
#include <utility>

#include "common/auth.h"
#include "common/log.h"
#include "common/rpc.h"
#include "proto/scheduler.grpc.pb.h"

namespace drover {
namespace {

constexpr absl::Duration kMinBackoff = absl::Milliseconds(100);
constexpr absl::Duration kMaxBackoff = absl::Seconds(1);

}  // namespace

SchedulerSession::SchedulerSession(SchedulerSessionOptions options,
                                   std::function<void()> on_settled)
    : options_(std::move(options)), on_settled_(std::move(on_settled)) {}

SchedulerSession::~SchedulerSession() { Stop(); }

void SchedulerSession::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void SchedulerSession::Registered(const std::string& node_id) {
  absl::MutexLock lock(&mu_);
  node_id_ = node_id;
  ++registrations_;
  if (call_ != nullptr) call_->TryCancel();
  cv_.SignalAll();
}

void SchedulerSession::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    if (call_ != nullptr) call_->TryCancel();
    cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

int64_t SchedulerSession::session_id() {
  absl::MutexLock lock(&mu_);
  return session_id_;
}

void SchedulerSession::Loop() {
  auto stub = proto::Scheduler::NewStub(MakeChannel(options_.scheduler_address));
  Clock* const clock = options_.clock;
  uint64_t seen = 0;               // the registration the last attempt was for
  bool await_registration = true;  // no retry before the next registration
  absl::Time retry_at = absl::InfinitePast();
  absl::Duration backoff = kMinBackoff;
  bool settled = false;
  bool logged_failure = false;
  for (;;) {
    grpc::ClientContext ctx;  // no deadline: the session lasts as long as the agent
    proto::AgentSessionRequest req;
    {
      absl::MutexLock lock(&mu_);
      while (!stop_ && registrations_ == seen &&
             (await_registration || clock->Now() < retry_at)) {
        clock->WaitWithDeadline(&cv_, &mu_,
                                await_registration ? absl::InfiniteFuture() : retry_at);
      }
      if (stop_) return;
      seen = registrations_;
      req.set_node_id(node_id_);
      call_ = &ctx;
    }
    ctx.AddMetadata(kTokenMetadataKey, options_.token);
    std::unique_ptr<grpc::ClientReader<proto::AgentSessionNotice>> reader =
        stub->AgentSession(&ctx, req);
    proto::AgentSessionNotice notice;
    const bool opened = reader->Read(&notice);
    if (opened) {
      {
        absl::MutexLock lock(&mu_);
        session_id_ = notice.session_id();
      }
      DROVER_LOG(INFO) << "session " << notice.session_id() << " with the scheduler open for "
                       << req.node_id() << " (if it closes, the scheduler declares the node "
                       << "dead after " << notice.grace_ms() << " ms)";
      logged_failure = false;
      backoff = kMinBackoff;
      if (!settled) {
        settled = true;
        on_settled_();
      }
      while (reader->Read(&notice)) {
      }
    }
    const grpc::Status status = reader->Finish();
    {
      absl::MutexLock lock(&mu_);
      call_ = nullptr;
      session_id_ = 0;
      if (stop_) return;
      if (registrations_ != seen) continue;  // cancelled by a registration: open anew
    }
    await_registration = status.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
                         status.error_code() == grpc::StatusCode::UNIMPLEMENTED;
    if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED && !settled) {
      DROVER_LOG(WARNING) << "the scheduler at " << options_.scheduler_address
                          << " offers no agent sessions (an older version): this node's "
                          << "death will be noticed by missed heartbeats only";
      settled = true;
      on_settled_();
    } else if (!logged_failure) {
      DROVER_LOG(WARNING) << "session with the scheduler " << (opened ? "ended" : "refused")
                          << ": " << status.error_message()
                          << (await_registration ? "; opening a new one after the next "
                                                   "registration"
                                                 : "; opening a new one");
      logged_failure = !opened;
    }
    retry_at = clock->Now() + backoff;
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

}  // namespace drover
