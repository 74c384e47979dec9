// Small file helpers shared by the daemons, the CLI and tests.
#ifndef DROVER_COMMON_FILES_H_
#define DROVER_COMMON_FILES_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace drover {

absl::StatusOr<std::string> ReadFile(const std::string& path);
// Reads a secret (`what`: "token file", "TLS key"): PERMISSION_DENIED, naming the
// chmod that fixes it, if the file is readable or writable by group or others, because
// a secret anyone can read is none; NOT_FOUND if it does not exist.
absl::StatusOr<std::string> ReadOwnerOnlyFile(const std::string& path, const std::string& what);
// Writes via a temporary file and rename(2), so readers see the old or the new
// contents, never a torn file. `mode` applies to the new file (e.g. 0600 for secrets).
absl::Status WriteFileAtomic(const std::string& path, const std::string& contents,
                             int mode = 0644);
// mkdir -p with the given mode for directories it creates.
absl::Status MakeDirs(const std::string& path, int mode = 0755);
// The last `max_bytes` (cut to whole lines where possible) of the file from
// `from_offset` on. Missing file yields "".
std::string TailFile(const std::string& path, int64_t from_offset, int64_t max_bytes);
// Size of the file, or 0 if it does not exist.
int64_t FileSize(const std::string& path);

}  // namespace drover

#endif  // DROVER_COMMON_FILES_H_
