// drover::Client: a connection to a drover cluster for submitting and watching jobs,
// reading logs and cluster status. The `drover` CLI is built on it; programs can use
// it the same way.
//
// Thread safety: a Client is safe to use from several threads at once.
// Errors: every call returns absl::Status(Or) with the scheduler's message, which
// names the thing and what to do next. Every call has a deadline; none blocks forever.
#ifndef DROVER_SDK_INCLUDE_DROVER_CLIENT_H_
#define DROVER_SDK_INCLUDE_DROVER_CLIENT_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/common.pb.h"
#include "proto/node_agent.pb.h"
#include "proto/scheduler.pb.h"

namespace drover {

// Where a cluster is and how to authenticate to it.
struct ClusterAddress {
  std::string address;     // scheduler host:port
  std::string token_file;  // owner-only file with the cluster token
};

// Finds the cluster the way every CLI command does: explicit values win, then the
// DROVER_ADDRESS / DROVER_TOKEN_FILE environment variables, then the cluster file
// `drover up` or `drover start --head` wrote ($DROVER_HOME/cluster.json, DROVER_HOME
// defaulting to ~/.drover). Fails with a message saying how to point at a cluster.
absl::StatusOr<ClusterAddress> ResolveCluster(const std::string& address,
                                              const std::string& token_file);

class Client {
 public:
  // Reads the token; does not contact the cluster yet.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ClusterAddress& cluster);
  ~Client();

  const std::string& address() const { return address_; }

  absl::StatusOr<proto::JobInfo> Submit(const proto::JobSpec& spec);
  // With after_version > 0, waits (up to `wait`) for the job to change.
  absl::StatusOr<proto::JobInfo> GetJob(const std::string& job_id, int64_t after_version = 0,
                                        absl::Duration wait = absl::ZeroDuration());
  // Waits until the job is SUCCEEDED, FAILED or CANCELLED and no process of it is
  // left, or `timeout` passes (DEADLINE_EXCEEDED).
  absl::StatusOr<proto::JobInfo> WaitJob(const std::string& job_id, absl::Duration timeout);
  absl::StatusOr<std::vector<proto::JobInfo>> ListJobs(
      const std::vector<proto::JobState>& states = {}, int limit = 0);
  absl::StatusOr<proto::JobInfo> Cancel(const std::string& job_id);
  absl::StatusOr<proto::GetClusterStatusReply> Status();

  // Streams a job's output from one node agent. `on_chunk` is called for each chunk
  // (from the calling thread). Returns when the stream ends: without follow, once all
  // current output is sent; with follow, once the job's processes on that node have
  // exited, `*cancel` becomes true, or `timeout` passes.
  absl::Status StreamLogs(const std::string& agent_address, const std::string& job_id,
                          bool follow, const std::vector<proto::LogOffset>& offsets,
                          const std::function<void(const proto::LogChunk&)>& on_chunk,
                          const std::atomic<bool>* cancel, absl::Duration timeout);

 private:
  struct Stubs;
  Client(std::string address, std::string token);

  const std::string address_;
  const std::string token_;
  std::unique_ptr<Stubs> stubs_;
};

bool IsTerminal(proto::JobState state);

}  // namespace drover

#endif  // DROVER_SDK_INCLUDE_DROVER_CLIENT_H_
