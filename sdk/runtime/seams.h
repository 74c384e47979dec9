// The seams of the task runtime's core: what TaskSubmitter and ActorClient need from
// outside this process, as interfaces. runtime.cc wires the real ones (seams_grpc.h:
// gRPC to the scheduler and agents, sockets to workers); unit tests wire fakes
// (testing/fake_seams.h) and run the core in milliseconds.
//
// Each call here is per lease, per connection or per actor record, never per task byte:
// a task's frames go over the FramedSocket a WorkerConnector returned, not through a
// virtual call.
//
// Thread safety: implementations are called from many threads at once.
#ifndef DROVER_SDK_RUNTIME_SEAMS_H_
#define DROVER_SDK_RUNTIME_SEAMS_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/framed_socket.h"
#include "proto/lease.pb.h"

namespace drover::internal {

// Who this process is, as the cores name it to the scheduler and in object ids.
struct OwnerIdentity {
  std::string job_id;
  // "<job>/<pid>@<node>".
  std::string owner;
  // 8 hex characters unique to this process (lease request ids start with it).
  std::string owner_tag;
  // The binary workers run.
  proto::PackageRef package;
  // A fresh object id of this process.
  std::function<std::string()> new_id;
};

// The scheduler's lease calls.
class LeaseClient {
 public:
  virtual ~LeaseClient() = default;
  // Asks for a worker lease; the scheduler holds the call up to `req.wait_ms()` while
  // none is free. A grant (or why not) is in `reply`.
  virtual absl::Status RequestLease(const proto::RequestLeaseRequest& req,
                                    proto::RequestLeaseReply* reply) = 0;
  // Hands a granted lease back unused.
  virtual void ReturnLease(const std::string& lease_id, const std::string& reason) = 0;
  // Ends the RequestLease calls in progress (CANCELLED) and fails later ones at once.
  virtual void CancelAll() = 0;
};

// The scheduler's actor records.
class ActorDirectory {
 public:
  virtual ~ActorDirectory() = default;
  virtual absl::Status CreateActor(const proto::CreateActorRequest& req,
                                   proto::CreateActorReply* reply) = 0;
  // Waits up to `req.wait_ms()` for a version after `req.after_version()`.
  virtual absl::Status GetActor(const proto::GetActorRequest& req, proto::GetActorReply* reply) = 0;
  virtual absl::Status KillActor(const proto::KillActorRequest& req,
                                 proto::KillActorReply* reply) = 0;
};

// Connections to workers: a task connection to a leased worker (`lease_id`) or to an
// actor's worker (`actor_id`), after the hello. Returns why the worker refused.
class WorkerConnector {
 public:
  virtual ~WorkerConnector() = default;
  virtual absl::StatusOr<std::unique_ptr<FramedSocket>> Connect(const std::string& node_id,
                                                               const std::string& unix_path,
                                                               const std::string& tcp_address,
                                                               const std::string& lease_id,
                                                               const std::string& actor_id) = 0;
};

// Nodes' agents, as the cores ask them about workers.
class WorkerAgents {
 public:
  virtual ~WorkerAgents() = default;
  // How a worker ended (waits up to `wait` for the reap): "killed by SIGKILL; stderr
  // ends with: ..." or "" if unknown.
  virtual std::string DescribeExit(const std::string& agent_address, const std::string& worker_id,
                                   absl::Duration wait) = 0;
  virtual absl::Status KillWorker(const std::string& agent_address, const std::string& worker_id,
                                  const std::string& reason) = 0;
  // Where a node's agent is (learned from a lease or an actor record), for deletes there.
  virtual void NoteAgent(const std::string& node_id, const std::string& agent_address) = 0;
};

}  // namespace drover::internal

#endif  // DROVER_SDK_RUNTIME_SEAMS_H_
