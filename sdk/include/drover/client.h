// drover::Client: a connection to a drover cluster for submitting and watching jobs,
// reading their output and the cluster's status. The `drover` CLI is built on it;
// programs can use it the same way.
//
//   auto cluster = drover::ResolveCluster("", "");     // as the CLI finds it
//   auto client = drover::Client::Connect(*cluster);
//   drover::JobSpec spec;
//   spec.command = {"python3", "train.py"};
//   spec.nproc = 4;
//   auto job = (*client)->Submit(spec);
//   auto done = (*client)->WaitJob(job->job_id, absl::Hours(1));
//
// Ownership: Connect returns the only owner of the Client. Records (JobInfo, ...) are
// plain values (drover/types.h) the caller owns.
// Thread safety: a Client is safe to use from several threads at once.
//
// Errors: every call returns absl::Status(Or) with the scheduler's message, which names
// the thing and what to do next. Every call has a deadline; none blocks forever. Calls
// are safe to retry: the client retries UNAVAILABLE itself for a while (a restarting
// scheduler), and Submit carries an idempotency key. Codes every call may return:
//   UNAVAILABLE        the scheduler (or agent) cannot be reached: the message says
//                      where it was looked for and how to check the cluster.
//   UNAUTHENTICATED    the token file holds the wrong token for this cluster.
#ifndef DROVER_SDK_INCLUDE_DROVER_CLIENT_H_
#define DROVER_SDK_INCLUDE_DROVER_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "drover/types.h"

namespace drover {

// Where a cluster is and how to authenticate to it.
struct ClusterAddress {
  std::string address;     // scheduler host:port
  std::string token_file;  // owner-only file with the cluster token
  // TLS clusters: the cluster CA's certificate (a copy of the head's tls/ca.crt), which
  // every server must be signed by. Empty: plain text.
  std::string tls_ca_file;
};

// Finds the cluster the way every CLI command does: explicit values win, then the
// DROVER_ADDRESS / DROVER_TOKEN_FILE / DROVER_TLS_CA environment variables, then the
// cluster file `drover up` or `drover start --head` wrote ($DROVER_HOME/cluster.json,
// DROVER_HOME defaulting to ~/.drover; its CA only for the cluster it records); the
// token file defaults to $DROVER_HOME/token.
// FAILED_PRECONDITION when no address is found, with a message saying how to point at
// a cluster. Reads files only; does not contact the cluster.
absl::StatusOr<ClusterAddress> ResolveCluster(const std::string& address,
                                              const std::string& token_file,
                                              const std::string& tls_ca_file = "");

// The id of the job a failed Client::Submit made anyway (UNAVAILABLE: accepted and
// will run, not saved yet), or nullopt.
std::optional<std::string> AcceptedJobId(const absl::Status& submit_error);

class Client {
 public:
  // Reads the token (and the CA certificate of a TLS cluster); does not contact the
  // cluster yet (the first call does).
  // Errors: NOT_FOUND no token file, PERMISSION_DENIED it is unreadable or readable
  // by others (the message names the file and the chmod to run), INVALID_ARGUMENT it
  // is empty or the CA file is not a CA certificate.
  // A call to a cluster that uses TLS when `cluster` names no CA (or the other way
  // round, or with another cluster's CA) fails with UNAVAILABLE saying so and what to
  // pass.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ClusterAddress& cluster);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // The scheduler's host:port.
  const std::string& address() const { return address_; }

  // Queues a job and returns its record at once (usually PENDING or RUNNING; the
  // processes start asynchronously). spec.idempotency_key is the request id: a Submit
  // with the id of an earlier one returns the job that one made, never a second job,
  // also after a scheduler restart (the scheduler saves it with the job). Empty: a
  // fresh one, so a retry inside this call never creates a second job; set it yourself
  // to retry after an error.
  // UNAVAILABLE with AcceptedJobId(status) set: the job was made and will run, but the
  // scheduler could not save its record in time (its Redis is down); do not submit it
  // again without the same request id (that would run it twice).
  // Errors: INVALID_ARGUMENT a spec that is wrong or could never run on this cluster
  // (no command, nproc < 1, more GPUs on one node than any node has, ...: the message
  // says which).
  absl::StatusOr<JobInfo> Submit(const JobSpec& spec);

