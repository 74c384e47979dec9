#include "sdk/runtime/seams_grpc.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/exit_text.h"
#include "common/rpc.h"
#include "common/status.h"
#include "common/status_macros.h"

namespace drover::internal {
namespace {

// Beyond the wait the scheduler may hold a call: the RPC's own slack.
constexpr int64_t kLeaseSlackMs = 10000;
constexpr int64_t kCreateActorMs = 30000;
constexpr int64_t kGetActorSlackMs = 5000;

}  // namespace

absl::Status GrpcScheduler::RequestLease(const proto::RequestLeaseRequest& req,
                                         proto::RequestLeaseReply* reply) {
  grpc::ClientContext cctx;
  PrepareContext(&cctx, ctx_->token, std::chrono::milliseconds(req.wait_ms() + kLeaseSlackMs));
  {
    absl::MutexLock l(&mu_);
    if (cancelled_) return absl::CancelledError("the runtime is shutting down");
    calls_.insert(&cctx);
  }
  absl::Status s = FromGrpcStatus(ctx_->leases->RequestLease(&cctx, req, reply));
  {
    absl::MutexLock l(&mu_);
    calls_.erase(&cctx);
  }
  return s;
}

void GrpcScheduler::ReturnLease(const std::string& lease_id, const std::string& reason) {
  grpc::ClientContext rctx;
  PrepareContext(&rctx, ctx_->token);
  proto::ReturnWorkerLeaseRequest rr;
  rr.set_lease_id(lease_id);
  rr.set_reason(reason);
  proto::ReturnWorkerLeaseReply rrep;
  ctx_->leases->ReturnLease(&rctx, rr, &rrep);
}

void GrpcScheduler::CancelAll() {
  absl::MutexLock l(&mu_);
  cancelled_ = true;
  // TryCancel only marks the call: it runs no callback of ours, so holding mu_ is safe.
  for (grpc::ClientContext* c : calls_) c->TryCancel();
}

absl::Status GrpcScheduler::CreateActor(const proto::CreateActorRequest& req,
                                        proto::CreateActorReply* reply) {
  grpc::ClientContext cctx;
  PrepareContext(&cctx, ctx_->token, std::chrono::milliseconds(kCreateActorMs));
  return FromGrpcStatus(ctx_->leases->CreateActor(&cctx, req, reply));
}

absl::Status GrpcScheduler::GetActor(const proto::GetActorRequest& req,
                                     proto::GetActorReply* reply) {
  grpc::ClientContext cctx;
  PrepareContext(&cctx, ctx_->token, std::chrono::milliseconds(req.wait_ms() + kGetActorSlackMs));
  return FromGrpcStatus(ctx_->leases->GetActor(&cctx, req, reply));
}

absl::Status GrpcScheduler::KillActor(const proto::KillActorRequest& req,
                                      proto::KillActorReply* reply) {
  grpc::ClientContext cctx;
  PrepareContext(&cctx, ctx_->token);
  return FromGrpcStatus(ctx_->leases->KillActor(&cctx, req, reply));
}

absl::StatusOr<std::unique_ptr<FramedSocket>> SocketWorkerConnector::Connect(
    const std::string& node_id, const std::string& unix_path, const std::string& tcp_address,
    const std::string& lease_id, const std::string& actor_id) {
  absl::StatusOr<std::unique_ptr<FramedSocket>> sock =
      absl::UnavailableError("the worker has no address");
  if (node_id == ctx_->node_id && !unix_path.empty()) sock = FramedSocket::ConnectUnix(unix_path);
  if (!sock.ok() && !tcp_address.empty()) {
    sock = FramedSocket::ConnectTcp(tcp_address, *ctx_->transport);
  }
  if (!sock.ok()) return sock.status();
  proto::TaskFrame hello;
  hello.mutable_hello()->set_token(ctx_->token);
  hello.mutable_hello()->set_lease_id(lease_id);
  hello.mutable_hello()->set_actor_id(actor_id);
  hello.mutable_hello()->set_caller(ctx_->owner);
  DROVER_RETURN_IF_ERROR((*sock)->Send(hello));
  proto::TaskFrame reply;
  DROVER_RETURN_IF_ERROR((*sock)->Read(&reply));
  if (!reply.has_hello_reply()) {
    return absl::UnavailableError("the worker did not answer the hello (not a drover worker?)");
  }
  if (reply.hello_reply().code() != static_cast<int>(absl::StatusCode::kOk)) {
    return absl::Status(static_cast<absl::StatusCode>(reply.hello_reply().code()),
                        reply.hello_reply().message());
  }
  return sock;
}

std::string GrpcWorkerAgents::DescribeExit(const std::string& agent_address,
                                           const std::string& worker_id, absl::Duration wait) {
  if (agent_address.empty() || worker_id.empty()) return "";
  proto::Workers::Stub* stub = ctx_->store->WorkersAt(agent_address);
  grpc::ClientContext cctx;
  PrepareContext(&cctx, ctx_->token,
                 std::chrono::milliseconds(absl::ToInt64Milliseconds(wait + absl::Seconds(2))));
  proto::WaitWorkerExitRequest req;
  req.set_worker_id(worker_id);
  req.set_wait_ms(absl::ToInt64Milliseconds(wait));
  proto::WaitWorkerExitReply reply;
  grpc::Status s = stub->WaitWorkerExit(&cctx, req, &reply);
  if (!s.ok()) return absl::StrCat("its agent could not say how (", s.error_message(), ")");
  if (!reply.exited()) return "";
  return ::drover::DescribeExit(reply.exit());
}

absl::Status GrpcWorkerAgents::KillWorker(const std::string& agent_address,
                                          const std::string& worker_id, const std::string& reason) {
  proto::Workers::Stub* stub = ctx_->store->WorkersAt(agent_address);
  grpc::ClientContext cctx;
  PrepareContext(&cctx, ctx_->token);
  proto::KillWorkerRequest req;
  req.set_worker_id(worker_id);
  req.set_reason(reason);
  proto::KillWorkerReply reply;
  return FromGrpcStatus(stub->KillWorker(&cctx, req, &reply));
}

void GrpcWorkerAgents::NoteAgent(const std::string& node_id, const std::string& agent_address) {
  ctx_->store->NoteAgent(node_id, agent_address);
}

OwnerIdentity IdentityOf(RuntimeContext* ctx) {
  OwnerIdentity id;
  id.job_id = ctx->job_id;
  id.owner = ctx->owner;
  id.owner_tag = ctx->owner_tag;
  id.package = ctx->package;
  id.new_id = [ctx] { return ctx->NewObjectId(); };
  return id;
}

}  // namespace drover::internal
