#include "tests/util/prometheus_text.h"

#include <cctype>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "httplib.h"
#include "openssl/pem.h"
#include "openssl/x509.h"

namespace drover::testing {
namespace {

bool ValidName(const std::string& s, bool label) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool ok = std::isalpha(static_cast<unsigned char>(c)) || c == '_' ||
                    (!label && c == ':') || (i > 0 && std::isdigit(static_cast<unsigned char>(c)));
    if (!ok) return false;
  }
  return true;
}

// The family a sample belongs to (histograms' _bucket, _sum, _count).
std::string FamilyOf(const std::string& name, const std::map<std::string, std::string>& types) {
  if (types.count(name)) return name;
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string s = suffix;
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
      std::string base = name.substr(0, name.size() - s.size());
      if (types.count(base)) return base;
    }
  }
  return "";
}

absl::Status Bad(int line, const std::string& text, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("line ", line, " (", text, "): ", why));
}

}  // namespace

double Exposition::Sum(const std::string& name,
                       const std::map<std::string, std::string>& labels) const {
  double sum = 0;
  bool any = false;
  for (const Sample& s : samples) {
    if (s.name != name) continue;
    bool match = true;
    for (const auto& [k, v] : labels) {
      auto it = s.labels.find(k);
      match = match && it != s.labels.end() && it->second == v;
    }
    if (!match) continue;
    sum += s.value;
    any = true;
  }
  return any ? sum : -1;
}

absl::StatusOr<Exposition> ParseExposition(const std::string& text) {
  Exposition out;
  int n = 0;
  for (absl::string_view line_view : absl::StrSplit(text, '\n')) {
    ++n;
    const std::string line(line_view);
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::vector<std::string> f = absl::StrSplit(line, absl::MaxSplits(' ', 3));
      if (f.size() < 3 || (f[1] != "HELP" && f[1] != "TYPE")) continue;  // a plain comment
      if (!ValidName(f[2], false)) return Bad(n, line, "bad metric name");
      if (f[1] == "TYPE") {
        static const std::vector<std::string> kTypes = {"counter", "gauge", "histogram",
                                                        "summary", "untyped"};
        if (f.size() != 4 || std::find(kTypes.begin(), kTypes.end(), f[3]) == kTypes.end()) {
          return Bad(n, line, "bad TYPE");
        }
        out.types[f[2]] = f[3];
      }
      continue;
    }
    Sample s;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    s.name = line.substr(0, i);
    if (!ValidName(s.name, false)) return Bad(n, line, "bad metric name");
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        size_t eq = line.find('=', i);
        if (eq == std::string::npos || eq + 1 >= line.size() || line[eq + 1] != '"') {
          return Bad(n, line, "bad label");
        }
        std::string key = line.substr(i, eq - i);
        if (!ValidName(key, true)) return Bad(n, line, "bad label name");
        std::string value;
        size_t j = eq + 2;
        for (; j < line.size() && line[j] != '"'; ++j) {
          if (line[j] == '\\' && j + 1 < line.size()) {
            ++j;
            value.push_back(line[j] == 'n' ? '\n' : line[j]);
          } else {
            value.push_back(line[j]);
          }
        }
        if (j >= line.size()) return Bad(n, line, "unterminated label value");
        s.labels[key] = value;
        i = j + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size()) return Bad(n, line, "unterminated labels");
      ++i;
    }
    std::vector<std::string> rest = absl::StrSplit(line.substr(i), ' ', absl::SkipEmpty());
    if (rest.empty() || rest.size() > 2) return Bad(n, line, "expected a value");
    if (rest[0] == "+Inf" || rest[0] == "-Inf" || rest[0] == "NaN") {
      s.value = rest[0] == "NaN" ? 0 : (rest[0] == "+Inf" ? 1e308 : -1e308);
    } else if (!absl::SimpleAtod(rest[0], &s.value)) {
      return Bad(n, line, "value is not a number");
    }
    if (FamilyOf(s.name, out.types).empty()) return Bad(n, line, "sample before its TYPE line");
    out.samples.push_back(std::move(s));
  }
  return out;
}

HttpGetResult HttpGet(const std::string& host_port, const std::string& path,
                      const std::map<std::string, std::string>& headers,
                      const std::string& ca_file) {
  // HTTPS: connect to the name the cluster's certificates carry ("drover"), mapped to
  // the daemon's host, so that the check of the name passes as Prometheus' does with
  // `server_name: drover`.
  const size_t colon = host_port.rfind(':');
  const std::string host = host_port.substr(0, colon);
  const std::string base =
      ca_file.empty() ? "http://" + host_port : "https://drover" + host_port.substr(colon);
  HttpGetResult out;
  out.url = base + path;
  httplib::Client client(base);
  if (!ca_file.empty()) {
    client.set_hostname_addr_map({{"drover", host}});
    // (httplib 0.11's set_ca_cert_path fails to load it here: SSLLoadingCerts.)
    X509_STORE* store = X509_STORE_new();
    if (BIO* bio = BIO_new_file(ca_file.c_str(), "r")) {
      while (X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
        X509_STORE_add_cert(store, cert);
        X509_free(cert);
      }
      BIO_free(bio);
    }
    client.set_ca_cert_store(store);  // owned by the client
    client.enable_server_certificate_verification(true);
  }
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(10, 0);
  httplib::Headers h(headers.begin(), headers.end());
  auto res = client.Get(path.c_str(), h);
  if (!res) {
    out.status = absl::UnavailableError(absl::StrCat("GET ", out.url, " (", host_port,
                                                     "): ", httplib::to_string(res.error())));
    return out;
  }
  out.code = res->status;
  out.body = res->body;
  for (const auto& [k, v] : res->headers) out.headers.emplace(k, v);
  return out;
}

absl::StatusOr<Exposition> Scrape(const std::string& host_port, const std::string& token,
                                  const std::string& ca_file) {
  HttpGetResult r = HttpGet(host_port, "/metrics", {{"Authorization", "Bearer " + token}}, ca_file);
  if (!r.status.ok()) return r.status;
  if (r.code != 200) {
    return absl::FailedPreconditionError(absl::StrCat("GET ", r.url, ": HTTP ", r.code, ": ", r.body));
  }
  return ParseExposition(r.body);
}

}  // namespace drover::testing
