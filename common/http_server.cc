#include "common/http_server.h"

#include <sys/socket.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/log.h"

namespace drover {

HttpServer::HttpServer(std::string token, int threads, HttpsFiles https)
    : token_(std::move(token)),
      https_(std::move(https)),
      server_(this->https() ? std::unique_ptr<httplib::Server>(std::make_unique<httplib::SSLServer>(
                                  https_.cert.c_str(), https_.key.c_str()))
                            : std::make_unique<httplib::Server>()) {
  server_->new_task_queue = [threads] {
    return new httplib::ThreadPool(static_cast<size_t>(std::max(1, threads)));
  };
  // A browser keeps connections open and each one holds a pool thread while it idles:
  // let idle ones go soon, so a few tabs and a scraper never starve each other.
  server_->set_keep_alive_timeout(1);
  server_->set_read_timeout(5, 0);
  server_->set_write_timeout(5, 0);
  server_->set_payload_max_length(1 << 20);
  // httplib's default also sets SO_REUSEPORT, which would let a second daemon bind a
  // port in use without an error.
  server_->set_socket_options([](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (std::find(public_paths_.begin(), public_paths_.end(), req.path) != public_paths_.end() ||
        CarriesToken(req, token_) || (also_allowed_ && also_allowed_(req))) {
      return httplib::Server::HandlerResponse::Unhandled;  // on to the route
    }
    res.status = 401;
    res.set_header("WWW-Authenticate", "Bearer realm=\"drover\"");
    res.set_content(
        "401: this drover endpoint needs the cluster token (header \"Authorization: Bearer "
        "<token>\" or \"x-drover-token\"; the token is in the head's token file) or, for the "
        "dashboard, a login link from `drover dashboard`.\n",
        "text/plain; charset=utf-8");
    return httplib::Server::HandlerResponse::Handled;
  });
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::SetAuthorizer(Authorizer also_allowed) { also_allowed_ = std::move(also_allowed); }

void HttpServer::AddPublicPath(const std::string& path) { public_paths_.push_back(path); }

absl::StatusOr<int> HttpServer::Start(const std::string& bind_ip, int port) {
  if (!server_->is_valid()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot serve HTTPS with the certificate ", https_.cert, " and the key ", https_.key,
        ": OpenSSL could not load them as a matching pair (unreadable, not PEM, or not each "
        "other's); issue the daemon's certificate again, or run it with --metrics-port -1"));
  }
  int bound = port;
  bool ok;
  if (port == 0) {
    bound = server_->bind_to_any_port(bind_ip);
    ok = bound > 0;
  } else {
    ok = server_->bind_to_port(bind_ip, port);
  }
  if (!ok) {
    return absl::UnavailableError(absl::StrCat("cannot listen for HTTP on ", bind_ip, ":", port,
                                               " (in use? pick another --metrics-port)"));
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  // Until it runs, a Stop() would not reach the listening loop.
  for (int i = 0; i < 5000 && !server_->is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return bound;
}

void HttpServer::Stop() {
  if (!thread_.joinable()) return;
  server_->stop();
  thread_.join();
}

bool HttpServer::CarriesToken(const httplib::Request& req, const std::string& token) {
  if (req.has_header(kTokenMetadataKey) &&
      SecretsEqual(req.get_header_value(kTokenMetadataKey), token)) {
    return true;
  }
  const std::string auth = req.get_header_value("Authorization");
  constexpr absl::string_view kBearer = "Bearer ";
  return absl::StartsWithIgnoreCase(auth, kBearer) &&
         SecretsEqual(absl::string_view(auth).substr(kBearer.size()), token);
}

std::string HttpHostPort(const std::string& host, int port) {
  if (host.find(':') != std::string::npos && host.front() != '[') {
    return absl::StrCat("[", host, "]:", port);
  }
  return absl::StrCat(host, ":", port);
}

}  // namespace drover
