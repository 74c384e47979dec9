// Reading the process environment.
//
// Thread safety: as std::getenv (safe while nothing calls setenv/putenv concurrently).
#ifndef DROVER_COMMON_ENV_H_
#define DROVER_COMMON_ENV_H_

#include <string>

namespace drover {

// The value of environment variable `name`, or `fallback` if it is not set (a variable
// set to the empty string reads as "").
std::string Env(const char* name, const char* fallback = "");

}  // namespace drover

#endif  // DROVER_COMMON_ENV_H_
