// StoreLocalObjects: LocalObjects (what cross-node transfer needs) over this node's
// real object store, through object_store::Client.
//
//  - Acquire = Get without waiting; the ObjectRef is kept here until the matching
//    Release (so the object stays pinned while a ReadObject stream sends it).
//  - CreateSecondary = Create; the writable span lives in the client's mapping of the
//    arena until Seal or Abort.
//
// The connection is made on first use and made again after the store went away (a
// restarted store is a new, empty store: pins and unsealed creates of the old one are
// gone with it, and their Release/Seal/Abort are answered accordingly).
//
// Thread safety: thread-safe (LocalObjects' contract); the store client serializes
// requests on its socket.
#ifndef DROVER_NODE_AGENT_STORE_LOCAL_OBJECTS_H_
#define DROVER_NODE_AGENT_STORE_LOCAL_OBJECTS_H_

#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "node_agent/local_objects.h"
#include "object_store/client.h"

namespace drover {

class StoreLocalObjects : public LocalObjects {
 public:
  explicit StoreLocalObjects(std::string socket_path);
  ~StoreLocalObjects() override;

  bool Contains(const std::string& id) override;
  absl::StatusOr<ReadView> Acquire(const std::string& id) override;
  void Release(const std::string& id) override;
  absl::StatusOr<WriteView> CreateSecondary(const std::string& id, int64_t size,
                                            const std::string& metadata) override;
  absl::Status Seal(const std::string& id) override;
  void Abort(const std::string& id) override;

  // The store's counters (metrics, heartbeats), answered within `timeout`: a store that
  // stopped answering must not hold up the heartbeat (the node would be declared dead)
  // or a scrape. UNAVAILABLE if the store is down, DEADLINE_EXCEEDED if it is silent.
  absl::StatusOr<object_store::StoreStats> Stats(absl::Duration timeout);

 private:
  // The current client, connecting if there is none. UNAVAILABLE if the store is down.
  // The shared client, connected first if need be (giving up after `connect_timeout`).
  absl::StatusOr<std::shared_ptr<object_store::Client>> GetClient(
      absl::Duration connect_timeout = absl::InfiniteDuration());
  // Drops `client` if it is still the current one and `s` says the store went away.
  void MaybeDrop(const std::shared_ptr<object_store::Client>& client, const absl::Status& s);

  const std::string socket_path_;
  absl::Mutex mu_;
  std::shared_ptr<object_store::Client> client_ ABSL_GUARDED_BY(mu_);
  // Pins taken by Acquire, released one per Release.
  std::multimap<std::string, object_store::ObjectRef> pins_ ABSL_GUARDED_BY(mu_);
  // Objects being created, with the client that created them (Seal/Abort must go to
  // the same connection).
  std::map<std::string, std::shared_ptr<object_store::Client>> creating_ ABSL_GUARDED_BY(mu_);
};

}  // namespace drover

#endif  // DROVER_NODE_AGENT_STORE_LOCAL_OBJECTS_H_
