#include "common/openssl_pem.h"

#include "absl/strings/str_cat.h"
#include "common/socket_stream.h"
#include "openssl/pem.h"

namespace drover {
namespace {

std::string MemText(BIO* bio) {
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  return std::string(data, n > 0 ? static_cast<size_t>(n) : 0);
}

absl::Status NotPem(const std::string& what, const char* kind) {
  TakeOpenSslError("");
  return absl::InvalidArgumentError(absl::StrCat(what, " is not a PEM ", kind));
}

}  // namespace

BioPtr PemBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

absl::StatusOr<CertPtr> ParseCertificate(const std::string& pem, const std::string& what) {
  CertPtr cert(PEM_read_bio_X509(PemBio(pem).get(), nullptr, nullptr, nullptr));
  if (cert == nullptr) return NotPem(what, "certificate");
  return cert;
}

absl::StatusOr<std::vector<CertPtr>> ParseCertificates(const std::string& pem,
                                                       const std::string& what) {
  std::vector<CertPtr> out;
  BioPtr bio = PemBio(pem);
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) out.emplace_back(x);
  TakeOpenSslError("");  // the end of the text
  if (out.empty()) return NotPem(what, "certificate");
  return out;
}

absl::StatusOr<KeyPtr> ParsePrivateKey(const std::string& pem, const std::string& what) {
  KeyPtr key(PEM_read_bio_PrivateKey(PemBio(pem).get(), nullptr, nullptr, nullptr));
  if (key == nullptr) return NotPem(what, "private key");
  return key;
}

absl::StatusOr<std::string> CertificatePem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!PEM_write_bio_X509(bio.get(), cert)) {
    return absl::InternalError(
        absl::StrCat("cannot encode a certificate: ", TakeOpenSslError("OpenSSL failed")));
  }
  return MemText(bio.get());
}

absl::StatusOr<std::string> PrivateKeyPem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr)) {
    return absl::InternalError(
        absl::StrCat("cannot encode a private key: ", TakeOpenSslError("OpenSSL failed")));
  }
  return MemText(bio.get());
}

}  // namespace drover
