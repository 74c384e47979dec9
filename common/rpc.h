// RPC helpers: channels and per-call contexts that always carry the cluster token and
// a deadline, and listening ports. Every channel and server port of drover is made
// here, secured as the process's transport says (common/tls.h: TLS or plain text).
#ifndef DROVER_COMMON_RPC_H_
#define DROVER_COMMON_RPC_H_

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/channel.h"
#include "common/tls.h"
#include "grpcpp/client_context.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/channel_arguments.h"

namespace drover {

// Default deadline for unary calls between components.
inline constexpr std::chrono::milliseconds kDefaultRpcTimeout{5000};

// A channel to host:port, secured as `security` says (ProcessTransport() by default).
// Reconnects quickly after a peer restarts.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address);
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const TransportSecurity& security);
// The same with the caller's own channel arguments (which replace MakeChannel's).
std::shared_ptr<grpc::Channel> MakeCustomChannel(const std::string& address,
                                                 grpc::ChannelArguments args,
                                                 const TransportSecurity& security);

// Adds a listening port at `address` ("ip:port", port 0 for any) to `builder`,
// secured as ProcessTransport() says; `*selected_port` is set when the server starts.
void AddListeningPort(grpc::ServerBuilder* builder, const std::string& address,
                      int* selected_port);

// How much later than a call's own wait (a `timeout_ms` the server honours) its gRPC
// deadline is set, so that the server's answer, which names what it waited for, comes
// before gRPC's bare "Deadline Exceeded" even on a loaded machine.
inline constexpr std::chrono::milliseconds kServerAnswerGrace{5000};

// Fills `ctx` with the token and a deadline `timeout` from now.
void PrepareContext(grpc::ClientContext* ctx, const std::string& token,
                    std::chrono::milliseconds timeout = kDefaultRpcTimeout);

// One stub of `Service` per address (and so one channel each), made on first use and
// kept for the cache's life. Thread-safe; stubs stay valid as long as the cache.
template <typename Service>
class StubCache {
 public:
  typename Service::Stub* Get(const std::string& address) {
    absl::MutexLock lock(&mu_);
    auto& stub = stubs_[address];
    if (stub == nullptr) stub = Service::NewStub(MakeChannel(address));
    return stub.get();
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<typename Service::Stub>> stubs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace drover

#endif  // DROVER_COMMON_RPC_H_
