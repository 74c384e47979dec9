// PackageCache: this node's copies of code packages (the binaries task workers run),
// fetched once per node from the scheduler's package store and kept by content hash.
//
// Layout: <dir>/<sha256>/program (0700). A package is fetched into a temporary file,
// its sha256 checked, and renamed into place, so a crash never leaves a partial binary
// under a valid name. Concurrent requests for one package share one fetch.
//
// Thread safety: thread-safe.
#ifndef DROVER_NODE_AGENT_PACKAGE_CACHE_H_
#define DROVER_NODE_AGENT_PACKAGE_CACHE_H_

#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/lease.grpc.pb.h"

namespace drover {

class PackageCache {
 public:
  PackageCache(std::string dir, std::string scheduler_address, std::string token);

  // The path of the package's binary on this node, fetching it first if needed.
  // NOT_FOUND if the scheduler has no such package; DATA_LOSS if what arrived does not
  // hash to `hash`.
  absl::StatusOr<std::string> Ensure(const std::string& hash);
  // How many packages were fetched (not found in the cache) since start.
  int fetches();

 private:
  absl::Status Fetch(const std::string& hash, const std::string& path);

  const std::string dir_;
  const std::string token_;
  std::unique_ptr<proto::Leases::Stub> leases_;

  absl::Mutex mu_;
  absl::CondVar done_;
  std::map<std::string, bool> fetching_ ABSL_GUARDED_BY(mu_);
  int fetches_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace drover

#endif  // DROVER_NODE_AGENT_PACKAGE_CACHE_H_
