#include "common/tls.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/files.h"
#include "common/net.h"
#include "common/openssl_pem.h"
#include "common/status_macros.h"
#include "openssl/bio.h"
#include "openssl/crypto.h"
#include "openssl/pem.h"
#include "openssl/ssl.h"
#include "openssl/x509.h"
#include "openssl/x509v3.h"

namespace drover {
namespace {

// OpenSSL frees its global state in an atexit handler, while gRPC's threads (a TLS
// handshake in flight) still use it after main returns: a crash at exit, seen in about
// one run in five of a TLS driver. Ask it not to, before anything initializes it (a
// static initializer of this file, which every user of TLS links).
[[maybe_unused]] const bool kOpenSslStaysAtExit = OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr) == 1;

// Ciphers of the raw sockets (both ends are drover's, so TLS 1.3 only). AES-128-GCM
// first: it moves bulk transfers faster than AES-256-GCM and is as safe in practice.
constexpr char kCipherSuites[] =
    "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256";

// Every certificate of a CA file (one CA, or several while a cluster moves to a new
// one); each must be a CA.
absl::StatusOr<std::vector<CertPtr>> ReadCaCerts(const std::string& pem, const std::string& path) {
  DROVER_ASSIGN_OR_RETURN(std::vector<CertPtr> out, ParseCertificates(pem, path));
  for (const CertPtr& c : out) {
    if (X509_check_ca(c.get()) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " is not a CA certificate; give the cluster's ca.crt"));
    }
  }
  return out;
}

X509_STORE* NewStore(const std::vector<CertPtr>& cas) {
  X509_STORE* store = X509_STORE_new();
  for (const CertPtr& c : cas) X509_STORE_add_cert(store, c.get());
  return store;
}

// SSL_CTX for one role, checking peers against `cas` (with `cert`/`key` if not null).
SSL_CTX* NewContext(bool server, const std::vector<CertPtr>& cas, X509* cert, EVP_PKEY* key) {
  SSL_CTX* ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_ciphersuites(ctx, kCipherSuites);
  SSL_CTX_set_cert_store(ctx, NewStore(cas));
  // Servers ask for a client certificate and check one that comes, but need none (the
  // token authenticates clients); clients always check the server.
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  X509_VERIFY_PARAM_set1_host(SSL_CTX_get0_param(ctx), kTlsPeerName, 0);
  if (cert != nullptr) {
    SSL_CTX_use_certificate(ctx, cert);
    SSL_CTX_use_PrivateKey(ctx, key);
  }
  // Writes may return after part of a buffer (progress and cancellation stay visible)
  // and be retried from a pointer that moved.
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // A peer that closes without close_notify (a process that exits) ends the stream
  // like any EOF: every drover protocol on these sockets frames its own lengths, so a
  // cut short stream is seen anyway.
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
  if (server) {
    // Connections are one-off (a transfer, a lease): no session tickets to resume.
    SSL_CTX_set_num_tickets(ctx, 0);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  }
  return ctx;
}

absl::Mutex process_mu(absl::kConstInit);
std::shared_ptr<const TransportSecurity>* process_transport ABSL_GUARDED_BY(process_mu) = nullptr;

std::string EnvOr(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// What a TLS handshake attempt with a server found.
enum class Probe { kTls, kNotTls, kServerNotTrusted, kRefusedUs, kUnknown };

Probe ProbeServer(int fd, SSL_CTX* ctx, const std::string& address, absl::Time deadline,
                  std::string* why) {
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  SSL_set_connect_state(ssl);
  // As a gRPC client: a gRPC server closes connections that do not ask for HTTP/2.
  static const unsigned char kH2[] = {2, 'h', '2'};
  SSL_set_alpn_protos(ssl, kH2, sizeof(kH2));
  SocketStream stream(fd, ssl, address);
  absl::Status hs = stream.Handshake(deadline);
  if (hs.ok()) {
    // TLS 1.3: a server that refuses the client's certificate says so after the
    // client's handshake is done, in its first record.
    char byte;
    absl::StatusOr<size_t> r = stream.Read(&byte, 1, std::min(deadline, absl::Now() + absl::Milliseconds(500)));
    // (A gRPC server sends its SETTINGS at once; one that closes instead, with an alert
    // or without, refused us.)
    if (r.ok() && *r == 0) {
      *why = "it closed the connection after the handshake";
      return Probe::kRefusedUs;
    }
    if (!r.ok() && absl::IsUnavailable(r.status())) {
      *why = std::string(r.status().message());
      return Probe::kRefusedUs;
    }
    return Probe::kTls;
  }
  *why = std::string(hs.message());
  if (absl::IsDeadlineExceeded(hs)) return Probe::kUnknown;
  if (absl::StrContains(*why, "does not check against")) return Probe::kServerNotTrusted;
  if (absl::StrContains(*why, "alert")) return Probe::kRefusedUs;
  return Probe::kNotTls;
}

}  // namespace

