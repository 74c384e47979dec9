#include "node_agent/workers_service.h"

#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/status.h"

namespace drover {

// Longest a WaitWorkerExit may wait.
constexpr int64_t kMaxWaitMs = 60000;

WorkersService::WorkersService(std::string token, WorkerPool* pool, std::string store_socket,
                               std::string node_ip)
    : token_(std::move(token)),
      pool_(pool),
      store_socket_(std::move(store_socket)),
      node_ip_(std::move(node_ip)) {}

void WorkersService::SetNodeId(const std::string& node_id) {
  absl::MutexLock l(&mu_);
  node_id_ = node_id;
}

grpc::Status WorkersService::StartWorker(grpc::ServerContext* ctx,
                                         const proto::StartWorkerRequest* req,
                                         proto::StartWorkerReply* reply) {
  if (grpc::Status s = CheckToken(*ctx, token_); !s.ok()) return s;
  absl::StatusOr<proto::StartWorkerReply> r = pool_->StartWorker(*req);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *reply = *std::move(r);
  return grpc::Status::OK;
}

grpc::Status WorkersService::KillWorker(grpc::ServerContext* ctx, const proto::KillWorkerRequest* req,
                                        proto::KillWorkerReply*) {
  if (grpc::Status s = CheckToken(*ctx, token_); !s.ok()) return s;
  return ToGrpcStatus(pool_->KillWorker(*req));
}

grpc::Status WorkersService::RevokeLease(grpc::ServerContext* ctx,
                                         const proto::RevokeLeaseRequest* req,
                                         proto::RevokeLeaseReply*) {
  if (grpc::Status s = CheckToken(*ctx, token_); !s.ok()) return s;
  if (req->lease_id().empty()) {
    return ToGrpcStatus(absl::InvalidArgumentError("RevokeLease needs a lease id"));
  }
  return ToGrpcStatus(pool_->RevokeLease(req->lease_id(), req->reason()));
}

grpc::Status WorkersService::WaitWorkerExit(grpc::ServerContext* ctx,
                                            const proto::WaitWorkerExitRequest* req,
                                            proto::WaitWorkerExitReply* reply) {
  if (grpc::Status s = CheckToken(*ctx, token_); !s.ok()) return s;
  int64_t wait = std::clamp<int64_t>(req->wait_ms(), 0, kMaxWaitMs);
  absl::StatusOr<proto::WaitWorkerExitReply> r =
      pool_->WaitWorkerExit(req->worker_id(), absl::Milliseconds(wait));
  if (!r.ok()) return ToGrpcStatus(r.status());
  *reply = *std::move(r);
  return grpc::Status::OK;
}

grpc::Status WorkersService::DeleteObjects(grpc::ServerContext* ctx,
                                           const proto::DeleteObjectsRequest* req,
                                           proto::DeleteObjectsReply*) {
  if (grpc::Status s = CheckToken(*ctx, token_); !s.ok()) return s;
  if (store_socket_.empty()) return grpc::Status::OK;  // nothing stored here
  // The store calls run without mu_ (no lock is held across a socket call): the client
  // is thread-safe and shared.
  std::shared_ptr<object_store::Client> store;
  {
    absl::MutexLock l(&mu_);
    store = store_;
  }
  if (store == nullptr) {
    absl::StatusOr<std::unique_ptr<object_store::Client>> c = object_store::Client::Connect(
        store_socket_, object_store::ClientOptions{.reconnect_wait = absl::ZeroDuration()});
    if (!c.ok()) return ToGrpcStatus(c.status());
    store = *std::move(c);
    absl::MutexLock l(&mu_);
    if (store_ == nullptr) store_ = store;
  }
  for (const std::string& id : req->object_ids()) {
    absl::Status s = store->Delete(id);
    if (s.code() == absl::StatusCode::kUnavailable) {
      // The store restarted: reconnect next time (its objects are gone anyway).
      absl::MutexLock l(&mu_);
      if (store_ == store) store_.reset();
      break;
    }
  }
  return grpc::Status::OK;
}

grpc::Status WorkersService::DescribeNode(grpc::ServerContext* ctx, const proto::DescribeNodeRequest*,
                                          proto::DescribeNodeReply* reply) {
  if (grpc::Status s = CheckToken(*ctx, token_); !s.ok()) return s;
  absl::MutexLock l(&mu_);
  reply->set_node_id(node_id_);
  reply->set_store_socket(store_socket_);
  reply->set_node_ip(node_ip_);
  return grpc::Status::OK;
}

}  // namespace drover
