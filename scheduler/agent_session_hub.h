// AgentSessionHub: the server side of Scheduler.AgentSession, the stream each node
// agent holds so that its death is noticed through its closed connection (the rules:
// agent_sessions.h). Each session is a gRPC callback reactor, so no thread is held per
// agent and a cancelled stream is noticed at once (the sync API would need a thread
// polling ServerContext::IsCancelled per agent). A session sends one notice, then ends
// in one of three ways:
//   - its agent's side goes away (OnCancel: the agent process exited or was killed and
//     the kernel closed its connection, or the agent cancelled it): told to the core
//     (SchedulerCore::AgentSessionClosed), which declares the node dead after the grace
//     unless a new session of the node opens first;
//   - a newer session of the same node opens: this one is finished with ABORTED, and
//     the core ignores its end;
//   - the scheduler shuts down (BeginShutdown): every session is finished with
//     UNAVAILABLE and nothing is told to the core, so a scheduler that stops (and is
//     restarted from its state store) declares no healthy node dead.
//
// Ownership: a session reactor deletes itself when gRPC is done with it (OnDone); the
// hub only keeps pointers to the live ones. The core must outlive the hub, and the hub
// must outlive the gRPC server it serves on (the server's Shutdown waits for every
// session's OnDone).
// Thread safety: every method is thread-safe; reactions run on gRPC's threads. Lock
// order: the hub's mutex, then a session's own, then the core's.
#ifndef DROVER_SCHEDULER_AGENT_SESSION_HUB_H_
#define DROVER_SCHEDULER_AGENT_SESSION_HUB_H_

#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/server_callback.h"
#include "proto/scheduler.pb.h"
#include "scheduler/scheduler_core.h"

namespace drover {

class AgentSessionHub {
 public:
  // `core` must outlive the hub.
  explicit AgentSessionHub(SchedulerCore* core) : core_(core) {}
  AgentSessionHub(const AgentSessionHub&) = delete;
  AgentSessionHub& operator=(const AgentSessionHub&) = delete;

  // A new session for `req` (its token already checked), for gRPC to run; finished at
  // once with the core's error if the core refuses it (FAILED_PRECONDITION for a node
  // that is not registered and ALIVE), or with UNAVAILABLE after BeginShutdown.
  grpc::ServerWriteReactor<proto::AgentSessionNotice>* Open(
      const proto::AgentSessionRequest& req);

  // A stream refused before it reached the hub (bad token, bad request): finished at
  // once with `status`.
  grpc::ServerWriteReactor<proto::AgentSessionNotice>* Refuse(grpc::Status status);

  // Finishes every session with UNAVAILABLE without telling the core, and refuses new
  // ones. Call before shutting the gRPC server down. Idempotent.
  void BeginShutdown();

  // Sessions open now, one per node at most (for tests and status).
  int open_sessions();

 private:
  class Session;
  // The session's agent side went away: ends it and tells the core, unless the hub
  // ended it first (replaced, shut down). False if the session had ended already.
  bool Cancelled(Session* s);
  // gRPC is done with the session; it is deleted after.
  void Done(Session* s);

  SchedulerCore* const core_;
  absl::Mutex mu_;
  // The newest session of each node, until gRPC is done with it.
  std::map<std::string, Session*> current_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace drover

#endif  // DROVER_SCHEDULER_AGENT_SESSION_HUB_H_
