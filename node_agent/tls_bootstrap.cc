#include "node_agent/tls_bootstrap.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/rpc.h"
#include "common/status.h"
#include "common/tls_ca.h"
#include "proto/scheduler.grpc.pb.h"

namespace drover {

absl::StatusOr<TlsFiles> ObtainNodeCertificate(const NodeCertificateRequest& request) {
  // Checks the head against the CA; no identity of its own yet.
  DROVER_ASSIGN_OR_RETURN(std::shared_ptr<const TransportSecurity> anonymous,
                          TransportSecurity::Load(TlsFiles{request.ca_file, "", ""}));
  DROVER_ASSIGN_OR_RETURN(KeyAndRequest kr, NewKeyAndRequest(request.common_name));
  auto stub = proto::Scheduler::NewStub(MakeChannel(request.scheduler_address, *anonymous));
  proto::IssueCertificateRequest req;
  req.set_csr_pem(kr.csr_pem);
  proto::IssueCertificateReply reply;
  const absl::Time give_up = absl::Now() + request.timeout;
  absl::Duration backoff = absl::Milliseconds(100);
  for (;;) {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, request.token);
    grpc::Status s = stub->IssueCertificate(&ctx, req, &reply);
    if (s.ok()) break;
    const bool unreachable = s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                             s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    if (!unreachable) {
      return absl::Status(FromGrpcStatus(s).code(),
                          absl::StrCat("the head at ", request.scheduler_address,
                                       " did not issue this node's TLS certificate: ",
                                       s.error_message()));
    }
    // A head that answers, but not as a TLS member of this CA's cluster, will not
    // change its mind: say so at once.
    if (std::string why = TransportMismatch(request.scheduler_address, *anonymous); !why.empty()) {
      return absl::FailedPreconditionError(why);
    }
    if (absl::Now() + backoff > give_up) {
      return absl::UnavailableError(absl::StrCat(
          "no TLS certificate for this node: the head at ", request.scheduler_address,
          " did not answer within ", absl::FormatDuration(request.timeout), " (",
          s.error_message(), ")"));
    }
    std::this_thread::sleep_for(absl::ToChronoMilliseconds(backoff));
    backoff = std::min(backoff * 2, absl::Seconds(2));
  }
  TlsFiles files{request.ca_file, absl::StrCat(request.dir, "/node.crt"),
                 absl::StrCat(request.dir, "/node.key")};
  DROVER_RETURN_IF_ERROR(
      WriteKeyAndCertificate(files.key, kr.key_pem, files.cert, reply.certificate_pem()));
  return files;
}

}  // namespace drover
