// ActorClient: this process's side of actors: creating them (through the scheduler,
// which keeps every actor's record, places it and restarts it), and calling them
// directly on their worker.
//
// Calls from this process to one actor go, in submission order, over one connection to
// the actor's worker, which runs them in arrival order: so calls from one caller run in
// the order they were made. A call whose arguments are not ready holds back the calls
// after it. When the connection breaks the scheduler is asked what happened: calls in
// flight fail with the cause (the worker's exit code or signal and stderr tail); queued
// calls go to the restarted actor, or fail if it is dead for good.
//
// Threading: one mutex per actor. Every actor connection is read by one
// ConnectionLoop thread (connection_loop.h; the process's, or the client's own), whose
// handlers never block: sends never wait (the loop writes what a full socket did not
// take), and a broken connection's questions to the scheduler go to a thread of their
// own. Connecting (waiting for the actor to be ALIVE) runs on its own thread. No
// call's result is failed or completed while a lock is held: its done callbacks (a
// dependent call's) take the actor's locks again. Thread-safe.
//
// Collaborators (seams.h): the scheduler's actor records, worker connections, agents,
// the object table and the clock, wired by runtime.cc and by unit tests
// (actor_client_test.cc) with fakes.
#ifndef DROVER_SDK_RUNTIME_ACTOR_CLIENT_H_
#define DROVER_SDK_RUNTIME_ACTOR_CLIENT_H_

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/framed_socket.h"
#include "common/thread_group.h"
#include "sdk/runtime/connection_loop.h"
#include "sdk/runtime/context.h"
#include "sdk/runtime/scheduler_outage.h"
#include "sdk/runtime/seams.h"

namespace drover::internal {

class ActorClient;

class ActorState {
 public:
  explicit ActorState(std::string id) : id(std::move(id)) {}
  const std::string id;

 private:
  friend class ActorClient;
  struct Call {
    std::shared_ptr<TaskRecord> task;
    bool resolved = false;
    absl::Status error;  // an argument failed
  };
  // Held while taking calls off the queue and sending them, so they leave in order. The
  // reader never takes it, so a send that blocks cannot stop replies from being read.
  absl::Mutex send_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  absl::Mutex mu_;
  absl::CondVar changed_;
  proto::ActorInfo info_ ABSL_GUARDED_BY(mu_);
  bool known_ ABSL_GUARDED_BY(mu_) = false;      // info_ came from the scheduler
  absl::Status dead_ ABSL_GUARDED_BY(mu_);        // set once DEAD (or creation failed)
  std::shared_ptr<FramedSocket> sock_ ABSL_GUARDED_BY(mu_);
  bool connecting_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<Call> queue_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<uint64_t, std::shared_ptr<TaskRecord>> in_flight_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
};

class ActorClient {
 public:
  // What an actor client works with. Every pointer outlives the client.
  struct Deps {
    OwnerIdentity owner;
    ActorDirectory* directory = nullptr;
    WorkerConnector* connector = nullptr;
    WorkerAgents* agents = nullptr;
    ObjectTable* objects = nullptr;
    Clock* clock = nullptr;
    // Named in the messages of calls that wait while the scheduler is away.
    std::string scheduler_address;
    // Told while the scheduler is away (shared with the rest of the process, so one
    // outage is one line); null: the client keeps its own.
    SchedulerOutage* outage = nullptr;
    // Reads the actor connections (shared with the rest of the process); null: the
    // client makes its own.
    ConnectionLoop* loop = nullptr;
  };
  explicit ActorClient(Deps deps);
  ~ActorClient();

  std::shared_ptr<ActorState> Create(const std::string& factory_key, const CallOptions& options,
                                     std::vector<TaskArgument> args);
  std::shared_ptr<RefState> Call(const std::shared_ptr<ActorState>& actor,
                                 const std::string& method_key, const CallOptions& options,
                                 std::vector<TaskArgument> args);
  absl::StatusOr<std::shared_ptr<ActorState>> Lookup(const std::string& name,
                                                     absl::Duration timeout);
  std::shared_ptr<ActorState> FromId(const std::string& id);
  absl::Status Kill(const std::shared_ptr<ActorState>& actor);
  absl::Status WaitReady(const std::shared_ptr<ActorState>& actor, absl::Duration timeout);
  // Waits up to `timeout` for the actor to be dead and returns why (its worker's exit
  // code or signal and stderr tail); DEADLINE_EXCEEDED if it is still alive. For
  // clients of services an actor hosts that saw their connection break.
  absl::Status WaitDead(const std::shared_ptr<ActorState>& actor, absl::Duration timeout);
  // For tests: calls of `actor` queued here (not yet sent) and in flight on its worker.
  std::pair<size_t, size_t> CallCounts(const std::shared_ptr<ActorState>& actor);
  // Fails queued calls and closes connections; joins threads.
  void Shutdown();

