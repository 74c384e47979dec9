#include "scheduler/package_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/hashed_file.h"
#include "common/log.h"
#include "common/sha256.h"

namespace drover {
namespace {

constexpr size_t kChunk = 1 << 20;

}  // namespace

PackageStore::PackageStore(std::string dir, uint64_t max_bytes)
    : dir_(std::move(dir)), max_bytes_(max_bytes) {}

std::string PackageStore::PathOf(const std::string& hash) const { return absl::StrCat(dir_, "/", hash); }

bool PackageStore::Has(const std::string& hash) const {
  return IsSha256Hex(hash) && ::access(PathOf(hash).c_str(), R_OK) == 0;
}

absl::Status PackageStore::Put(grpc::ServerReader<proto::PackageChunk>* reader) {
  static std::atomic<uint64_t> counter{0};
  proto::PackageChunk chunk;
  if (!reader->Read(&chunk)) return absl::InvalidArgumentError("an empty package upload");
  const std::string hash = chunk.hash();
  if (!IsSha256Hex(hash)) {
    return absl::InvalidArgumentError(absl::StrCat("'", hash, "' is not a sha256 (64 lowercase hex)"));
  }
  if (chunk.total_size() > max_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat("a package of ", chunk.total_size(),
                                                   " bytes is larger than the limit of ", max_bytes_));
  }
  if (Has(hash)) {
    while (reader->Read(&chunk)) {
    }
    return absl::OkStatus();
  }
  if (absl::Status s = MakeDirs(dir_, 0700); !s.ok()) return s;
  absl::StatusOr<HashedFileWriter> file = HashedFileWriter::Create(
      PathOf(hash), absl::StrCat(PathOf(hash), ".part.", counter.fetch_add(1)), 0600);
  if (!file.ok()) return file.status();
  absl::Status failure;
  do {
    failure = file->Append(chunk.offset(), chunk.data(), max_bytes_);
  } while (failure.ok() && reader->Read(&chunk));
  if (failure.ok()) failure = file->Commit(hash);
  if (!failure.ok()) {
    return absl::Status(failure.code(), absl::StrCat("package upload ", hash, ": ", failure.message(), "; not stored"));
  }
  DROVER_LOG(INFO) << "stored package " << hash.substr(0, 12) << " (" << file->written() << " bytes)";
  return absl::OkStatus();
}

absl::Status PackageStore::Get(const std::string& hash,
                               grpc::ServerWriter<proto::PackageChunk>* writer) const {
  if (!Has(hash)) {
    return absl::NotFoundError(absl::StrCat("no package ", hash, " on the head: the driver uploads "
                                            "it at drover::Init; start the driver again"));
  }
  int fd = ::open(PathOf(hash).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot open package ", hash, ": ", std::strerror(errno)));
  std::string buf(kChunk, '\0');
  uint64_t offset = 0;
  absl::Status result;
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      result = absl::InternalError(absl::StrCat("cannot read package ", hash, ": ", std::strerror(errno)));
      break;
    }
    if (n == 0) break;
    proto::PackageChunk chunk;
    if (offset == 0) chunk.set_hash(hash);
    chunk.set_offset(offset);
    chunk.set_data(buf.data(), static_cast<size_t>(n));
    offset += static_cast<uint64_t>(n);
    if (!writer->Write(chunk)) {
      result = absl::CancelledError("the reader went away");
      break;
    }
  }
  ::close(fd);
  return result;
}

}  // namespace drover
