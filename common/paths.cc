#include "common/paths.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/files.h"

namespace drover {

std::string DroverHome() {
  if (const char* h = std::getenv("DROVER_HOME"); h != nullptr && *h != '\0') return h;
  const char* home = std::getenv("HOME");
  return absl::StrCat(home && *home ? home : "/tmp", "/.drover");
}

absl::StatusOr<std::string> SocketDir(const std::string& preferred, const std::string& tag,
                                      const std::string& longest_name) {
  constexpr size_t kMaxSocketPath = 100;  // sun_path holds 108 with the NUL; keep a margin
  if (preferred.size() + 1 + longest_name.size() < kMaxSocketPath) {
    if (absl::Status s = MakeDirs(preferred, 0700); !s.ok()) return s;
    return preferred;
  }
  const std::string parent = absl::StrCat("/tmp/drover-", ::getuid());
  if (absl::Status s = MakeDirs(parent, 0700); !s.ok()) return s;
  std::string tmpl = absl::StrCat(parent, "/", tag, "-XXXXXX");
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", tmpl, ": ", std::strerror(errno)));
  }
  return tmpl;
}

void RemoveSocketDir(const std::string& dir, const std::string& preferred) {
  if (dir != preferred) ::rmdir(dir.c_str());
}

}  // namespace drover
