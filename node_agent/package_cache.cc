#include "node_agent/package_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/log.h"
#include "common/rpc.h"
#include "common/sha256.h"
#include "common/status.h"

namespace drover {
PackageCache::PackageCache(std::string dir, std::string scheduler_address, std::string token)
    : dir_(std::move(dir)),
      token_(std::move(token)),
      leases_(proto::Leases::NewStub(MakeChannel(scheduler_address))) {}

int PackageCache::fetches() {
  absl::MutexLock l(&mu_);
  return fetches_;
}

absl::StatusOr<std::string> PackageCache::Ensure(const std::string& hash) {
  if (!IsSha256Hex(hash)) {
    return absl::InvalidArgumentError(absl::StrCat("'", hash, "' is not a package hash (sha256 hex)"));
  }
  const std::string path = absl::StrCat(dir_, "/", hash, "/program");
  absl::MutexLock l(&mu_);
  for (;;) {
    if (::access(path.c_str(), X_OK) == 0) return path;
    if (!fetching_[hash]) break;
    done_.Wait(&mu_);  // another request fetches it
  }
  fetching_[hash] = true;
  ++fetches_;
  mu_.Unlock();
  absl::Status s = Fetch(hash, path);
  mu_.Lock();
  fetching_.erase(hash);
  done_.SignalAll();
  if (!s.ok()) return s;
  return path;
}

absl::Status PackageCache::Fetch(const std::string& hash, const std::string& path) {
  const std::string dir = absl::StrCat(dir_, "/", hash);
  DROVER_RETURN_IF_ERROR(MakeDirs(dir, 0700));
  const std::string tmp = absl::StrCat(path, ".part.", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0700);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot create ", tmp, ": ", std::strerror(errno)));
  grpc::ClientContext ctx;
  PrepareContext(&ctx, token_, std::chrono::milliseconds(300000));
  proto::GetPackageRequest req;
  req.set_hash(hash);
  std::unique_ptr<grpc::ClientReader<proto::PackageChunk>> reader = leases_->GetPackage(&ctx, req);
  proto::PackageChunk chunk;
  uint64_t written = 0;
  absl::Status failure;
  while (reader->Read(&chunk)) {
    if (chunk.offset() != written) {
      failure = absl::DataLossError(absl::StrCat("package ", hash, ": chunk at ", chunk.offset(),
                                                 " after ", written, " bytes"));
      break;
    }
    const std::string& d = chunk.data();
    size_t off = 0;
    while (off < d.size()) {
      ssize_t n = ::write(fd, d.data() + off, d.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        failure = absl::ResourceExhaustedError(absl::StrCat("cannot write ", tmp, ": ", std::strerror(errno)));
        break;
      }
      off += static_cast<size_t>(n);
    }
    if (!failure.ok()) break;
    written += d.size();
  }
  if (!failure.ok()) ctx.TryCancel();
  absl::Status rpc = FromGrpcStatus(reader->Finish());
  ::close(fd);
  if (failure.ok() && !rpc.ok()) {
    failure = absl::Status(rpc.code(), absl::StrCat("fetching package ", hash, " from the scheduler: ", rpc.message()));
  }
  if (failure.ok()) {
    absl::StatusOr<std::string> got = Sha256File(tmp);
    if (!got.ok()) {
      failure = got.status();
    } else if (*got != hash) {
      failure = absl::DataLossError(absl::StrCat("package ", hash, " arrived with hash ", *got, " (",
                                                 written, " bytes); not used"));
    }
  }
  if (failure.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    failure = absl::InternalError(absl::StrCat("cannot rename ", tmp, ": ", std::strerror(errno)));
  }
  if (!failure.ok()) {
    ::unlink(tmp.c_str());
    return failure;
  }
  DROVER_LOG(INFO) << "fetched package " << hash.substr(0, 12) << " (" << written << " bytes)";
  return absl::OkStatus();
}

}  // namespace drover
