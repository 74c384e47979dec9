// The code package of a task program: the running binary, identified by its build id
// and its content hash, uploaded once to the scheduler's package store so that agents
// on other machines can fetch it (no shared filesystem assumed).
#ifndef DROVER_SDK_RUNTIME_PACKAGE_H_
#define DROVER_SDK_RUNTIME_PACKAGE_H_

#include <string>

#include "absl/status/statusor.h"
#include "proto/lease.grpc.pb.h"

namespace drover::internal {

// The running binary's GNU build id (hex), or "" if it was linked without one.
std::string BuildId();
// The running binary's path (/proc/self/exe resolved).
std::string SelfExe();

// Describes the running binary (hash, size, build id) as a package, uploading it to the
// scheduler unless the scheduler has it already. `argv` and `cwd` become the workers'.
absl::StatusOr<proto::PackageRef> PreparePackage(proto::Leases::Stub* leases,
                                                 const std::string& token, int argc,
                                                 char** argv);

}  // namespace drover::internal

#endif  // DROVER_SDK_RUNTIME_PACKAGE_H_
