// Client-side RPC helpers: channels and per-call contexts that always carry the
// cluster token and a deadline.
#ifndef DROVER_COMMON_RPC_H_
#define DROVER_COMMON_RPC_H_

#include <chrono>
#include <memory>
#include <string>

#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"

namespace drover {

// Default deadline for unary calls between components.
inline constexpr std::chrono::milliseconds kDefaultRpcTimeout{5000};

// An insecure channel to host:port (the token authenticates; traffic stays on the
// operator's network). Reconnects quickly after a peer restarts.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address);

// Fills `ctx` with the token and a deadline `timeout` from now.
void PrepareContext(grpc::ClientContext* ctx, const std::string& token,
                    std::chrono::milliseconds timeout = kDefaultRpcTimeout);

}  // namespace drover

#endif  // DROVER_COMMON_RPC_H_
