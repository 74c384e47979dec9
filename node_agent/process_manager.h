// ProcessManager: owns every worker process of this node.
//
// Threading: ONE long-lived manager thread, started by the constructor and joined by
// the destructor, does every spawn, reap and kill. This matters beyond tidiness:
// PR_SET_PDEATHSIG (which drover-launch uses to die with the agent) fires when the
// *thread* that spawned the child exits, so spawns must come from a thread that lives
// as long as the agent, never from a gRPC handler thread. Being the only reaper also
// means a pid we signal cannot have been reused.
//
// Public methods are thread-safe. Those that act (Start, Stop, Forget) post the work to
// the manager thread (queue + eventfd) and wait for it. The manager thread sleeps in
// poll() on the eventfd and one pidfd per live process, with a timeout equal to the
// next SIGTERM->SIGKILL escalation deadline, so an exit is noticed at once.
//
// Every worker runs as `drover-launch CMD...` (see launcher_main.cc) in its own process
// group; Stop signals the group and every descendant of the launcher that left it.
#ifndef DROVER_NODE_AGENT_PROCESS_MANAGER_H_
#define DROVER_NODE_AGENT_PROCESS_MANAGER_H_

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/common.pb.h"
#include "proto/node_agent.pb.h"
#include "proto/scheduler.pb.h"

namespace drover {

struct ProcessManagerOptions {
  // Absolute path of drover-launch.
  std::string launcher_path;
  // Logs go to <log_dir>/<job_id>/rank<R>.out and .err.
  std::string log_dir;
  // This node's id (DROVER_NODE_ID, ExitInfo.node_id); may be set later, see SetNodeId.
  std::string node_id;
  // Address MASTER_PORT is picked on when a start asks for it.
  std::string node_ip = "127.0.0.1";
  // Interface holding node_ip; set as GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME for workers
  // that do not set them. Empty: leave them unset.
  std::string socket_ifname;
  // Exported as DROVER_TOKEN_FILE.
  std::string token_file;
  // Used by Forget for processes still alive.
  absl::Duration default_grace = absl::Seconds(5);
  // Bytes / lines of stderr kept in ExitInfo.stderr_tail.
  int64_t tail_bytes = 4096;
  int tail_lines = 20;
};

class ProcessManager {
 public:
  // Called on the manager thread, with no lock held, for every reaped process of a
  // generation that was not forgotten. It must not block for long; it may call any
  // ProcessManager method.
  using ExitCallback = std::function<void(const std::string& job_id, const proto::ExitInfo&)>;

  // 1 = stdout, 2 = stderr (as in LogOffset.stream).
  static constexpr int kStdout = 1;
  static constexpr int kStderr = 2;

  ProcessManager(ProcessManagerOptions options, ExitCallback on_exit);
  // SIGKILLs and reaps whatever is still running, then joins the manager thread.
  ~ProcessManager();
  ProcessManager(const ProcessManager&) = delete;
  ProcessManager& operator=(const ProcessManager&) = delete;

  void SetNodeId(const std::string& node_id);
  // Sets KEY=VALUE in the environment of every worker started from now on (after the
  // standard variables, so it wins over them and the job's env). For what the agent
  // learns after construction: DROVER_AGENT_ADDRESS, DROVER_OBJECT_STORE_SOCKET.
  void SetWorkerEnv(const std::string& key, const std::string& value);

  // Starts this node's processes of one job generation and returns once all are
  // spawned. Idempotent per (job_id, generation): a repeat starts nothing and returns
  // OK with the port of the first start. A start under another placement epoch than the
  // one the generation is held under (both nonzero) is refused with FAILED_PRECONDITION:
  // it belongs to another placement of the same generation, and starting it would run
  // those ranks twice; unless its epoch is higher (a later placement) and none of the
  // held processes runs any more: the held record is dropped and the start runs.
  // If req.master_port() is 0, a free port on the node ip is picked and returned in
  // *master_port. INVALID_ARGUMENT for a missing cwd
  // or a bad job id; on a spawn failure nothing of the request is left running.
  absl::Status Start(const proto::StartProcessesRequest& req, int* master_port);

  // SIGTERM to the process group of each live process of `job_id` with generation <=
  // `generation` (-1: all), SIGKILL to the group `grace` later. Idempotent (a repeat
  // may only shorten the deadline). Returns how many were newly signalled. `why` (who
  // asks, and why) goes into the log line naming what was signalled. A nonzero
  // `placement_epoch` stops only the processes started under that epoch.
  // REQUIRES: !job_id.empty() (StopAllAndWait stops every job).
  int Stop(const std::string& job_id, int generation, absl::Duration grace,
           absl::string_view why = "", int64_t placement_epoch = 0);

  // SIGTERM to the process group of exactly one generation's live processes, SIGKILL
  // `grace` later (task workers are one-process generations: see worker_pool.h).
  int StopGeneration(const std::string& job_id, int generation, absl::Duration grace,
                     absl::string_view why = "");

