// The ObjectTransfer gRPC service (sync API): token check, request validation, and a
// hand-off to ObjectTransfer. Registered on the node agent's server next to
// AgentService. With no ObjectTransfer (the node runs no object store) every rpc
// answers FAILED_PRECONDITION.
//
// Thread-safe; the ObjectTransfer, if any, must outlive the service.
#ifndef DROVER_NODE_AGENT_OBJECT_TRANSFER_SERVICE_H_
#define DROVER_NODE_AGENT_OBJECT_TRANSFER_SERVICE_H_

#include <string>

#include "absl/time/time.h"
#include "node_agent/object_transfer.h"
#include "proto/node_agent.grpc.pb.h"

namespace drover {

class ObjectTransferService final : public proto::ObjectTransfer::Service {
 public:
  // Upper bound for a FetchObject that sets neither timeout_ms nor a call deadline.
  static constexpr absl::Duration kMaxFetchWait = absl::Minutes(10);

  // `transfer` may be null: this node runs no object store.
  ObjectTransferService(std::string token, ObjectTransfer* transfer);

  // ReadObject is served by RawReadObject (registered in the constructor): its
  // ObjectChunks are written as raw grpc::ByteBuffers that point into the pinned object.
  grpc::Status FetchObject(grpc::ServerContext* ctx, const proto::FetchObjectRequest* req,
                           proto::FetchObjectReply* reply) override;
  grpc::Status GetFetchProgress(grpc::ServerContext* ctx,
                                const proto::GetFetchProgressRequest* req,
                                proto::GetFetchProgressReply* reply) override;

 private:
  grpc::Status RawReadObject(
      grpc::ServerContext* ctx,
      grpc::ServerSplitStreamer<proto::ReadObjectRequest, grpc::ByteBuffer>* stream);

  const std::string token_;
  ObjectTransfer* const transfer_;
};

}  // namespace drover

#endif  // DROVER_NODE_AGENT_OBJECT_TRANSFER_SERVICE_H_
