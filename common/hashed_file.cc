#include "common/hashed_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/sha256.h"

namespace drover {

absl::StatusOr<HashedFileWriter> HashedFileWriter::Create(std::string final_path,
                                                          std::string tmp_path, mode_t mode) {
  int fd = ::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("cannot create ", tmp_path, ": ", std::strerror(errno)));
  }
  return HashedFileWriter(std::move(final_path), std::move(tmp_path), fd);
}

HashedFileWriter::HashedFileWriter(HashedFileWriter&& other) noexcept
    : final_path_(std::move(other.final_path_)),
      tmp_path_(std::exchange(other.tmp_path_, "")),
      fd_(std::exchange(other.fd_, -1)),
      written_(other.written_) {}

HashedFileWriter::~HashedFileWriter() { Discard(); }

void HashedFileWriter::Discard() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!tmp_path_.empty()) ::unlink(tmp_path_.c_str());
  tmp_path_.clear();
}

absl::Status HashedFileWriter::Append(uint64_t offset, absl::string_view data,
                                      uint64_t max_bytes) {
  if (fd_ < 0) return absl::FailedPreconditionError("HashedFileWriter: already committed");
  if (offset != written_) {
    return absl::InvalidArgumentError(
        absl::StrCat(final_path_, ": chunk at offset ", offset, " after ", written_, " bytes"));
  }
  if (written_ + data.size() > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(final_path_, ": more than the limit of ", max_bytes, " bytes"));
  }
  for (size_t off = 0; off < data.size();) {
    ssize_t n = ::write(fd_, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot write ", tmp_path_, ": ", std::strerror(errno)));
    }
    off += static_cast<size_t>(n);
  }
  written_ += data.size();
  return absl::OkStatus();
}

absl::Status HashedFileWriter::Commit(absl::string_view sha256_hex) {
  if (fd_ < 0) return absl::FailedPreconditionError("HashedFileWriter: already committed");
  ::close(fd_);
  fd_ = -1;
  absl::Status placed = PlaceIfHashMatches(tmp_path_, final_path_, std::string(sha256_hex));
  tmp_path_.clear();  // placed, or removed by PlaceIfHashMatches
  if (!placed.ok()) {
    return absl::Status(placed.code(), absl::StrCat(final_path_, " (", written_, " bytes): ",
                                                    placed.message()));
  }
  return absl::OkStatus();
}

}  // namespace drover
