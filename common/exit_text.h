// How a process ended, in words: "exited with code 3", "was killed by SIGKILL", or the
// error that kept it from starting, then (optionally) the last lines of its stderr.
#ifndef DROVER_COMMON_EXIT_TEXT_H_
#define DROVER_COMMON_EXIT_TEXT_H_

#include <string>

#include "proto/common.pb.h"

namespace drover {

std::string DescribeExit(const proto::ExitInfo& e, bool with_stderr = true);

}  // namespace drover

#endif  // DROVER_COMMON_EXIT_TEXT_H_
