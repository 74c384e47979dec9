// The Prometheus side of a daemon's HttpServer: GET /metrics answers with everything
// its sources collect, in the text exposition format (version 0.0.4).
//
// Two kinds of source: a prometheus::Registry of counters and histograms that the code
// updates as things happen (atomic adds; a histogram's own short mutex), and figures
// read at scrape time from a snapshot of the daemon's state (nodes, jobs, workers, the
// object store), built with ScrapeFamilies so that nothing is kept between scrapes and
// label sets that are gone (a removed node) vanish at once.
#ifndef DROVER_COMMON_METRICS_HTTP_H_
#define DROVER_COMMON_METRICS_HTTP_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/http_server.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"

namespace drover {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// Metric families made at scrape time. Not thread-safe (one per scrape).
class ScrapeFamilies {
 public:
  // `common` labels go on every sample (an agent's node).
  explicit ScrapeFamilies(MetricLabels common = {}) : common_(std::move(common)) {}
  // Starts a family; the Add calls that follow go to it.
  ScrapeFamilies& Gauge(const std::string& name, const std::string& help);
  ScrapeFamilies& Counter(const std::string& name, const std::string& help);
  ScrapeFamilies& Add(double value, const MetricLabels& labels = {});
  std::vector<prometheus::MetricFamily> Take() { return std::move(families_); }

 private:
  MetricLabels common_;
  std::vector<prometheus::MetricFamily> families_;
};

// A source whose families `fill` makes at every scrape (on the HTTP thread).
std::shared_ptr<prometheus::Collectable> CollectAtScrape(
    std::function<void(ScrapeFamilies*)> fill, MetricLabels common = {});
// The same with the common labels read at every scrape (an agent's node id, known once
// it has registered).
std::shared_ptr<prometheus::Collectable> CollectAtScrape(
    std::function<void(ScrapeFamilies*)> fill, std::function<MetricLabels()> common);

// Adds the /metrics route over `sources` (registries and CollectAtScrape sources),
// shared with the code that updates them.
void ServeMetrics(HttpServer* server,
                  std::vector<std::shared_ptr<prometheus::Collectable>> sources);

}  // namespace drover

#endif  // DROVER_COMMON_METRICS_HTTP_H_
