// The real collaborators of the task runtime's core (seams.h): gRPC to the scheduler
// and to nodes' agents, Unix sockets and TCP to workers. runtime.cc wires them.
//
// Thread safety: every method is thread-safe.
#ifndef DROVER_SDK_RUNTIME_SEAMS_GRPC_H_
#define DROVER_SDK_RUNTIME_SEAMS_GRPC_H_

#include <memory>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "sdk/runtime/context.h"
#include "sdk/runtime/seams.h"

namespace drover::internal {

// The scheduler's Leases service: leases and actor records.
class GrpcScheduler : public LeaseClient, public ActorDirectory {
 public:
  // `ctx` (its leases stub, token, store) outlives this.
  explicit GrpcScheduler(RuntimeContext* ctx) : ctx_(ctx) {}

  absl::Status RequestLease(const proto::RequestLeaseRequest& req,
                            proto::RequestLeaseReply* reply) override ABSL_LOCKS_EXCLUDED(mu_);
  void ReturnLease(const std::string& lease_id, const std::string& reason) override;
  void CancelAll() override ABSL_LOCKS_EXCLUDED(mu_);

  absl::Status CreateActor(const proto::CreateActorRequest& req,
                           proto::CreateActorReply* reply) override;
  absl::Status GetActor(const proto::GetActorRequest& req, proto::GetActorReply* reply) override;
  absl::Status KillActor(const proto::KillActorRequest& req, proto::KillActorReply* reply) override;

 private:
  RuntimeContext* const ctx_;
  absl::Mutex mu_;
  // RequestLease calls in progress, cancelled by CancelAll.
  std::set<grpc::ClientContext*> calls_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

// Workers over a Unix socket on this node, TCP elsewhere (the process's transport).
class SocketWorkerConnector : public WorkerConnector {
 public:
  explicit SocketWorkerConnector(RuntimeContext* ctx) : ctx_(ctx) {}
  absl::StatusOr<std::unique_ptr<FramedSocket>> Connect(const std::string& node_id,
                                                       const std::string& unix_path,
                                                       const std::string& tcp_address,
                                                       const std::string& lease_id,
                                                       const std::string& actor_id) override;

 private:
  RuntimeContext* const ctx_;
};

// Agents' Workers service (through the stubs StoreAccess keeps per agent).
class GrpcWorkerAgents : public WorkerAgents {
 public:
  explicit GrpcWorkerAgents(RuntimeContext* ctx) : ctx_(ctx) {}
  std::string DescribeExit(const std::string& agent_address, const std::string& worker_id,
                           absl::Duration wait) override;
  absl::Status KillWorker(const std::string& agent_address, const std::string& worker_id,
                          const std::string& reason) override;
  void NoteAgent(const std::string& node_id, const std::string& agent_address) override;

 private:
  RuntimeContext* const ctx_;
};

// The owner identity of `ctx` (its ids come from ctx->NewObjectId).
OwnerIdentity IdentityOf(RuntimeContext* ctx);

}  // namespace drover::internal

#endif  // DROVER_SDK_RUNTIME_SEAMS_GRPC_H_
