// Transport security of a cluster: the one place that turns a process's TLS settings
// (the cluster CA, and its own certificate and key) into gRPC channel and server
// credentials and into TLS ends of raw sockets (SocketStream).
//
// A TLS cluster has its own CA (common/tls_ca.h), created by the head. Every server
// (scheduler, agents, task workers, object transfers) presents a certificate the CA
// signed, and every client checks it against the CA: a peer with a certificate of
// another CA, or none, is refused during the handshake. Every certificate of a cluster
// names the same peer, kTlsPeerName, and that is the name clients check, because the
// addresses peers are reached at (node IPs, NAT, --advertise) are not known when the
// certificate is made; membership is the CA's signature. Clients present their own
// certificate when they have one (agents do) and servers check one that is presented,
// but do not demand one: the cluster token, which every call still carries,
// authenticates clients (a certificate is issued to whoever holds the token anyway).
//
// Thread safety: a TransportSecurity is immutable after Load and safe to share.
#ifndef DROVER_COMMON_TLS_H_
#define DROVER_COMMON_TLS_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/socket_stream.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/support/channel_arguments.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace drover {

// The name in every certificate of a cluster (its subjectAltName), which peers check.
inline constexpr char kTlsPeerName[] = "drover";

// Environment variables that carry a process's TLS files to the processes it starts
// (an agent's workers): the CA, the certificate, the key.
inline constexpr char kTlsCaEnv[] = "DROVER_TLS_CA";
inline constexpr char kTlsCertEnv[] = "DROVER_TLS_CERT";
inline constexpr char kTlsKeyEnv[] = "DROVER_TLS_KEY";

// Where a process's TLS material is (PEM files).
struct TlsFiles {
  std::string ca;    // the cluster CA's certificate; empty: plain text
  std::string cert;  // this process's certificate, signed by the CA; empty: none
  std::string key;   // its private key (an owner-only file); with `cert`
};

class TransportSecurity {
 public:
  // Plain text: insecure gRPC credentials, plain sockets.
  static std::shared_ptr<const TransportSecurity> Plaintext();
  // Reads and checks `files`: the CA is a CA certificate, the key file is owner-only
  // (PERMISSION_DENIED otherwise, naming the chmod), the key belongs to the
  // certificate and the CA signed it. Plain text if `files.ca` is empty.
  static absl::StatusOr<std::shared_ptr<const TransportSecurity>> Load(const TlsFiles& files);
  // Load with the files named by DROVER_TLS_CA, DROVER_TLS_CERT, DROVER_TLS_KEY.
  static absl::StatusOr<std::shared_ptr<const TransportSecurity>> FromEnvironment();
  ~TransportSecurity();
  TransportSecurity(const TransportSecurity&) = delete;
  TransportSecurity& operator=(const TransportSecurity&) = delete;

  bool tls() const { return !files_.ca.empty(); }
  // True if this process has a certificate of its own (it can serve).
  bool has_identity() const { return !files_.cert.empty(); }
  const TlsFiles& files() const { return files_; }
  // KEY=VALUE entries that make a child process load the same files (none if plain).
  std::vector<std::pair<std::string, std::string>> Environment() const;

  // gRPC: credentials for channels (checking the server against the CA, presenting
  // this process's certificate if it has one) and the channel arguments that go with
  // them (the peer name to check).
  std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials() const;
  void ApplyChannelArgs(grpc::ChannelArguments* args) const;
  // gRPC: credentials for a server. REQUIRES: has_identity(), if tls().
  std::shared_ptr<grpc::ServerCredentials> ServerCredentials() const;

  // Raw sockets. `fd` is a connected TCP socket, owned by the result (closed on error);
  // `peer` names the other end in messages. The client end completes the handshake
  // (checking the server) before it returns; the server end does it on its first
  // read, write or Handshake(), so an event loop never blocks on a slow client.
  absl::StatusOr<std::unique_ptr<SocketStream>> ClientEnd(int fd, const std::string& peer,
                                                          absl::Time deadline) const;
  // REQUIRES: has_identity(), if tls().
  absl::StatusOr<std::unique_ptr<SocketStream>> ServerEnd(int fd, const std::string& peer) const;

 private:
  friend std::string TransportMismatch(const std::string&, const TransportSecurity&,
                                       absl::Duration);
  TransportSecurity() = default;

  TlsFiles files_;
  std::string ca_pem_, cert_pem_, key_pem_;
  SSL_CTX* client_ctx_ = nullptr;  // owned; null if plain
  SSL_CTX* server_ctx_ = nullptr;  // owned; null if plain or without identity
};

// This process's transport, which MakeChannel, the servers and the raw sockets use
// unless told otherwise. Daemons and the CLI set it at start; otherwise it is read from
// the environment on first use (processes an agent started), and is plain text if the
// environment names no CA (or names files that do not load: that is logged once and
// connections to a TLS cluster then fail with TransportMismatch's message).
std::shared_ptr<const TransportSecurity> ProcessTransport();
void SetProcessTransport(std::shared_ptr<const TransportSecurity> transport);

// After a connection to `address` ("host:port") failed: if the server there speaks
// TLS and `mine` is plain text, or the other way round, a sentence saying so and what
// to pass; "" otherwise (or if it cannot tell within `timeout`). Makes one short TLS
// handshake attempt to find out.
std::string TransportMismatch(const std::string& address, const TransportSecurity& mine,
                              absl::Duration timeout = absl::Seconds(2));

}  // namespace drover

#endif  // DROVER_COMMON_TLS_H_
