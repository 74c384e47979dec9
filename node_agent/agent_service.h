// The NodeAgent gRPC service (sync API): thin handlers over ProcessManager.
//
// Every handler first checks the cluster token. Handlers run on gRPC's threads and never
// spawn or reap anything themselves: ProcessManager posts that to its own thread.
// Thread-safe; the ProcessManager must outlive the service.
#ifndef DROVER_NODE_AGENT_AGENT_SERVICE_H_
#define DROVER_NODE_AGENT_AGENT_SERVICE_H_

#include <atomic>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "node_agent/process_manager.h"
#include "proto/node_agent.grpc.pb.h"

namespace drover {

class AgentService final : public proto::NodeAgent::Service {
 public:
  // Largest LogChunk.data sent.
  static constexpr int64_t kMaxChunkBytes = 1 << 20;

  // `default_grace` is used by StopJob when the request's grace_ms is 0.
  AgentService(std::string token, ProcessManager* pm, absl::Duration default_grace);

  // Named in error messages; set once the scheduler assigned it.
  void SetNodeId(const std::string& node_id);
  // The agent's latest registration (RegisterNodeReply.registration): StartProcesses
  // sent under an earlier one is refused (StartProcessesRequest.node_registration).
  void SetRegistration(int64_t registration) { registration_ = registration; }
  // Called right before the process table a registration reports is taken: from then on
  // a start sent under the registration held so far is refused as well, and one admitted
  // before has its processes in the table. So each start is in that table or refused;
  // none slips in between the table and the new registration's reply (the scheduler
  // would take its ranks as never started, or gone, while they run).
  void FenceStarts();
  // Makes following StreamLogs calls end promptly (agent shutdown).
  void BeginShutdown() { shutting_down_ = true; }

  grpc::Status StartProcesses(grpc::ServerContext* ctx,
                              const proto::StartProcessesRequest* req,
                              proto::StartProcessesReply* reply) override;
  // Each start as StartProcesses would handle it, in order, each answered on its own.
  grpc::Status StartProcessesBatch(grpc::ServerContext* ctx,
                                   const proto::StartProcessesBatchRequest* req,
                                   proto::StartProcessesBatchReply* reply) override;
  grpc::Status StopJob(grpc::ServerContext* ctx, const proto::StopJobRequest* req,
                       proto::StopJobReply* reply) override;
  grpc::Status StreamLogs(grpc::ServerContext* ctx, const proto::StreamLogsRequest* req,
                          grpc::ServerWriter<proto::LogChunk>* writer) override;

  // Empty if `req` is acceptable, else what is wrong with it (INVALID_ARGUMENT text).
  static std::string Validate(const proto::StartProcessesRequest& req);

 private:
  std::string NodeId();
  // One start, checked (token aside): its status and, when OK, the MASTER_PORT used.
  grpc::Status StartOne(const proto::StartProcessesRequest& req, int* port);

  const std::string token_;
  ProcessManager* const pm_;
  const absl::Duration default_grace_;
  std::atomic<bool> shutting_down_{false};
  std::atomic<int64_t> registration_{0};
  // Held shared by a start from its check to its processes' spawn, exclusively by
  // FenceStarts; `fenced_` is the registration a fence refuses starts under (and below).
  absl::Mutex start_mu_;
  int64_t fenced_ ABSL_GUARDED_BY(start_mu_) = 0;
  absl::Mutex mu_;
  std::string node_id_ ABSL_GUARDED_BY(mu_);
};

}  // namespace drover

#endif  // DROVER_NODE_AGENT_AGENT_SERVICE_H_
