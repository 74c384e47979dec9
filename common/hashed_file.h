// A file received in chunks (a package from a driver, a package fetched by an agent)
// that takes its final name only if its bytes have the sha256 it was announced with.
// The chunks go to a temporary file beside the final path; Commit checks the hash and
// renames it into place, so a reader of the final path never sees a partial or wrong
// file. Anything but a successful Commit removes the temporary (the destructor too).
// Thread-compatible; move-only.
#ifndef DROVER_COMMON_HASHED_FILE_H_
#define DROVER_COMMON_HASHED_FILE_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace drover {

class HashedFileWriter {
 public:
  // Creates `tmp_path` (truncated, `mode`) for a file that will be `final_path`.
  static absl::StatusOr<HashedFileWriter> Create(std::string final_path, std::string tmp_path,
                                                 mode_t mode);
  HashedFileWriter(HashedFileWriter&& other) noexcept;
  HashedFileWriter& operator=(HashedFileWriter&&) = delete;
  ~HashedFileWriter();

  // Writes `data`, which the sender says starts at `offset`. INVALID_ARGUMENT if the
  // offset is not where the file ends (a lost or repeated chunk) or the file would grow
  // beyond `max_bytes`; RESOURCE_EXHAUSTED if the disk refuses.
  absl::Status Append(uint64_t offset, absl::string_view data, uint64_t max_bytes);

  // Closes the file, checks that its sha256 is `sha256_hex` and renames it to the final
  // path. DATA_LOSS naming both hashes if they differ. The writer is spent either way.
  absl::Status Commit(absl::string_view sha256_hex);

  uint64_t written() const { return written_; }

 private:
  HashedFileWriter(std::string final_path, std::string tmp_path, int fd)
      : final_path_(std::move(final_path)), tmp_path_(std::move(tmp_path)), fd_(fd) {}
  void Discard();

  std::string final_path_;
  std::string tmp_path_;  // "" once renamed or removed
  int fd_ = -1;
  uint64_t written_ = 0;
};

}  // namespace drover

#endif  // DROVER_COMMON_HASHED_FILE_H_