std::shared_ptr<const TransportSecurity> TransportSecurity::Plaintext() {
  static const auto* plain =
      new std::shared_ptr<const TransportSecurity>(new TransportSecurity());
  return *plain;
}

absl::StatusOr<std::shared_ptr<const TransportSecurity>> TransportSecurity::Load(
    const TlsFiles& files) {
  if (files.ca.empty()) {
    if (!files.cert.empty() || !files.key.empty()) {
      return absl::InvalidArgumentError(
          "a TLS certificate and key were given without the cluster CA's certificate");
    }
    return Plaintext();
  }
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TLS needs both a certificate and its key (got only ",
        files.cert.empty() ? absl::StrCat("the key ", files.key) : absl::StrCat("the certificate ", files.cert),
        ")"));
  }
  std::shared_ptr<TransportSecurity> t(new TransportSecurity());
  t->files_ = files;
  absl::StatusOr<std::string> ca = ReadFile(files.ca);
  if (!ca.ok()) {
    return absl::Status(ca.status().code(),
                        absl::StrCat("the cluster CA certificate: ", ca.status().message(),
                                     " (copy the head's tls/", "ca.crt)"));
  }
  t->ca_pem_ = *ca;
  DROVER_ASSIGN_OR_RETURN(std::vector<CertPtr> cas, ReadCaCerts(t->ca_pem_, files.ca));
  CertPtr cert;
  KeyPtr key;
  if (!files.cert.empty()) {
    DROVER_ASSIGN_OR_RETURN(t->cert_pem_, ReadFile(files.cert));
    DROVER_ASSIGN_OR_RETURN(t->key_pem_, ReadOwnerOnlyFile(files.key, "TLS key"));
    DROVER_ASSIGN_OR_RETURN(cert, ParseCertificate(t->cert_pem_, files.cert));
    DROVER_ASSIGN_OR_RETURN(key, ParsePrivateKey(t->key_pem_, files.key));
    if (X509_check_private_key(cert.get(), key.get()) != 1) {
      TakeOpenSslError("");
      return absl::InvalidArgumentError(
          absl::StrCat(files.key, " is not the private key of ", files.cert));
    }
    X509_STORE* store = NewStore(cas);
    X509_STORE_CTX* vctx = X509_STORE_CTX_new();
    X509_STORE_CTX_init(vctx, store, cert.get(), nullptr);
    const bool signed_by_ca = X509_verify_cert(vctx) == 1;
    const int verify = X509_STORE_CTX_get_error(vctx);
    X509_STORE_CTX_free(vctx);
    X509_STORE_free(store);
    if (!signed_by_ca) {
      TakeOpenSslError("");
      return absl::InvalidArgumentError(absl::StrCat(
          files.cert, " does not check against the CA in ", files.ca, " (",
          X509_verify_cert_error_string(verify), "): it belongs to another cluster"));
    }
  }
  t->client_ctx_ = NewContext(/*server=*/false, cas, cert.get(), key.get());
  if (cert != nullptr) {
    t->server_ctx_ = NewContext(/*server=*/true, cas, cert.get(), key.get());
  }
  // OpenSSL writes to sockets with write(2), not send(MSG_NOSIGNAL): a write to a peer
  // that went away would kill the process with SIGPIPE. Ignore it unless the program
  // chose a handler of its own.
  struct sigaction sa;
  if (::sigaction(SIGPIPE, nullptr, &sa) == 0 && sa.sa_handler == SIG_DFL) {
    ::signal(SIGPIPE, SIG_IGN);
  }
  return std::shared_ptr<const TransportSecurity>(std::move(t));
}

absl::StatusOr<std::shared_ptr<const TransportSecurity>> TransportSecurity::FromEnvironment() {
  return Load(TlsFiles{EnvOr(kTlsCaEnv), EnvOr(kTlsCertEnv), EnvOr(kTlsKeyEnv)});
}

TransportSecurity::~TransportSecurity() {
  if (client_ctx_ != nullptr) SSL_CTX_free(client_ctx_);
  if (server_ctx_ != nullptr) SSL_CTX_free(server_ctx_);
}

std::vector<std::pair<std::string, std::string>> TransportSecurity::Environment() const {
  if (!tls()) return {};
  std::vector<std::pair<std::string, std::string>> env = {{kTlsCaEnv, files_.ca}};
  if (has_identity()) {
    env.emplace_back(kTlsCertEnv, files_.cert);
    env.emplace_back(kTlsKeyEnv, files_.key);
  }
  return env;
}

