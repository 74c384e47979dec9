#include "common/tls_ca.h"

#include <sys/stat.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/files.h"
#include "common/openssl_pem.h"
#include "common/socket_stream.h"
#include "common/status_macros.h"
#include "openssl/bio.h"
#include "openssl/bn.h"
#include "openssl/evp.h"
#include "openssl/pem.h"
#include "openssl/x509.h"
#include "openssl/x509v3.h"

namespace drover {
namespace {

constexpr long kValidSeconds = 10L * 366 * 24 * 3600;
// The weakest key a request may carry (RSA 2048 has 112 bits, P-256 128).
constexpr int kMinSecurityBits = 112;
// Longest common name a request may carry (it shows in logs).
constexpr int kMaxCommonName = 64;

absl::Status OpenSslError(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", TakeOpenSslError("OpenSSL failed")));
}

KeyPtr NewKey() { return KeyPtr(EVP_EC_gen("P-256")); }

// Adds extension `nid` with `value` (openssl x509v3_config syntax) to `cert`.
absl::Status AddExtension(X509* issuer, X509* cert, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (ext == nullptr) return OpenSslError(absl::StrCat("certificate extension ", value));
  const int ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  return ok ? absl::OkStatus() : OpenSslError("cannot add a certificate extension");
}

// A certificate for `subject_key` named `subject`, signed by `issuer_key` (self-signed
// if `issuer` is null), as a CA or as a member.
absl::StatusOr<CertPtr> MakeCertificate(const X509_NAME* subject, EVP_PKEY* subject_key,
                                     X509* issuer, EVP_PKEY* issuer_key, bool ca) {
  CertPtr cert(X509_new());
  X509_set_version(cert.get(), 2);
  // A random 127-bit serial: unique without keeping a counter.
  BIGNUM* bn = BN_new();
  if (bn == nullptr || !BN_rand(bn, 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) ||
      BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get())) == nullptr) {
    BN_free(bn);
    return OpenSslError("cannot make a serial number");
  }
  BN_free(bn);
  // An hour of slack for clocks that differ between machines.
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), kValidSeconds);
  X509_set_subject_name(cert.get(), subject);
  X509_set_issuer_name(cert.get(), issuer != nullptr ? X509_get_subject_name(issuer) : subject);
  X509_set_pubkey(cert.get(), subject_key);
  X509* signer = issuer != nullptr ? issuer : cert.get();
  DROVER_RETURN_IF_ERROR(AddExtension(signer, cert.get(), NID_subject_key_identifier, "hash"));
  DROVER_RETURN_IF_ERROR(
      AddExtension(signer, cert.get(), NID_authority_key_identifier, "keyid:always"));
  if (ca) {
    DROVER_RETURN_IF_ERROR(AddExtension(signer, cert.get(), NID_basic_constraints, "critical,CA:TRUE"));
    DROVER_RETURN_IF_ERROR(AddExtension(signer, cert.get(), NID_key_usage, "critical,keyCertSign,cRLSign"));
  } else {
    DROVER_RETURN_IF_ERROR(AddExtension(signer, cert.get(), NID_basic_constraints, "critical,CA:FALSE"));
    DROVER_RETURN_IF_ERROR(AddExtension(signer, cert.get(), NID_key_usage, "critical,digitalSignature"));
    DROVER_RETURN_IF_ERROR(
        AddExtension(signer, cert.get(), NID_ext_key_usage, "serverAuth,clientAuth"));
    DROVER_RETURN_IF_ERROR(AddExtension(signer, cert.get(), NID_subject_alt_name,
                                        absl::StrCat("DNS:", kTlsPeerName).c_str()));
  }
  if (!X509_sign(cert.get(), issuer_key, EVP_sha256())) return OpenSslError("cannot sign a certificate");
  return cert;
}

}  // namespace

absl::StatusOr<KeyAndRequest> NewKeyAndRequest(const std::string& common_name) {
  KeyPtr key = NewKey();
  if (key == nullptr) return OpenSslError("cannot make a P-256 key");
  RequestPtr req(X509_REQ_new());
  X509_NAME* name = X509_REQ_get_subject_name(req.get());
  const std::string cn = common_name.substr(0, kMaxCommonName);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  if (!X509_REQ_set_pubkey(req.get(), key.get()) ||
      !X509_REQ_sign(req.get(), key.get(), EVP_sha256())) {
    return OpenSslError("cannot sign a certificate request");
  }
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!PEM_write_bio_X509_REQ(bio.get(), req.get())) return OpenSslError("cannot encode a request");
  KeyAndRequest out;
  DROVER_ASSIGN_OR_RETURN(out.key_pem, PrivateKeyPem(key.get()));
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  out.csr_pem.assign(data, n > 0 ? static_cast<size_t>(n) : 0);
  return out;
}

absl::Status WriteKeyAndCertificate(const std::string& key_path, const std::string& key_pem,
                                    const std::string& cert_path, const std::string& cert_pem) {
  for (const std::string* p : {&key_path, &cert_path}) {
    const size_t slash = p->rfind('/');
    if (slash != std::string::npos && slash > 0) {
      DROVER_RETURN_IF_ERROR(MakeDirs(p->substr(0, slash), 0700));
    }
  }
  DROVER_RETURN_IF_ERROR(WriteFileAtomic(key_path, key_pem, 0600));
  return WriteFileAtomic(cert_path, cert_pem, 0644);
}

