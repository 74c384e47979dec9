#include "node_agent/object_transfer_service.h"

#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/status.h"
#include "grpcpp/support/method_handler.h"

namespace drover {
namespace {

grpc::Status NoStore() {
  return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                      "this node runs no object store (start the agent with one to serve or "
                      "fetch objects)");
}

// What FetchObject and GetFetchProgress check first: the token, a store here, an id.
grpc::Status Admit(const grpc::ServerContext& ctx, const std::string& token, bool has_store,
                   const std::string& object_id, const char* rpc) {
  if (grpc::Status s = CheckToken(ctx, token); !s.ok()) return s;
  if (!has_store) return NoStore();
  if (object_id.empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat(rpc, " needs an object id"));
  }
  return grpc::Status::OK;
}

}  // namespace

ObjectTransferService::ObjectTransferService(std::string token, ObjectTransfer* transfer)
    : token_(std::move(token)), transfer_(transfer) {
  // Method 0 is ReadObject (the order of proto/node_agent.proto). Served as a
  // "split streaming" method: one request read, then raw ByteBuffer writes.
  MarkMethodStreamed(
      0, new grpc::internal::SplitServerStreamingHandler<proto::ReadObjectRequest,
                                                         grpc::ByteBuffer>(
             [this](grpc::ServerContext* ctx,
                    grpc::ServerSplitStreamer<proto::ReadObjectRequest, grpc::ByteBuffer>*
                        stream) { return RawReadObject(ctx, stream); }));
}

grpc::Status ObjectTransferService::RawReadObject(
    grpc::ServerContext* ctx,
    grpc::ServerSplitStreamer<proto::ReadObjectRequest, grpc::ByteBuffer>* stream) {
  if (grpc::Status s = CheckToken(*ctx, token_); !s.ok()) return s;
  if (transfer_ == nullptr) return NoStore();
  proto::ReadObjectRequest req;
  if (!stream->Read(&req)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "ReadObject: no request");
  }
  if (req.object_id().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "ReadObject needs an object id");
  }
  return ToGrpcStatus(transfer_->ServeRead(
      req,
      [stream](grpc::ByteBuffer* chunk, bool write_through) {
        grpc::WriteOptions options;
        if (write_through) options.set_write_through();
        return stream->Write(*chunk, options);
      },
      [ctx] { return ctx->IsCancelled(); }));
}

grpc::Status ObjectTransferService::FetchObject(grpc::ServerContext* ctx,
                                                const proto::FetchObjectRequest* req,
                                                proto::FetchObjectReply* reply) {
  if (grpc::Status s = Admit(*ctx, token_, transfer_ != nullptr, req->object_id(), "FetchObject");
      !s.ok()) {
    return s;
  }
  if (req->timeout_ms() < 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "FetchObject: timeout_ms must be >= 0");
  }
  absl::Time now = absl::Now();
  absl::Time deadline = std::min(absl::FromChrono(ctx->deadline()), now + kMaxFetchWait);
  if (req->timeout_ms() > 0) {
    deadline = std::min(deadline, now + absl::Milliseconds(req->timeout_ms()));
  }
  auto r = transfer_->Fetch(req->object_id(), deadline, req->wait_for_holder());
  if (!r.ok()) return ToGrpcStatus(r.status());
  reply->set_size(r->size);
  reply->set_source_node(r->source_node);
  return grpc::Status::OK;
}

grpc::Status ObjectTransferService::GetFetchProgress(grpc::ServerContext* ctx,
                                                     const proto::GetFetchProgressRequest* req,
                                                     proto::GetFetchProgressReply* reply) {
  if (grpc::Status s =
          Admit(*ctx, token_, transfer_ != nullptr, req->object_id(), "GetFetchProgress");
      !s.ok()) {
    return s;
  }
  std::optional<ObjectPuller::Progress> p = transfer_->PullProgress(req->object_id());
  reply->set_pulling(p.has_value());
  if (p) {
    reply->set_received_bytes(p->received_bytes);
    reply->set_total_bytes(p->total_bytes);
    reply->set_source_node(p->source_node);
  }
  return grpc::Status::OK;
}

}  // namespace drover