  // Every process held for generations not forgotten, sorted by job, generation, rank.
  std::vector<proto::ProcessStatus> Snapshot();

  // Drops the records of one job generation, stopping (default grace) any still alive;
  // their exits are then not reported.
  void Forget(const std::string& job_id, int generation);

  // Stops everything and waits until it is all reaped (at most grace + 10 s).
  void StopAllAndWait(absl::Duration grace);

  // <log_dir>/<job_id>/rank<rank>.out (stream 1) or .err (stream 2).
  std::string LogPath(const std::string& job_id, int rank, int stream) const;
  // <log_dir>/<job_id>/worker<n>.out / .err: a task worker's output.
  std::string WorkerLogPath(const std::string& job_id, int n, int stream) const;
  std::string JobLogDir(const std::string& job_id) const;
  // True while any process of the job on this node has not been reaped.
  bool JobActive(const std::string& job_id);

  // Deletes the log directory of every job with no live process here whose files were
  // all last written more than `older_than` ago.
  // Runs on the manager thread, so it never races a Start of the same job. Returns how
  // many directories it removed.
  int PruneLogs(absl::Duration older_than);

  // A counter bumped (and waiters woken) on every reap. Read it, check state, then
  // WaitForChange(seen, deadline) to sleep until something exits or the deadline.
  uint64_t ChangeSeq();
  void WaitForChange(uint64_t seen, absl::Time deadline);

  // Starts since construction, for metrics: processes of gang ranks (and of those, ranks
  // of a restarted generation, > 0), of task workers, and start requests that failed to
  // spawn (a repeat of a started generation counts nothing).
  struct StartCounts {
    int64_t ranks = 0, rank_restarts = 0, task_workers = 0, failed = 0;
  };
  StartCounts start_counts();

  // Job ids become path components: letters, digits, '-', '_', '.', not "." / "..".
  static bool ValidJobId(const std::string& job_id);

 private:
  // Before generation 0 of a job this manager holds nothing of: a log directory left
  // under its id belongs to another job (a scheduler that lost its state reused the
  // id), so it is renamed <dir>.replaced-<unix time>: a new job never appends to, or
  // streams, an older job's output. Manager thread only.
  void SetAsideLeftoverLogs(const std::string& job_id);

  struct Proc {
    std::string job_id;
    int generation = 0;
    int64_t placement_epoch = 0;
    int rank = 0;
    pid_t pid = -1;  // also the process group id
    int pidfd = -1;
    bool running = true;
    bool term_sent = false;
    absl::Time kill_deadline = absl::InfiniteFuture();
    std::string err_path;
    int64_t err_offset = 0;
    proto::ExitInfo exit;
  };
  using Key = std::pair<std::string, int>;  // (job_id, generation)
  struct Generation {
    int master_port = 0;
    // StartProcessesRequest.placement_epoch of the start that began it (0: none given).
    int64_t placement_epoch = 0;
    // Forget() was called: hidden from Snapshot, exits not reported, erased once reaped.
    bool forgotten = false;
    std::vector<Proc> procs;
  };

  // Runs `fn` on the manager thread and waits for it (inline if already there).
  void RunOnManager(std::function<void()> fn);
  void Loop();
  void Wake();
  absl::Status StartOnManager(const proto::StartProcessesRequest& req, int* master_port);
  // Signals live processes of matching generations: all jobs if `job_id` is empty;
  // generations <= `generation` (all if < 0), or exactly it if `exact`.
  // A nonzero `placement_epoch` narrows it to the processes started under that epoch.
  int StopOnManager(const std::string& job_id, int generation, absl::Duration grace,
                    bool exact, absl::string_view why, int64_t placement_epoch = 0);
  // Reaps `p` if it has exited; fills exit info. Returns true if reaped.
  bool TryReap(Proc* p, std::vector<std::pair<std::string, proto::ExitInfo>>* reports)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<std::string> BuildEnv(const proto::StartProcessesRequest& req,
                                    const proto::ProcessSpec& spec, int master_port,
                                    int num_procs, const std::string& node_id,
                                    const std::map<std::string, std::string>& agent_env) const;

  const ProcessManagerOptions options_;
  const ExitCallback on_exit_;
  // The agent's environment at construction (base of every worker's environment).
  const std::vector<std::pair<std::string, std::string>> base_env_;
  int event_fd_ = -1;

  absl::Mutex mu_;
  absl::CondVar changed_;
  std::string node_id_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> worker_env_ ABSL_GUARDED_BY(mu_);
  std::map<Key, Generation> gens_ ABSL_GUARDED_BY(mu_);
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t change_seq_ ABSL_GUARDED_BY(mu_) = 0;
  StartCounts starts_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;

  std::thread::id manager_thread_id_;
  std::thread thread_;
};

}  // namespace drover

#endif  // DROVER_NODE_AGENT_PROCESS_MANAGER_H_