absl::StatusOr<std::unique_ptr<CertificateAuthority>> CertificateAuthority::LoadOrCreate(
    const std::string& dir) {
  const std::string cert_path = absl::StrCat(dir, "/", kCaCertFile);
  const std::string key_path = absl::StrCat(dir, "/", kCaKeyFile);
  struct stat st;
  const bool have_cert = ::stat(cert_path.c_str(), &st) == 0;
  const bool have_key = ::stat(key_path.c_str(), &st) == 0;
  std::unique_ptr<CertificateAuthority> ca(new CertificateAuthority);
  ca->cert_path_ = cert_path;
  if (!have_cert && !have_key) {
    DROVER_RETURN_IF_ERROR(MakeDirs(dir, 0700));
    ::chmod(dir.c_str(), 0700);
    KeyPtr key = NewKey();
    if (key == nullptr) return OpenSslError("cannot make the CA's key");
    X509_NAME* name = X509_NAME_new();
    const std::string cn = absl::StrCat("drover cluster CA ", GenerateToken().substr(0, 8));
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                               reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
    absl::StatusOr<CertPtr> cert =
        MakeCertificate(name, key.get(), nullptr, key.get(), /*ca=*/true);
    X509_NAME_free(name);
    if (!cert.ok()) return cert.status();
    DROVER_ASSIGN_OR_RETURN(std::string key_pem, PrivateKeyPem(key.get()));
    DROVER_ASSIGN_OR_RETURN(std::string cert_pem, CertificatePem(cert->get()));
    DROVER_RETURN_IF_ERROR(WriteKeyAndCertificate(key_path, key_pem, cert_path, cert_pem));
  } else if (!have_cert || !have_key) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the cluster CA in ", dir, " is incomplete: ", have_cert ? key_path : cert_path,
        " is missing; restore it, or delete ", dir, " to make a new CA (every node then "
        "needs the new ", kCaCertFile, ")"));
  }
  DROVER_ASSIGN_OR_RETURN(ca->cert_pem_, ReadFile(cert_path));
  DROVER_ASSIGN_OR_RETURN(std::string key_pem, ReadOwnerOnlyFile(key_path, "CA key"));
  DROVER_ASSIGN_OR_RETURN(CertPtr cert, ParseCertificate(ca->cert_pem_, cert_path));
  DROVER_ASSIGN_OR_RETURN(KeyPtr key, ParsePrivateKey(key_pem, key_path));
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    TakeOpenSslError("");
    return absl::FailedPreconditionError(
        absl::StrCat(key_path, " is not the key of ", cert_path, "; restore the pair"));
  }
  ca->cert_ = cert.release();
  ca->key_ = key.release();
  return ca;
}

CertificateAuthority::~CertificateAuthority() {
  X509_free(cert_);
  EVP_PKEY_free(key_);
}

absl::StatusOr<std::string> CertificateAuthority::Issue(const std::string& csr_pem) const {
  RequestPtr req(PEM_read_bio_X509_REQ(PemBio(csr_pem).get(), nullptr, nullptr, nullptr));
  if (req == nullptr) {
    TakeOpenSslError("");
    return absl::InvalidArgumentError("the certificate request is not a PEM request");
  }
  EVP_PKEY* key = X509_REQ_get0_pubkey(req.get());
  if (key == nullptr || X509_REQ_verify(req.get(), key) != 1) {
    TakeOpenSslError("");
    return absl::InvalidArgumentError(
        "the certificate request's signature does not check (it must be signed by the "
        "key it asks a certificate for)");
  }
  if (EVP_PKEY_get_security_bits(key) < kMinSecurityBits) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the certificate request's key is too weak (", EVP_PKEY_get_security_bits(key),
        " bits of security; at least ", kMinSecurityBits, ": P-256 or RSA 2048)"));
  }
  // Only the common name is taken from the request.
  X509_NAME* subject = X509_NAME_new();
  X509_NAME* asked = X509_REQ_get_subject_name(req.get());
  const int at = X509_NAME_get_index_by_NID(asked, NID_commonName, -1);
  std::string cn = "drover node";
  if (at >= 0) {
    const ASN1_STRING* s = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(asked, at));
    cn.assign(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)), ASN1_STRING_length(s));
    cn = cn.substr(0, kMaxCommonName);
  }
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  absl::StatusOr<CertPtr> cert = MakeCertificate(subject, key, cert_, key_, /*ca=*/false);
  X509_NAME_free(subject);
  if (!cert.ok()) return cert.status();
  return CertificatePem(cert->get());
}

absl::StatusOr<TlsFiles> CertificateAuthority::IssueFiles(const std::string& dir,
                                                          const std::string& name) const {
  DROVER_ASSIGN_OR_RETURN(KeyAndRequest kr, NewKeyAndRequest(name));
  DROVER_ASSIGN_OR_RETURN(std::string cert, Issue(kr.csr_pem));
  TlsFiles files{cert_path_, absl::StrCat(dir, "/", name, ".crt"), absl::StrCat(dir, "/", name, ".key")};
  DROVER_RETURN_IF_ERROR(WriteKeyAndCertificate(files.key, kr.key_pem, files.cert, cert));
  return files;
}

}  // namespace drover
