// Helpers on the wire's job state (proto::JobState) shared by the daemons. The SDK has
// its own drover::IsTerminal(drover::JobState) (sdk/include/drover/types.h); the two
// agree state for state (sdk/types_test).
#ifndef DROVER_COMMON_JOB_STATE_H_
#define DROVER_COMMON_JOB_STATE_H_

#include "proto/common.pb.h"

namespace drover {

// True for SUCCEEDED, FAILED and CANCELLED: the job will not run again (its processes
// may still be stopping).
inline bool IsTerminal(proto::JobState state) {
  return state == proto::SUCCEEDED || state == proto::FAILED || state == proto::CANCELLED;
}

}  // namespace drover

#endif  // DROVER_COMMON_JOB_STATE_H_
