// PackageStore: the cluster's code packages (task programs), stored by the head under
// their sha256 so that agents on any machine can fetch them (proto/lease.proto,
// PutPackage/GetPackage). A package is written to a temporary file, checked against
// its hash and renamed into place: a half upload is never served.
//
// Thread safety: thread-safe (uploads of one package may race; the first rename wins
// and both are the same bytes).
#ifndef DROVER_SCHEDULER_PACKAGE_STORE_H_
#define DROVER_SCHEDULER_PACKAGE_STORE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/support/sync_stream.h"
#include "proto/lease.grpc.pb.h"

namespace drover {

class PackageStore {
 public:
  // Packages go under `dir` (created 0700).
  explicit PackageStore(std::string dir, uint64_t max_bytes = uint64_t{8} << 30);

  bool Has(const std::string& hash) const;
  // Reads an upload to its end. INVALID_ARGUMENT for a bad hash or out-of-order
  // chunks; DATA_LOSS if the bytes do not hash to the announced hash.
  absl::Status Put(grpc::ServerReader<proto::PackageChunk>* reader);
  // Streams the package in chunks of 1 MiB. NOT_FOUND if there is none.
  absl::Status Get(const std::string& hash, grpc::ServerWriter<proto::PackageChunk>* writer) const;
  std::string PathOf(const std::string& hash) const;

 private:
  const std::string dir_;
  const uint64_t max_bytes_;
};

}  // namespace drover

#endif  // DROVER_SCHEDULER_PACKAGE_STORE_H_
