#include "common/metrics_http.h"

#include "prometheus/text_serializer.h"

namespace drover {

void ServeMetrics(HttpServer* server, std::shared_ptr<prometheus::Registry> registry) {
  server->routes().Get("/metrics", [registry](const httplib::Request&, httplib::Response& res) {
    res.set_content(prometheus::TextSerializer().Serialize(registry->Collect()),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
}

}  // namespace drover
