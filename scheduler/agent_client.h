// Outbound calls from the scheduler to node agents. An interface so the core can be
// driven by tests; the real implementation speaks gRPC with the cluster token.
//
// Calls have deadlines and are never made while holding the scheduler's lock. The
// scheduler makes them without blocking (the *Async methods), so that calls in flight
// to a thousand nodes, or to a dead one, hold no thread each. Thread-safe.
#ifndef DROVER_SCHEDULER_AGENT_CLIENT_H_
#define DROVER_SCHEDULER_AGENT_CLIENT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

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
  // The same without blocking: `done` runs exactly once with the result, on a thread
  // of the client's (gRPC's, for the real one). These defaults block, calling the
  // blocking method and then `done` on the caller's thread.
  virtual void StartProcessesAsync(const std::string& agent_address,
                                   proto::StartProcessesRequest req,
                                   std::function<void(absl::StatusOr<int>)> done) {
    done(StartProcesses(agent_address, req));
  }
  // Several starts to one agent in one call (StartProcessesBatch): `done` gets each
  // start's result, in order, as StartProcessesAsync would. The default makes one
  // StartProcessesAsync call per start and answers once all are answered.
  virtual void StartProcessesBatchAsync(
      const std::string& agent_address, std::vector<proto::StartProcessesRequest> reqs,
      std::function<void(std::vector<absl::StatusOr<int>>)> done);
  virtual void StopJobAsync(const std::string& agent_address, const proto::StopJobRequest& req,
                            std::function<void(absl::Status)> done) {
    done(StopJob(agent_address, req));
  }
};

std::unique_ptr<AgentClient> NewGrpcAgentClient(const std::string& token);

}  // namespace drover

#endif  // DROVER_SCHEDULER_AGENT_CLIENT_H_
