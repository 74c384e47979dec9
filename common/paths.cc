#include "common/paths.h"

#include <unistd.h>

#include <cstdint>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace drover {

std::string DroverHome() {
  if (const char* h = std::getenv("DROVER_HOME"); h != nullptr && *h != '\0') return h;
  const char* home = std::getenv("HOME");
  return absl::StrCat(home && *home ? home : "/tmp", "/.drover");
}

std::string ShortSocketPath(const std::string& preferred, const std::string& name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : preferred) h = (h ^ c) * 1099511628211ull;
  return absl::StrCat("/tmp/drover-", ::getuid(), "/", name, "-", absl::Hex(h, absl::kZeroPad16));
}

}  // namespace drover
