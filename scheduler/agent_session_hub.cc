#include "scheduler/agent_session_hub.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace drover {

// One agent's stream. Finished exactly once: by the hub (refused, replaced, shutdown)
// or by OnCancel, whichever comes first.
class AgentSessionHub::Session : public grpc::ServerWriteReactor<proto::AgentSessionNotice> {
 public:
  Session(AgentSessionHub* hub, std::string node_id) : hub_(hub), node_id_(std::move(node_id)) {}

  const std::string& node_id() const { return node_id_; }
  int64_t id() const { return notice_.session_id(); }

  // Sends the notice that says the session is open. REQUIRES: called once, first.
  void Begin(proto::AgentSessionNotice notice) {
    notice_ = std::move(notice);
    StartWrite(&notice_);
  }

  // Ends the stream with `status` unless it has ended already.
  void FinishOnce(grpc::Status status) {
    if (TakeFinish()) Finish(std::move(status));
  }

  bool finished() {
    absl::MutexLock lock(&mu_);
    return finished_;
  }

  // The agent's side went away. If the hub ended the stream first, that end stands.
  void OnCancel() override {
    if (!hub_->Cancelled(this)) return;
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the agent's side closed the session"));
  }

  void OnDone() override {
    hub_->Done(this);
    delete this;
  }

  // True for the one caller that gets to finish the stream.
  bool TakeFinish() {
    absl::MutexLock lock(&mu_);
    if (finished_) return false;
    finished_ = true;
    return true;
  }

 private:
  AgentSessionHub* const hub_;
  const std::string node_id_;
  proto::AgentSessionNotice notice_;  // written once; must live until OnDone
  absl::Mutex mu_;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

grpc::ServerWriteReactor<proto::AgentSessionNotice>* AgentSessionHub::Refuse(
    grpc::Status status) {
  auto* s = new Session(this, "");
  s->FinishOnce(std::move(status));
  return s;
}

grpc::ServerWriteReactor<proto::AgentSessionNotice>* AgentSessionHub::Open(
    const proto::AgentSessionRequest& req) {
  auto* s = new Session(this, req.node_id());
  absl::MutexLock lock(&mu_);
  if (shutting_down_) {
    s->FinishOnce(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                               "the scheduler is shutting down; open the session again once "
                               "it is back and the node has registered"));
    return s;
  }
  absl::StatusOr<proto::AgentSessionNotice> notice = core_->OpenAgentSession(req.node_id());
  if (!notice.ok()) {
    s->FinishOnce(ToGrpcStatus(notice.status()));
    return s;
  }
  s->Begin(std::move(*notice));
  Session*& slot = current_[req.node_id()];
  if (slot != nullptr) {
    slot->FinishOnce(grpc::Status(
        grpc::StatusCode::ABORTED,
        absl::StrCat("replaced by a newer session of node ", req.node_id(), " (session ",
                     s->id(), ")")));
  }
  slot = s;
  return s;
}

void AgentSessionHub::BeginShutdown() {
  absl::MutexLock lock(&mu_);
  shutting_down_ = true;
  for (auto& [node_id, s] : current_) {
    s->FinishOnce(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                               "the scheduler is shutting down; register again and open a "
                               "new session once it is back"));
  }
}

int AgentSessionHub::open_sessions() {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (auto& [node_id, s] : current_) n += !s->finished();
  return n;
}

bool AgentSessionHub::Cancelled(Session* s) {
  // Under the hub's lock from the take to the core's notice: open_sessions() never
  // counts a session as ended before the core knows its grace has started.
  absl::MutexLock lock(&mu_);
  if (!s->TakeFinish()) return false;
  // A stopping scheduler loses no node.
  if (!shutting_down_) core_->AgentSessionClosed(s->node_id(), s->id());
  return true;
}

void AgentSessionHub::Done(Session* s) {
  absl::MutexLock lock(&mu_);
  auto it = current_.find(s->node_id());
  if (it != current_.end() && it->second == s) current_.erase(it);
}

}  // namespace drover
