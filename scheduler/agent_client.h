// Outbound calls from the scheduler to node agents. An interface so the core can be
// driven by tests; the real implementation speaks gRPC with the cluster token.
//
// Calls block (with deadlines) and are made from the scheduler's outbound thread
// pool, never while holding the scheduler's lock. Thread-safe.
#ifndef DROVER_SCHEDULER_AGENT_CLIENT_H_
#define DROVER_SCHEDULER_AGENT_CLIENT_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/node_agent.pb.h"

namespace drover {

class AgentClient {
 public:
  virtual ~AgentClient() = default;
  // Returns the MASTER_PORT the agent used.
  virtual absl::StatusOr<int> StartProcesses(const std::string& agent_address,
                                             const proto::StartProcessesRequest& req) = 0;
  virtual absl::Status StopJob(const std::string& agent_address,
                               const proto::StopJobRequest& req) = 0;
};

std::unique_ptr<AgentClient> NewGrpcAgentClient(const std::string& token);

}  // namespace drover

#endif  // DROVER_SCHEDULER_AGENT_CLIENT_H_
