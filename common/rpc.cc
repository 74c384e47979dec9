#include "common/rpc.h"

#include "common/auth.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace drover {

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address) {
  return MakeChannel(address, *ProcessTransport());
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const TransportSecurity& security) {
  grpc::ChannelArguments args;
  // Reconnect soon after a restarted peer comes back instead of backing off to minutes.
  // Not GRPC_ARG_MIN_RECONNECT_BACKOFF_MS: gRPC also takes it as the minimum connect
  // timeout, and at 100 ms a loaded machine failed handshakes ("connection attempt timed
  // out before receiving SETTINGS frame"); the default connect timeout is 20 s.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Distinct channels per target, so one dead peer cannot stall another.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetMaxReceiveMessageSize(64 << 20);
  return MakeCustomChannel(address, std::move(args), security);
}

std::shared_ptr<grpc::Channel> MakeCustomChannel(const std::string& address,
                                                 grpc::ChannelArguments args,
                                                 const TransportSecurity& security) {
  security.ApplyChannelArgs(&args);
  return grpc::CreateCustomChannel(address, security.ChannelCredentials(), args);
}

void AddListeningPort(grpc::ServerBuilder* builder, const std::string& address,
                      int* selected_port) {
  builder->AddListeningPort(address, ProcessTransport()->ServerCredentials(), selected_port);
}

void PrepareContext(grpc::ClientContext* ctx, const std::string& token,
                    std::chrono::milliseconds timeout) {
  ctx->AddMetadata(kTokenMetadataKey, token);
  ctx->set_deadline(std::chrono::system_clock::now() + timeout);
}

}  // namespace drover
