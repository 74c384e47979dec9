// A strict reader of the Prometheus text exposition format (version 0.0.4), for tests
// that scrape /metrics: every line must be a HELP or TYPE comment, blank, or a sample
// `name{label="value",...} number`, with names and labels as the format allows and each
// sample's family announced by a TYPE line before it.
#ifndef DROVER_TESTS_UTIL_PROMETHEUS_TEXT_H_
#define DROVER_TESTS_UTIL_PROMETHEUS_TEXT_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace drover::testing {

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct Exposition {
  std::vector<Sample> samples;
  std::map<std::string, std::string> types;  // family -> counter, gauge, histogram, ...

  // The sum of the samples named `name` whose labels include all of `labels`; -1 if
  // there is none.
  double Sum(const std::string& name, const std::map<std::string, std::string>& labels = {}) const;
};

// INVALID_ARGUMENT naming the line that breaks the format.
absl::StatusOr<Exposition> ParseExposition(const std::string& text);

// A GET of http://`host_port``path` (with `ca_file`, a TLS cluster's CA: https://,
// checking the daemon's certificate against it and the name "drover"). `status` is
// not OK only if no answer came.
struct HttpGetResult {
  absl::Status status;
  std::string url;
  int code = 0;
  std::string body;
  std::multimap<std::string, std::string> headers;
};
HttpGetResult HttpGet(const std::string& host_port, const std::string& path,
                      const std::map<std::string, std::string>& headers,
                      const std::string& ca_file = "");

// GETs http://`host_port`/metrics with the token and parses it; with `ca_file` (a TLS
// cluster's CA), https:// instead, checking the daemon's certificate against it.
absl::StatusOr<Exposition> Scrape(const std::string& host_port, const std::string& token,
                                  const std::string& ca_file = "");

}  // namespace drover::testing

#endif  // DROVER_TESTS_UTIL_PROMETHEUS_TEXT_H_
