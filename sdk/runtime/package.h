// The code package of a task program: the running binary, identified by its build id
// and its content hash, uploaded once to the scheduler's package store so that agents
// on other machines can fetch it (no shared filesystem assumed).
#ifndef DROVER_SDK_RUNTIME_PACKAGE_H_
#define DROVER_SDK_RUNTIME_PACKAGE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/lease.grpc.pb.h"

namespace drover::internal {

// The running binary's GNU build id (hex), or "" if it was linked without one.
std::string BuildId();
// The GNU build id (hex) of the ELF executable at `path`, "" if it has none.
// INVALID_ARGUMENT if it is not an ELF file of this machine's class; NOT_FOUND.
absl::StatusOr<std::string> BuildIdOfFile(const std::string& path);
// The running binary's path (/proc/self/exe resolved).
std::string SelfExe();

// Describes the workers' binary (hash, size, build id) as a package, uploading it to the
// scheduler unless the scheduler has it already: `program`, or the running binary if it
// is empty. `argv` (the program alone if empty) and the current directory become the
// workers'. INVALID_ARGUMENT if `program` is not an executable file.
absl::StatusOr<proto::PackageRef> PreparePackage(proto::Leases::Stub* leases,
                                                 const std::string& token, const std::string& program,
                                                 const std::vector<std::string>& argv);

}  // namespace drover::internal

#endif  // DROVER_SDK_RUNTIME_PACKAGE_H_
