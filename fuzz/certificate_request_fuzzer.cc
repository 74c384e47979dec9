// Fuzzes what the head signs for anyone holding the token: the certificate request of
// Scheduler.IssueCertificate, through CertificateAuthority::Issue (common/tls_ca.h).
// Whatever the bytes, Issue returns INVALID_ARGUMENT or a certificate that the
// cluster CA signed, valid for the cluster's peer name only.
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "common/openssl_pem.h"
#include "common/tls.h"
#include "common/tls_ca.h"
#include "fuzz/fuzz_check.h"
#include "openssl/x509v3.h"

namespace {

// A CA made once in a private directory (in memory), removed at exit.
const drover::CertificateAuthority& Ca() {
  static const drover::CertificateAuthority* ca = [] {
    char tmpl[] = "/dev/shm/drover-fuzz-ca-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) std::abort();
    static const std::string dir = tmpl;
    auto made = drover::CertificateAuthority::LoadOrCreate(dir);
    if (!made.ok()) std::abort();
    std::atexit([] {
      unlink((dir + "/ca.crt").c_str());
      unlink((dir + "/ca.key").c_str());
      rmdir(dir.c_str());
    });
    return made->release();
  }();
  return *ca;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string csr(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::string> cert = Ca().Issue(csr);
  if (!cert.ok()) {
    FUZZ_CHECK(cert.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  auto issued = drover::ParseCertificate(*cert, "issued");
  FUZZ_CHECK(issued.ok());
  auto ca = drover::ParseCertificate(Ca().cert_pem(), "ca");
  FUZZ_CHECK(ca.ok());
  FUZZ_CHECK(X509_verify(issued->get(), X509_get0_pubkey(ca->get())) == 1);
  FUZZ_CHECK(X509_check_host(issued->get(), drover::kTlsPeerName, 0, 0, nullptr) == 1);
  FUZZ_CHECK(X509_check_ca(issued->get()) == 0);
  return 0;
}
