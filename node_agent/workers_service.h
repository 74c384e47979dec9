// The agent's Workers gRPC service (proto/lease.proto): thin handlers over the
// WorkerPool, plus deletes in this node's store and a description of the node for
// drivers on this machine. Every handler checks the cluster token first. Thread-safe.
#ifndef DROVER_NODE_AGENT_WORKERS_SERVICE_H_
#define DROVER_NODE_AGENT_WORKERS_SERVICE_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "node_agent/worker_pool.h"
#include "object_store/client.h"
#include "proto/lease.grpc.pb.h"

namespace drover {

class WorkersService final : public proto::Workers::Service {
 public:
  // `pool` must outlive the service. `store_socket` may be empty (no store here).
  WorkersService(std::string token, WorkerPool* pool, std::string store_socket,
                 std::string node_ip);
  void SetNodeId(const std::string& node_id);

  grpc::Status StartWorker(grpc::ServerContext* ctx, const proto::StartWorkerRequest* req,
                           proto::StartWorkerReply* reply) override;
  grpc::Status KillWorker(grpc::ServerContext* ctx, const proto::KillWorkerRequest* req,
                          proto::KillWorkerReply* reply) override;
  grpc::Status RevokeLease(grpc::ServerContext* ctx, const proto::RevokeLeaseRequest* req,
                           proto::RevokeLeaseReply* reply) override;
  grpc::Status WaitWorkerExit(grpc::ServerContext* ctx, const proto::WaitWorkerExitRequest* req,
                              proto::WaitWorkerExitReply* reply) override;
  grpc::Status DeleteObjects(grpc::ServerContext* ctx, const proto::DeleteObjectsRequest* req,
                             proto::DeleteObjectsReply* reply) override;
  grpc::Status DescribeNode(grpc::ServerContext* ctx, const proto::DescribeNodeRequest* req,
                            proto::DescribeNodeReply* reply) override;

 private:
  const std::string token_;
  WorkerPool* const pool_;
  const std::string store_socket_;
  const std::string node_ip_;
  absl::Mutex mu_;
  std::string node_id_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<object_store::Client> store_ ABSL_GUARDED_BY(mu_);  // for deletes, lazily
};

}  // namespace drover

#endif  // DROVER_NODE_AGENT_WORKERS_SERVICE_H_
