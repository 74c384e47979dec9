// WorkerServer: a process of the user's binary in worker mode, serving tasks.
//
// The node agent starts the binary with DROVER_WORKER_ID and the path of its control
// socket (DROVER_WORKER_CONTROL) in the environment; drover::Init sees them and runs
// this instead of returning to main. The worker
//   1. checks that it is the binary its owner runs (build id), else refuses and exits;
//   2. listens on a Unix socket (owners on this node) and a TCP port (other nodes; TLS
//      in a TLS cluster, with the certificate of the agent that started it);
//   3. registers with the agent over the control socket and keeps that connection for
//      life (it exits when the agent goes);
//   4. serves: the agent assigns it a lease (or an actor to create), the lease holder
//      (or the actor's callers) connect with the cluster token and push tasks, and it
//      runs them one at a time in arrival order, replying with small results inline and
//      putting large ones into the node's store;
//   5. tells its job's timeline what it ran (each task or actor call: name, start,
//      duration, failed), batched by a TimelineReporter (common/timeline_reporter.h)
//      on a thread of its own, unless the job set DROVER_TIMELINE=0. What it holds is
//      sent at once when a lease ends, and before the worker dies of SIGTERM (the
//      agent's stop at the end of the job): the loop sees the signal through a pipe,
//      sends, then dies of the signal as before.
//
// Threading: one thread runs everything (a FrameServer loop, common/frame_server.h),
// so actor methods need no locks and run in the order calls arrived. Tasks the user's
// code submits from inside a task go through the same process's runtime (its own
// threads).
#ifndef DROVER_SDK_RUNTIME_WORKER_SERVER_H_
#define DROVER_SDK_RUNTIME_WORKER_SERVER_H_

#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/frame_server.h"
#include "common/framed_socket.h"
#include "common/socket_stream.h"
#include "common/timeline_reporter.h"
#include "proto/task.pb.h"
#include "sdk/runtime/context.h"

namespace drover::internal {

struct WorkerEnvironment {
  std::string worker_id;
  std::string control_socket;  // the agent's
  std::string socket_dir;      // where this worker's Unix socket goes
  std::string node_ip;         // where its TCP port listens
  std::string expected_build_id;
  // True if the environment says this process is a worker.
  static bool Present();
  static absl::StatusOr<WorkerEnvironment> Read();
};

class WorkerServer : private FrameServer::Handler {
 public:
  WorkerServer(RuntimeContext* ctx, WorkerEnvironment env);
  ~WorkerServer() override;
  WorkerServer(const WorkerServer&) = delete;
  WorkerServer& operator=(const WorkerServer&) = delete;

  // Serves until the agent goes away (or refuses this worker). Returns the process's
  // exit code.
  int Run();

 private:
  // A connection of server_: the agent's, a lease holder's or an actor's caller's.
  struct Conn : FrameConn {
    bool hello = false;    // authenticated
    bool control = false;  // the agent's connection
    bool lease = false;    // the lease holder's connection
    std::string caller;
  };
  struct Pending {
    std::shared_ptr<Conn> conn;
    proto::TaskSpec spec;
  };

  // Run's steps, in order.
  // The agent's control socket, connected (an error is printed; the exit code is 3).
  absl::StatusOr<std::unique_ptr<FramedSocket>> ConnectToAgent();
  // This worker's registration, without its addresses yet.
  proto::WorkerControl Registration() const;
  // FAILED_PRECONDITION when this binary is not the build the owner runs.
  absl::Status CheckBuildId() const;
  // Tells the agent (and stderr) why this worker cannot serve; returns the exit code.
  int Refuse(FramedSocket& agent, proto::WorkerControl& reg, const absl::Status& why);
  // The loop and its listening sockets.
  absl::Status Setup();
  // Large tensors that tasks make are allocated in the node's store from the start.
  void UseStoreForLargeTensors();
  // The job's timeline reporter and the SIGTERM pipe, unless DROVER_TIMELINE=0.
  void StartTimeline();
  // The agent's connection joins the loop.
  absl::Status JoinControl(std::unique_ptr<FramedSocket> agent);
  // The loop: wait, run what arrived, reply; until the agent goes or SIGTERM.
  int Serve();
  // Polls while tasks wait (or for kStayAwake after work), else sleeps until something
  // arrives or an unclaimed lease is due. Returns FrameServer::Poll's result.
  int WaitForWork(absl::Time* idle_since, bool* stay_awake);
  // Runs queued tasks for up to kBatchTime; true if any was queued.
  bool RunPending();

  // FrameServer::Handler.
  std::shared_ptr<FrameConn> NewConnection() override { return std::make_shared<Conn>(); }
  void OnFrame(const std::shared_ptr<FrameConn>& c, std::string_view payload) override;
  void OnClosed(const std::shared_ptr<FrameConn>& c, std::string_view why) override;

  void OnTaskFrame(const std::shared_ptr<Conn>& c, std::string_view payload);
  void OnControl(const std::shared_ptr<Conn>& c, std::string_view payload);
  // Queues `msg` for the agent and writes it (nothing once the agent is gone).
  void SendControl(const proto::WorkerControl& msg);
  void RunTask(Pending& p);
  void CreateActor(const proto::ActorCreation& creation);
  proto::TaskReply Execute(const proto::TaskSpec& spec);
  // Tells the timeline (if any) that `spec` ran from `start` until now.
  void NoteTask(const proto::TaskSpec& spec, const proto::TaskReply& reply, absl::Time start);
  std::string Where() const;

  RuntimeContext* const ctx_;
  const WorkerEnvironment env_;
  FrameServer server_;
  int tcp_port_ = 0;
  std::string unix_path_;
  std::string build_id_;
  std::shared_ptr<Conn> control_;
  std::deque<Pending> pending_;
  std::set<std::pair<Conn*, uint64_t>> cancelled_;
  std::string lease_id_;       // assigned by the agent
  bool lease_connected_ = false;
  // The scheduler wants lease_id_ back (set while it is served): its holder is told
  // now, or right after its hello if it has not connected yet.
  std::string lease_revoked_;
  // Tells the lease holder's connection, if connected, that the lease is revoked.
  void TellRevoked();
  absl::Time lease_claim_by_;  // the holder must connect by then
  void ReleaseUnclaimedLease();
  // The actor this worker hosts, if any.
  std::string actor_id_;
  void* actor_ = nullptr;
  void (*actor_deleter_)(void*) = nullptr;
  const std::type_info* actor_class_ = nullptr;
  bool stop_ = false;
  // What this worker ran, for its job's timeline; null with DROVER_TIMELINE=0.
  std::unique_ptr<TimelineReporter> timeline_;
  // SIGTERM, seen by the loop (a handler writes to the pipe): send what the timeline
  // holds, then die of it.
  int term_pipe_[2] = {-1, -1};
  bool terminated_ = false;
  void CatchTerm();
  [[noreturn]] void DieOfTerm();
};

}  // namespace drover::internal

#endif  // DROVER_SDK_RUNTIME_WORKER_SERVER_H_