  // The job's current record. With after_version > 0, waits up to `wait` for the
  // job's version to move past after_version and returns the record then (or the
  // unchanged record when `wait` passes: not an error).
  // Errors: NOT_FOUND no job with that id.
  absl::StatusOr<JobInfo> GetJob(const std::string& job_id, int64_t after_version = 0,
                                 absl::Duration wait = absl::ZeroDuration());

  // Waits until the job is SUCCEEDED, FAILED or CANCELLED and no process of it is left
  // on any node, and returns its final record (whatever the state: a FAILED job is not
  // an error of this call). Rides out a scheduler restart of a few seconds.
  // Errors: DEADLINE_EXCEEDED when `timeout` passes first, NOT_FOUND no such job.
  absl::StatusOr<JobInfo> WaitJob(const std::string& job_id, absl::Duration timeout);

  // Jobs, newest first: only those in `states` (empty: all), at most `limit` of them
  // (0: no limit).
  absl::StatusOr<std::vector<JobInfo>> ListJobs(const std::vector<JobState>& states = {},
                                                int limit = 0);

  // Cancels a job: it becomes CANCELLED (exit code 130) and its processes are stopped
  // (SIGTERM, then SIGKILL after the cluster's grace period). Returns the record right
  // after the call, when processes may still be stopping: WaitJob waits for them.
  // Cancelling a job that has already ended changes nothing and is not an error.
  // Errors: NOT_FOUND no such job.
  absl::StatusOr<JobInfo> Cancel(const std::string& job_id);

  // Every node (state, resources total and free, agent address, warnings) and the
  // number of jobs in each state.
  absl::StatusOr<ClusterStatus> Status();

  // What happened to a job (submission, placement, each rank's start and exit per node,
  // restarts; leases and actors of a driver), oldest first.
  // Errors: NOT_FOUND the scheduler keeps no events of that job (unknown, too old, or
  // from before a scheduler restart).
  absl::StatusOr<JobTimeline> Timeline(const std::string& job_id);

  // A one-time login link to the scheduler's dashboard (valid once, for a few minutes).
  // Errors: FAILED_PRECONDITION the scheduler serves no dashboard.
  absl::StatusOr<DashboardLogin> CreateDashboardLogin();

  // Streams a job's output from one node's agent (NodeInfo::agent_address; a job's
  // output stays on the nodes it ran on: JobInfo::nodes_used). `on_chunk` is called
  // for each chunk, in order per (rank, stream), from the calling thread. Streams not in
  // `offsets` start at byte 0. Returns when the stream ends: without `follow`, once
  // all current output is sent; with `follow`, once the job's processes on that node
  // have exited, `*cancel` (may be null) becomes true (then OK), or `timeout` passes.
  // Errors: NOT_FOUND the node never ran a process of the job, DEADLINE_EXCEEDED
  // `timeout` passed, UNAVAILABLE the agent cannot be reached; the message names the
  // agent.
  absl::Status StreamLogs(const std::string& agent_address, const std::string& job_id,
                          bool follow, const std::vector<LogOffset>& offsets,
                          const std::function<void(const LogChunk&)>& on_chunk,
                          const std::atomic<bool>* cancel, absl::Duration timeout);

 private:
  struct Stubs;
  Client(std::string address, std::string token);

  const std::string address_;
  const std::string token_;
  std::unique_ptr<Stubs> stubs_;
};

}  // namespace drover

#endif  // DROVER_SDK_INCLUDE_DROVER_CLIENT_H_
