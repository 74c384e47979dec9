// The certificate authority of a TLS cluster and the certificates it issues (OpenSSL's
// libcrypto; P-256 keys, SHA-256 signatures).
//
// The head keeps the CA in its TLS directory ($DROVER_HOME/tls): ca.crt (public: every
// node and client needs a copy, to check the peers it talks to) and ca.key (owner-only,
// never leaves the head). Each node makes its own key, which never leaves the node, and
// asks the head to sign a request for it (Scheduler.IssueCertificate, authenticated by
// the cluster token and sent over TLS already checked against ca.crt). Every
// certificate names kTlsPeerName and is valid for server and client use. They are
// valid for ten years; a node gets a new one at every start. To revoke every
// certificate at once, delete the head's TLS directory and start it again (a new CA),
// as one changes the token.
//
// Thread safety: a CertificateAuthority is immutable after it is made; Issue may be
// called from any thread.
#ifndef DROVER_COMMON_TLS_CA_H_
#define DROVER_COMMON_TLS_CA_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/tls.h"

typedef struct evp_pkey_st EVP_PKEY;
typedef struct x509_st X509;

namespace drover {

// The files of a TLS directory.
inline constexpr char kCaCertFile[] = "ca.crt";
inline constexpr char kCaKeyFile[] = "ca.key";

struct KeyAndRequest {
  std::string key_pem;  // the new private key (PKCS#8)
  std::string csr_pem;  // a certificate request for it
};

// A new key and a certificate request for it naming `common_name` (which shows in
// logs and errors; say which node or daemon it is).
absl::StatusOr<KeyAndRequest> NewKeyAndRequest(const std::string& common_name);

// Writes `key_pem` to `key_path` (mode 0600) and `cert_pem` to `cert_path`, creating
// their directory (0700) if needed.
absl::Status WriteKeyAndCertificate(const std::string& key_path, const std::string& key_pem,
                                    const std::string& cert_path, const std::string& cert_pem);

class CertificateAuthority {
 public:
  // The CA in `dir` (ca.crt and ca.key), made if neither file exists (the directory
  // 0700, the key 0600). Errors name the file: one of the two missing, a key readable
  // by others (PERMISSION_DENIED), a key that does not match the certificate.
  static absl::StatusOr<std::unique_ptr<CertificateAuthority>> LoadOrCreate(const std::string& dir);
  ~CertificateAuthority();
  CertificateAuthority(const CertificateAuthority&) = delete;
  CertificateAuthority& operator=(const CertificateAuthority&) = delete;

  const std::string& cert_pem() const { return cert_pem_; }
  const std::string& cert_path() const { return cert_path_; }

  // Signs the request `csr_pem` (whose signature must check: the requester holds the
  // key). The certificate keeps only the request's common name; everything else is
  // this CA's choice. INVALID_ARGUMENT for a request that does not parse or check, or
  // whose key is weaker than P-256 or RSA 2048.
  absl::StatusOr<std::string> Issue(const std::string& csr_pem) const;

  // A new key and certificate for a process on the CA's own machine (the scheduler):
  // `dir`/`name`.key (0600) and `dir`/`name`.crt. Returns the files to Load.
  absl::StatusOr<TlsFiles> IssueFiles(const std::string& dir, const std::string& name) const;

 private:
  CertificateAuthority() = default;

  std::string cert_pem_;
  std::string cert_path_;
  X509* cert_ = nullptr;     // owned
  EVP_PKEY* key_ = nullptr;  // owned
};

}  // namespace drover

#endif  // DROVER_COMMON_TLS_CA_H_