 private:
  // Sends the calls at the head of the queue that are ready, connecting first if needed,
  // and fails those that cannot run (their results' done callbacks may call Pump).
  void Pump(const std::shared_ptr<ActorState>& a) ABSL_LOCKS_EXCLUDED(mu_);
  // Pump's part under the actor's send_mu_: sends, and collects the calls to fail.
  void SendReady(const std::shared_ptr<ActorState>& a,
                 std::vector<std::pair<std::shared_ptr<TaskRecord>, absl::Status>>* failed);
  void Connect(std::shared_ptr<ActorState> a);
  // A frame from `a`'s worker (the loop's thread).
  void OnFrame(const std::shared_ptr<ActorState>& a, std::string_view payload);
  // `sock`, `a`'s connection, ended (the loop's thread): the calls in flight fail
  // with what the scheduler says happened, asked on a thread of its own (Lost).
  void ConnectionClosed(const std::shared_ptr<ActorState>& a,
                        const std::shared_ptr<FramedSocket>& sock,
                        const std::shared_ptr<bool>& closed);
  void Lost(const std::shared_ptr<ActorState>& a, std::vector<std::shared_ptr<TaskRecord>> lost,
            int64_t version);
  // Asks the scheduler for the actor's record, waiting up to `wait` for a version after
  // `after` (0: now). While the scheduler is away (a restart), waits for it up to
  // `patience` (a caller's own bound, or the client's 60 s).
  absl::StatusOr<proto::ActorInfo> Fetch(const std::string& id, const std::string& name,
                                         int64_t after, absl::Duration wait,
                                         absl::Duration patience);
  // Makes a call to the scheduler (`attempt`: one try) and, while the scheduler does not
  // answer (UNAVAILABLE, DEADLINE_EXCEEDED: a restart under way), tries again with
  // back-off (100 ms doubling to 2 s) for up to `patience`, telling the outage (once per
  // outage for the whole process); then fails naming the scheduler. CANCELLED if
  // Shutdown is called meanwhile.
  // Every call retried is safe to repeat: creations carry the actor's id, reads and
  // kills are idempotent.
  absl::Status WhileSchedulerAway(const std::string& what, absl::Duration patience,
                                  const std::function<absl::Status()>& attempt)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Update(const std::shared_ptr<ActorState>& a, const proto::ActorInfo& info);
  void FailAll(const std::shared_ptr<ActorState>& a, const absl::Status& s)
      ABSL_LOCKS_EXCLUDED(mu_);

  const OwnerIdentity owner_;
  ActorDirectory* const directory_;
  WorkerConnector* const connector_;
  WorkerAgents* const agents_;
  ObjectTable& objects_;
  Clock* const clock_;
  const std::string scheduler_address_;
  std::unique_ptr<SchedulerOutage> own_outage_;
  SchedulerOutage* const outage_;
  // Before anything holding sockets (their sends call the loop until they close).
  std::unique_ptr<ConnectionLoop> own_loop_;
  ConnectionLoop* const loop_;
  absl::Mutex mu_;
  std::unordered_map<std::string, std::weak_ptr<ActorState>> actors_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<std::string, std::shared_ptr<FramedSocket>> sockets_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  // shutdown_, for SendReady, which runs under an actor's locks (mu_ is not taken there):
  // once set, no call is sent or queued. Set before Shutdown collects the actors, so a
  // call either is in flight when Shutdown fails those or sees it.
  std::atomic<bool> stopped_{false};
  absl::CondVar stopping_;  // signalled by Shutdown
  // Creations, connections and losses; Shutdown waits for them.
  ThreadGroup threads_;
};

// The message for an actor that is dead, from its record.
absl::Status ActorDeadError(const proto::ActorInfo& info);

}  // namespace drover::internal

#endif  // DROVER_SDK_RUNTIME_ACTOR_CLIENT_H_
