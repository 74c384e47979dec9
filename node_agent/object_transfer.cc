#include "node_agent/object_transfer.h"

#include <utility>

#include "grpcpp/support/channel_arguments.h"

namespace drover {

ObjectTransfer::ObjectTransfer(ObjectTransferOptions options, LocalObjects* local)
    : server_(options, local, &node_), puller_(options, local, &node_) {}

ObjectTransfer::~ObjectTransfer() { Shutdown(); }

void ObjectTransfer::SetNodeId(const std::string& node_id) { node_.Set(node_id); }

void ObjectTransfer::Shutdown() {
  server_.Shutdown();
  puller_.Shutdown();
}

ObjectTransferStats ObjectTransfer::stats() {
  ObjectTransferStats out = puller_.stats();
  const ObjectTransferStats served = server_.stats();
  out.reads_started = served.reads_started;
  out.reads_completed = served.reads_completed;
  out.bytes_served = served.bytes_served;
  out.raw_reads = served.raw_reads;
  return out;
}

void ObjectTransfer::ConfigureServer(grpc::ServerBuilder* builder) {
  // Pullers ping every keepalive_time while a stream is stalled; without these the
  // server counts those pings as abuse and closes the connection.
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
}

}  // namespace drover
