#include "common/rpc_metrics.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/status_code.h"

namespace drover {
namespace {

class TimingInterceptor : public grpc::experimental::Interceptor {
 public:
  TimingInterceptor(RpcMetrics* metrics, const char* method)
      : metrics_(metrics), method_(method), start_(std::chrono::steady_clock::now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start_;
      metrics_->Record(method_, methods->GetSendStatus().error_code(), took.count());
    }
    methods->Proceed();
  }

 private:
  RpcMetrics* const metrics_;
  const std::string method_;
  const std::chrono::steady_clock::time_point start_;
};

class Factory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit Factory(RpcMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new TimingInterceptor(metrics_, info->method());
  }

 private:
  RpcMetrics* const metrics_;
};

}  // namespace

RpcMetrics::RpcMetrics(prometheus::Registry* registry)
    : durations_(prometheus::BuildHistogram()
                     .Name("drover_rpc_duration_seconds")
                     .Help("Time from an RPC's arrival to its status being sent, by service "
                           "and method (long polls and streams included).")
                     .Register(*registry)),
      calls_(prometheus::BuildCounter()
                 .Name("drover_rpcs_total")
                 .Help("RPCs answered, by service, method and status code.")
                 .Register(*registry)) {}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
RpcMetrics::InterceptorFactory() {
  return std::make_unique<Factory>(this);
}

RpcMetrics::Series* RpcMetrics::SeriesFor(const std::string& full_method) {
  auto it = series_.find(full_method);
  if (it != series_.end()) return &it->second;
  if (series_.size() >= kMaxMethods) {
    if (full_method != "other") return SeriesFor("other");
  }
  Series s;
  // "/drover.proto.Scheduler/SubmitJob" -> service "Scheduler", method "SubmitJob".
  const size_t slash = full_method.rfind('/');
  s.method = slash == std::string::npos ? full_method : full_method.substr(slash + 1);
  std::string service = slash == std::string::npos ? "" : full_method.substr(0, slash);
  const size_t dot = service.rfind('.');
  s.service = dot == std::string::npos ? service.substr(service.empty() ? 0 : 1)
                                       : service.substr(dot + 1);
  if (full_method == "other") s.service = "other";
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
      0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30,    60};
  s.duration = &durations_.Add({{"service", s.service}, {"method", s.method}}, kBuckets);
  return &series_.emplace(full_method, std::move(s)).first->second;
}

void RpcMetrics::Record(const std::string& full_method, grpc::StatusCode code, double seconds) {
  prometheus::Histogram* duration;
  prometheus::Counter* calls;
  {
    absl::MutexLock lock(&mu_);
    Series* s = SeriesFor(full_method);
    duration = s->duration;
    const std::string code_name =
        absl::StatusCodeToString(StatusCodeFromWire(static_cast<int32_t>(code)));
    prometheus::Counter*& c = counters_[absl::StrCat(s->service, "/", s->method, "/", code_name)];
    if (c == nullptr) {
      c = &calls_.Add({{"service", s->service}, {"method", s->method}, {"code", code_name}});
    }
    calls = c;
  }
  duration->Observe(seconds);
  calls->Increment();
}

}  // namespace drover
