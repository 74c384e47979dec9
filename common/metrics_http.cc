#include "common/metrics_http.h"

#include "prometheus/text_serializer.h"

namespace drover {
namespace {

class ScrapeSource : public prometheus::Collectable {
 public:
  ScrapeSource(std::function<void(ScrapeFamilies*)> fill, std::function<MetricLabels()> common)
      : fill_(std::move(fill)), common_(std::move(common)) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    ScrapeFamilies families(common_ ? common_() : MetricLabels{});
    fill_(&families);
    return families.Take();
  }

 private:
  const std::function<void(ScrapeFamilies*)> fill_;
  const std::function<MetricLabels()> common_;
};

prometheus::MetricFamily Family(const std::string& name, const std::string& help,
                                prometheus::MetricType type) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  return f;
}

}  // namespace

ScrapeFamilies& ScrapeFamilies::Gauge(const std::string& name, const std::string& help) {
  families_.push_back(Family(name, help, prometheus::MetricType::Gauge));
  return *this;
}

ScrapeFamilies& ScrapeFamilies::Counter(const std::string& name, const std::string& help) {
  families_.push_back(Family(name, help, prometheus::MetricType::Counter));
  return *this;
}

ScrapeFamilies& ScrapeFamilies::Add(double value, const MetricLabels& labels) {
  if (families_.empty()) return *this;
  prometheus::MetricFamily& f = families_.back();
  prometheus::ClientMetric m;
  for (const auto& [k, v] : common_) m.label.push_back({k, v});
  for (const auto& [k, v] : labels) m.label.push_back({k, v});
  if (f.type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(std::move(m));
  return *this;
}

std::shared_ptr<prometheus::Collectable> CollectAtScrape(std::function<void(ScrapeFamilies*)> fill,
                                                         MetricLabels common) {
  return std::make_shared<ScrapeSource>(std::move(fill),
                                        [common = std::move(common)] { return common; });
}

std::shared_ptr<prometheus::Collectable> CollectAtScrape(std::function<void(ScrapeFamilies*)> fill,
                                                         std::function<MetricLabels()> common) {
  return std::make_shared<ScrapeSource>(std::move(fill), std::move(common));
}

void ServeMetrics(HttpServer* server,
                  std::vector<std::shared_ptr<prometheus::Collectable>> sources) {
  server->routes().Get("/metrics", [sources = std::move(sources)](const httplib::Request&,
                                                                    httplib::Response& res) {
    std::vector<prometheus::MetricFamily> all;
    for (const auto& s : sources) {
      auto families = s->Collect();
      all.insert(all.end(), std::make_move_iterator(families.begin()),
                 std::make_move_iterator(families.end()));
    }
    res.set_content(prometheus::TextSerializer().Serialize(all),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
}

}  // namespace drover
