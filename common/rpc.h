// Client-side RPC helpers: channels and per-call contexts that always carry the
// cluster token and a deadline.
#ifndef DROVER_COMMON_RPC_H_
#define DROVER_COMMON_RPC_H_

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
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
