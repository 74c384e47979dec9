#include "common/paths.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace drover {

std::string DroverHome() {
  if (const char* h = std::getenv("DROVER_HOME"); h != nullptr && *h != '\0') return h;
  const char* home = std::getenv("HOME");
  return absl::StrCat(home && *home ? home : "/tmp", "/.drover");
}

}  // namespace drover
