// OpenSSL objects owned by unique_ptrs, and PEM text to and from them: the pieces the
// cluster's TLS code (tls.cc, tls_ca.cc) shares.
// Thread safety: plain functions.
#ifndef DROVER_COMMON_OPENSSL_PEM_H_
#define DROVER_COMMON_OPENSSL_PEM_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "openssl/bio.h"
#include "openssl/evp.h"
#include "openssl/x509.h"

namespace drover {

struct OpenSslFree {
  void operator()(BIO* b) const { BIO_free(b); }
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
  void operator()(X509* x) const { X509_free(x); }
  void operator()(X509_REQ* r) const { X509_REQ_free(r); }
};
using BioPtr = std::unique_ptr<BIO, OpenSslFree>;
using KeyPtr = std::unique_ptr<EVP_PKEY, OpenSslFree>;
using CertPtr = std::unique_ptr<X509, OpenSslFree>;
using RequestPtr = std::unique_ptr<X509_REQ, OpenSslFree>;

// A read-only BIO over `pem` (which must outlive it).
BioPtr PemBio(const std::string& pem);

// The first certificate of `pem`; INVALID_ARGUMENT naming `what` if there is none.
absl::StatusOr<CertPtr> ParseCertificate(const std::string& pem, const std::string& what);
// Every certificate of `pem` (a CA file may hold several); at least one.
absl::StatusOr<std::vector<CertPtr>> ParseCertificates(const std::string& pem,
                                                       const std::string& what);
// The private key in `pem`; INVALID_ARGUMENT naming `what` if there is none.
absl::StatusOr<KeyPtr> ParsePrivateKey(const std::string& pem, const std::string& what);

// PEM text of a certificate and of a private key (PKCS#8).
absl::StatusOr<std::string> CertificatePem(X509* cert);
absl::StatusOr<std::string> PrivateKeyPem(EVP_PKEY* key);

}  // namespace drover

#endif  // DROVER_COMMON_OPENSSL_PEM_H_
