#include "common/sha256.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cerrno>
#include <cstring>
#include <memory>

#include <openssl/evp.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace drover {
namespace {

using Digest = std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)>;

Digest NewDigest() {
  Digest md(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EVP_DigestInit_ex(md.get(), EVP_sha256(), nullptr);
  return md;
}

std::string Finish(EVP_MD_CTX* md) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(md, digest, &len);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(digest), len));
}

}  // namespace

absl::StatusOr<std::string> Sha256File(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  Digest md = NewDigest();
  std::string buf(1 << 20, '\0');
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return absl::InternalError(absl::StrCat("cannot read ", path, ": ", std::strerror(err)));
    }
    if (n == 0) break;
    EVP_DigestUpdate(md.get(), buf.data(), static_cast<size_t>(n));
  }
  ::close(fd);
  return Finish(md.get());
}

std::string Sha256Hex(absl::string_view data) {
  Digest md = NewDigest();
  EVP_DigestUpdate(md.get(), data.data(), data.size());
  return Finish(md.get());
}

bool IsSha256Hex(absl::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace drover

namespace drover {

absl::Status PlaceIfHashMatches(const std::string& tmp, const std::string& path,
                                const std::string& hash) {
  absl::Status failure;
  absl::StatusOr<std::string> got = Sha256File(tmp);
  if (!got.ok()) {
    failure = got.status();
  } else if (*got != hash) {
    failure = absl::DataLossError(absl::StrCat("the bytes announced as ", hash, " hash to ", *got));
  } else if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    failure = absl::InternalError(absl::StrCat("cannot rename ", tmp, ": ", std::strerror(errno)));
  }
  if (!failure.ok()) std::remove(tmp.c_str());
  return failure;
}

}  // namespace drover
