#include "node_agent/package_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/hashed_file.h"
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
  DROVER_ASSIGN_OR_RETURN(
      HashedFileWriter file,
      HashedFileWriter::Create(path, absl::StrCat(path, ".part.", ::getpid()), 0700));
  grpc::ClientContext ctx;
  PrepareContext(&ctx, token_, std::chrono::milliseconds(300000));
  proto::GetPackageRequest req;
  req.set_hash(hash);
  std::unique_ptr<grpc::ClientReader<proto::PackageChunk>> reader = leases_->GetPackage(&ctx, req);
  proto::PackageChunk chunk;
  absl::Status failure;
  while (failure.ok() && reader->Read(&chunk)) {
    failure = file.Append(chunk.offset(), chunk.data(), UINT64_MAX);
  }
  if (!failure.ok()) ctx.TryCancel();
  absl::Status rpc = FromGrpcStatus(reader->Finish());
  if (failure.ok() && !rpc.ok()) {
    failure = absl::Status(rpc.code(), absl::StrCat("fetching package ", hash, " from the scheduler: ", rpc.message()));
  }
  if (failure.ok()) failure = file.Commit(hash);
  if (!failure.ok()) {
    return absl::Status(failure.code(), absl::StrCat("package ", hash, ": ", failure.message(), "; not used"));
  }
  DROVER_LOG(INFO) << "fetched package " << hash.substr(0, 12) << " (" << file.written() << " bytes)";
  return absl::OkStatus();
}

}  // namespace drover