std::shared_ptr<grpc::ChannelCredentials> TransportSecurity::ChannelCredentials() const {
  if (!tls()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = ca_pem_;
  o.pem_private_key = key_pem_;
  o.pem_cert_chain = cert_pem_;
  return grpc::SslCredentials(o);
}

void TransportSecurity::ApplyChannelArgs(grpc::ChannelArguments* args) const {
  if (tls()) args->SetSslTargetNameOverride(kTlsPeerName);
}

std::shared_ptr<grpc::ServerCredentials> TransportSecurity::ServerCredentials() const {
  if (!tls()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions o(GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  o.pem_root_certs = ca_pem_;
  o.pem_key_cert_pairs.push_back({key_pem_, cert_pem_});
  return grpc::SslServerCredentials(o);
}

absl::StatusOr<std::unique_ptr<SocketStream>> TransportSecurity::ClientEnd(
    int fd, const std::string& peer, absl::Time deadline) const {
  if (!tls()) return std::make_unique<SocketStream>(fd);
  SSL* ssl = SSL_new(client_ctx_);
  SSL_set_fd(ssl, fd);
  SSL_set_connect_state(ssl);
  auto stream = std::make_unique<SocketStream>(fd, ssl, peer);
  DROVER_RETURN_IF_ERROR(stream->Handshake(deadline));
  return stream;
}

absl::StatusOr<std::unique_ptr<SocketStream>> TransportSecurity::ServerEnd(
    int fd, const std::string& peer) const {
  if (!tls()) return std::make_unique<SocketStream>(fd);
  if (server_ctx_ == nullptr) {
    ::close(fd);
    return absl::FailedPreconditionError(
        "this process has no TLS certificate of its own and cannot serve TLS");
  }
  SSL* ssl = SSL_new(server_ctx_);
  SSL_set_fd(ssl, fd);
  SSL_set_accept_state(ssl);
  return std::make_unique<SocketStream>(fd, ssl, peer);
}

std::shared_ptr<const TransportSecurity> ProcessTransport() {
  absl::MutexLock lock(&process_mu);
  if (process_transport == nullptr) {
    absl::StatusOr<std::shared_ptr<const TransportSecurity>> t = TransportSecurity::FromEnvironment();
    if (!t.ok()) {
      std::cerr << "drover: TLS settings from the environment do not load, using plain "
                   "text: "
                << t.status().message() << "\n";
    }
    process_transport = new std::shared_ptr<const TransportSecurity>(
        t.ok() ? *std::move(t) : TransportSecurity::Plaintext());
  }
  return *process_transport;
}

void SetProcessTransport(std::shared_ptr<const TransportSecurity> transport) {
  absl::MutexLock lock(&process_mu);
  if (process_transport == nullptr) {
    process_transport = new std::shared_ptr<const TransportSecurity>(std::move(transport));
  } else {
    *process_transport = std::move(transport);
  }
}

std::string TransportMismatch(const std::string& address, const TransportSecurity& mine,
                              absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<int> fd = ConnectTcp(address, deadline);
  if (!fd.ok()) return "";
  std::string why;
  if (!mine.tls()) {
    SSL_CTX* any = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_verify(any, SSL_VERIFY_NONE, nullptr);
    const Probe p = ProbeServer(*fd, any, address, deadline, &why);
    SSL_CTX_free(any);
    if (p != Probe::kTls && p != Probe::kServerNotTrusted && p != Probe::kRefusedUs) return "";
    return absl::StrCat(
        "the cluster at ", address, " uses TLS and this process was given no CA certificate "
        "to check it with: pass --tls-ca FILE (or set ", kTlsCaEnv, ") with a copy of the "
        "head's tls/ca.crt (in its DROVER_HOME)");
  }
  switch (ProbeServer(*fd, mine.client_ctx_, address, deadline, &why)) {
    case Probe::kNotTls:
      return absl::StrCat("the server at ", address, " does not use TLS, but this process "
                          "was told to (CA ", mine.files().ca, "): drop --tls-ca and ",
                          kTlsCaEnv, " for this cluster, or start the cluster with --tls");
    case Probe::kServerNotTrusted:
      return absl::StrCat("the server at ", address, " is not of the cluster whose CA is ",
                          mine.files().ca, " (", why, "); use a copy of that cluster's "
                          "tls/ca.crt");
    case Probe::kRefusedUs:
      return absl::StrCat("the server at ", address, " refused this process's certificate ",
                          mine.files().cert, " (", why, "): it is not signed by that "
                          "cluster's CA");
    default:
      return "";
  }
}

}  // namespace drover
