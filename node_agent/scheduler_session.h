// SchedulerSession: the agent's end of Scheduler.AgentSession, a stream held open to
// the scheduler for as long as the agent runs, so that the agent's death (even by
// SIGKILL: the kernel closes its connection) is noticed by the scheduler at once
// instead of after the node timeout of missed heartbeats (scheduler/agent_sessions.h).
//
// One thread. A session is opened after each registration (Registered), replacing the
// one held (which is cancelled: it may hang on a scheduler that vanished), and opened
// again after a short back-off (100 ms doubling to 1 s) when it breaks while the
// scheduler stays reachable, well within the scheduler's grace. A scheduler that
// refuses the session because it does not know the node as ALIVE
// (FAILED_PRECONDITION: it restarted, or declared the node dead) gets the next one
// after the next registration; one without sessions (UNIMPLEMENTED: an older
// scheduler) is left alone until then, and the node is watched by heartbeats only.
//
// Thread safety: every method is thread-safe.
#ifndef DROVER_NODE_AGENT_SCHEDULER_SESSION_H_
#define DROVER_NODE_AGENT_SCHEDULER_SESSION_H_

#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "grpcpp/client_context.h"

namespace drover {

struct SchedulerSessionOptions {
  // host:port of the scheduler.
  std::string scheduler_address;
  // The cluster token.
  std::string token;
  // For the back-off between attempts. Not owned; must outlive the session.
  Clock* clock = Clock::Real();
};

class SchedulerSession {
 public:
  // `on_settled` runs once, on the session's thread, when the first session opens or
  // the scheduler turns out to offer none (UNIMPLEMENTED); the agent writes its ready
  // file then, so whoever waits for it knows the node's death will be noticed at once.
  SchedulerSession(SchedulerSessionOptions options, std::function<void()> on_settled);
  // Calls Stop().
  ~SchedulerSession();
  SchedulerSession(const SchedulerSession&) = delete;
  SchedulerSession& operator=(const SchedulerSession&) = delete;

  // Starts the thread; it opens nothing before the first Registered(). REQUIRES:
  // called once.
  void Start();
  // The agent (re-)registered as `node_id`: open a session for it now, cancelling the
  // one held.
  void Registered(const std::string& node_id);
  // Cancels the session held (the scheduler then sees the node's agent go) and joins
  // the thread. Idempotent.
  void Stop();

  // The id of the session held and open, 0 if none (for tests).
  int64_t session_id();

 private:
  void Loop();

  const SchedulerSessionOptions options_;
  const std::function<void()> on_settled_;
  std::thread thread_;

  absl::Mutex mu_;
  absl::CondVar cv_;  // stop_ or a registration
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::string node_id_ ABSL_GUARDED_BY(mu_);
  // Counts registrations; the thread opens a session at once when it moves.
  uint64_t registrations_ ABSL_GUARDED_BY(mu_) = 0;
  // The call in flight (owned by the thread), so Registered and Stop can cancel it.
  grpc::ClientContext* call_ ABSL_GUARDED_BY(mu_) = nullptr;
  int64_t session_id_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace drover

#endif  // DROVER_NODE_AGENT_SCHEDULER_SESSION_H_
