// JSON of the SDK's records, as `drover ... --json` prints them: the proto3 JSON
// mapping of the wire records (proto/common.proto, proto/scheduler.proto) with the
// field names of the .proto files, every field printed (defaults too), enums by name,
// 64-bit integers as strings, times in milliseconds since the epoch (0: not yet).
// Scripts parse this; its fields only ever grow.
//
// Thread safety: pure functions.
#ifndef DROVER_SDK_INCLUDE_DROVER_JSON_H_
#define DROVER_SDK_INCLUDE_DROVER_JSON_H_

#include <string>
#include <vector>

#include "drover/types.h"

namespace drover {

// One job's record (`drover job --json`, `drover run --json`).
std::string ToJson(const JobInfo& job);
// The cluster (`drover status --json`).
std::string ToJson(const ClusterStatus& status);
// A list of jobs as {"jobs": [...]} (`drover jobs --json`).
std::string JobsToJson(const std::vector<JobInfo>& jobs);

}  // namespace drover

#endif  // DROVER_SDK_INCLUDE_DROVER_JSON_H_
