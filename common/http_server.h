// HttpServer: a daemon's small HTTP/1.1 server (cpp-httplib), for Prometheus' /metrics
// on the scheduler and every agent, and the scheduler's dashboard.
//
// Every route is behind the cluster token: a request is let through only if it
// carries the token in an `Authorization: Bearer <token>` or `x-drover-token` header
// (what Prometheus' `authorization` scrape setting and curl send), or if an extra check
// given by the owner accepts it (the dashboard's session cookie). Anything else gets
// 401 before any handler runs; the token never travels in a URL.
//
// In a TLS cluster it serves HTTPS with the daemon's own certificate (the cluster CA
// signed it for the name "drover": scrapers check it with the CA and that server
// name); a plain-text request to it then fails in the handshake.
//
// Threading: handlers run on a fixed pool of `threads` threads of the server; Start
// returns once the socket listens, Stop closes it and joins the pool. Routes are added
// before Start. Keep handlers short: a slow one holds a pool thread.
#ifndef DROVER_COMMON_HTTP_SERVER_H_
#define DROVER_COMMON_HTTP_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "httplib.h"

namespace drover {

// The daemon's certificate and key (PEM files) for HTTPS; empty: plain HTTP.
struct HttpsFiles {
  std::string cert;
  std::string key;
};

class HttpServer {
 public:
  // Extra ways in besides the token header (e.g. a session cookie); may be empty.
  using Authorizer = std::function<bool(const httplib::Request&)>;

  explicit HttpServer(std::string token, int threads = 4, HttpsFiles https = {});
  // Calls Stop().
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Requests that match `public_path` exactly (a login page) skip the token check.
  void SetAuthorizer(Authorizer also_allowed);
  void AddPublicPath(const std::string& path);
  // Where routes are added (Get, Post, ...). REQUIRES: before Start.
  httplib::Server& routes() { return *server_; }
  bool https() const { return !https_.cert.empty(); }
  // "https" or "http", for the URLs the daemon prints.
  const char* scheme() const { return https() ? "https" : "http"; }

  // Listens on `bind_ip`:`port` (0: a free port) and serves on a thread of its own.
  // Returns the port. UNAVAILABLE naming the address when it cannot listen.
  absl::StatusOr<int> Start(const std::string& bind_ip, int port);
  // Stops serving and joins the threads. Idempotent.
  void Stop();

  // True if `req` carries `token` in one of the two headers (constant-time compare).
  static bool CarriesToken(const httplib::Request& req, const std::string& token);

 private:
  const std::string token_;
  Authorizer also_allowed_;
  std::vector<std::string> public_paths_;
  const HttpsFiles https_;
  std::unique_ptr<httplib::Server> server_;  // an httplib::SSLServer with HTTPS
  std::thread thread_;
};

// "host:port" for an HTTP base URL: IPv6 hosts in brackets.
std::string HttpHostPort(const std::string& host, int port);

}  // namespace drover

#endif  // DROVER_COMMON_HTTP_SERVER_H_
