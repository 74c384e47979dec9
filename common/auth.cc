#include "common/auth.h"

#include <sys/random.h>
#include <sys/stat.h>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/files.h"

namespace drover {

std::string GenerateToken() {
  unsigned char buf[32];
  size_t got = 0;
  while (got < sizeof(buf)) {
    ssize_t n = ::getrandom(buf + got, sizeof(buf) - got, 0);
    if (n > 0) got += n;
  }
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(buf), sizeof(buf)));
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(
        "token file ", path, " does not exist; copy it from the head node (it is "
        "created by `drover start --head` or `drover up`) or pass --token-file"));
  }
  if (st.st_mode & 077) {
    return absl::PermissionDeniedError(absl::StrCat(
        "token file ", path, " is readable by others (mode ",
        absl::StrCat(st.st_mode & 0777), " octal ", (st.st_mode >> 6) & 7,
        (st.st_mode >> 3) & 7, st.st_mode & 7, "); run `chmod 600 ", path, "`"));
  }
  auto contents = ReadFile(path);
  if (!contents.ok()) return contents.status();
  std::string token(absl::StripAsciiWhitespace(*contents));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, " is empty"));
  }
  return token;
}

absl::StatusOr<std::string> LoadOrCreateTokenFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) return ReadTokenFile(path);
  std::string token = GenerateToken();
  auto slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    auto st2 = MakeDirs(path.substr(0, slash), 0700);
    if (!st2.ok()) return st2;
  }
  auto s = WriteFileAtomic(path, token + "\n", 0600);
  if (!s.ok()) return s;
  return token;
}

bool SecretsEqual(absl::string_view got, absl::string_view want) {
  unsigned char diff = got.size() != want.size();
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) diff |= got[i] ^ want[i];
  return diff == 0;
}

grpc::Status CheckToken(const grpc::ServerContextBase& ctx, const std::string& token) {
  const auto& md = ctx.client_metadata();
  auto it = md.find(kTokenMetadataKey);
  if (it == md.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "request carries no cluster token; pass --token-file (or set "
                        "DROVER_TOKEN_FILE) with the head's token file");
  }
  if (!SecretsEqual(absl::string_view(it->second.data(), it->second.size()), token)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "wrong cluster token; use the token file of this cluster's head");
  }
  return grpc::Status::OK;
}

}  // namespace drover
