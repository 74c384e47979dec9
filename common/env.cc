#include "common/env.h"

#include <cstdlib>

namespace drover {

std::string Env(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v == nullptr ? fallback : v;
}

}  // namespace drover
