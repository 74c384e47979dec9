// The Prometheus side of a daemon's HttpServer: GET /metrics answers with everything
// `registry` collects, in the text exposition format (version 0.0.4).
#ifndef DROVER_COMMON_METRICS_HTTP_H_
#define DROVER_COMMON_METRICS_HTTP_H_

#include <memory>

#include "common/http_server.h"
#include "prometheus/registry.h"

namespace drover {

// Adds the /metrics route. `registry` is shared with the code that updates the metrics
// (prometheus::Registry is thread-safe); the collection runs on the HTTP thread.
void ServeMetrics(HttpServer* server, std::shared_ptr<prometheus::Registry> registry);

}  // namespace drover

#endif  // DROVER_COMMON_METRICS_HTTP_H_
