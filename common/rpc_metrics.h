// RpcMetrics: the latency and outcome of every RPC a daemon's gRPC server answers, as
// Prometheus metrics (docs/metrics.md): drover_rpc_duration_seconds{service,method}, a
// histogram from the call's arrival to its status being sent (a long poll's wait or a
// stream's life included), and drover_rpcs_total{service,method,code}.
//
// Installed as a server interceptor (no handler is touched). Labels stay bounded: the
// methods of the services registered number a few dozen; past kMaxMethods distinct
// method names (a client calling methods that do not exist) the rest count as
// method="other".
//
// Thread-safe: the interceptors run on gRPC's threads; per call they take one short
// mutex (to find the method's series) and update atomics and the histogram.
#ifndef DROVER_COMMON_RPC_METRICS_H_
#define DROVER_COMMON_RPC_METRICS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/server_interceptor.h"
#include "prometheus/counter.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace drover {

class RpcMetrics {
 public:
  static constexpr size_t kMaxMethods = 100;

  // Registers the families in `registry` (which must outlive this).
  explicit RpcMetrics(prometheus::Registry* registry);

  // For grpc::ServerBuilder::experimental().SetInterceptorCreators. The factory uses
  // this object, which must outlive the server.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> InterceptorFactory();

  // Records one finished call of `full_method` ("/drover.proto.Scheduler/SubmitJob").
  void Record(const std::string& full_method, grpc::StatusCode code, double seconds);

 private:
  struct Series {
    prometheus::Histogram* duration = nullptr;
    std::string service, method;
  };
  Series* SeriesFor(const std::string& full_method);

  prometheus::Family<prometheus::Histogram>& durations_;
  prometheus::Family<prometheus::Counter>& calls_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Series> series_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, prometheus::Counter*> counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace drover

#endif  // DROVER_COMMON_RPC_METRICS_H_
