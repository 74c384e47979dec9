// How a process ended, in words: "exited with code 3", "was killed by SIGKILL", or the
// error that kept it from starting, then (optionally) the last lines of its stderr.
#ifndef DROVER_COMMON_EXIT_TEXT_H_
#define DROVER_COMMON_EXIT_TEXT_H_

#include <string>

#include "proto/common.pb.h"

namespace drover {

std::string DescribeExit(const proto::ExitInfo& e, bool with_stderr = true);

// How a process ended, as one of a few fixed words (a metrics label): "success" (code
// 0), "exit_code" (another code), "signal" (killed by one), "error" (it could not be
// started, or its node was lost: ExitInfo.error).
const char* ExitCause(const proto::ExitInfo& e);

}  // namespace drover

#endif  // DROVER_COMMON_EXIT_TEXT_H_
