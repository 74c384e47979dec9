#include "common/paths.h"

#include <unistd.h>

#include <cstdint>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace drover {

std::string DroverHome() {
  if (const char* h = std::getenv("DROVER_HOME"); h != nullptr && *h != '\0') return h;
  const char* home = std::getenv("HOME");
  return absl::StrCat(home && *home ? home : "/tmp", "/.drover");
}

std::string TmpSocketPath(const std::string& owner_dir, const std::string& name) {
  uint32_t h = 2166136261u;  // FNV-1a: the same in every process
  for (unsigned char c : owner_dir) h = (h ^ c) * 16777619u;
  return absl::StrFormat("/tmp/drover-%d/%s-%d-%08x", ::getuid(), name, ::getpid(), h);
}

}  // namespace drover
