// How an agent of a TLS cluster gets its certificate: at every start it makes a new key
// in its own directory (the key never leaves the node) and asks the head to sign a
// request for it (Scheduler.IssueCertificate), authenticated by the cluster token and
// sent over TLS checked against the cluster CA's certificate, which is all a node needs
// besides the token (both copied from the head, or on a shared file system).
//
// Thread safety: a plain function.
#ifndef DROVER_NODE_AGENT_TLS_BOOTSTRAP_H_
#define DROVER_NODE_AGENT_TLS_BOOTSTRAP_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/tls.h"

namespace drover {

struct NodeCertificateRequest {
  std::string scheduler_address;
  std::string token;
  // The cluster CA's certificate (a copy of the head's tls/ca.crt).
  std::string ca_file;
  // Where node.key (0600) and node.crt go.
  std::string dir;
  // Names the node in the certificate (logs, errors).
  std::string common_name;
  // How long to wait for a scheduler that does not answer yet.
  absl::Duration timeout = absl::Seconds(60);
};

// Makes the key, has it signed and writes both; returns the files to load. Waits up to
// `timeout` for a head that is not up yet. Errors say what to do: the head does not use
// TLS (or does while this node was not told to), the token is wrong, the CA file is
// another cluster's.
absl::StatusOr<TlsFiles> ObtainNodeCertificate(const NodeCertificateRequest& request);

}  // namespace drover

#endif  // DROVER_NODE_AGENT_TLS_BOOTSTRAP_H_
