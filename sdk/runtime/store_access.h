// StoreAccess: what the task runtime needs of object stores: this node's store (put,
// zero-copy get), pulls from other nodes through this node's agent, and deletes on
// any node through that node's agent.
//
// Thread safety: every method is thread-safe.
#ifndef DROVER_SDK_RUNTIME_STORE_ACCESS_H_
#define DROVER_SDK_RUNTIME_STORE_ACCESS_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "drover/internal/codec.h"
#include "object_store/client.h"
#include "proto/lease.grpc.pb.h"
#include "proto/node_agent.grpc.pb.h"

namespace drover::internal {

class StoreAccess {
 public:
  // `store` may be null (no store on this node: every put and get fails clearly).
  StoreAccess(std::unique_ptr<object_store::Client> store, std::string node_id,
              std::string agent_address, std::string token);

  const std::string& node_id() const { return node_id_; }
  bool has_store() const { return store_ != nullptr; }
  object_store::Client* store() { return store_.get(); }

  // Puts bytes as object `id` in this node's store.
  absl::StatusOr<StoredRef> Put(const std::string& id, absl::string_view data,
                                absl::string_view metadata = {});
  // The object's data, pinned (zero copy), pulling it to this node first if it is
  // elsewhere. NOT_FOUND naming the object and its node if no live node has it.
  absl::StatusOr<ValueView> Load(const StoredRef& ref, absl::Time deadline);
  // The object pinned in this node's store, pulling it here first if it is elsewhere.
  // `node_id` is where it was made ("" if unknown): one made on this node may still be
  // sealing, and is waited for here.
  absl::StatusOr<object_store::ObjectRef> GetRef(const std::string& object_id,
                                                 const std::string& node_id, absl::Time deadline);

  // True (with why) if `ref`, kept in this node's store and found missing there, was
  // lost with a store that died: this process connected again to a restarted store
  // after `made` (when the value holding `ref` was made, so after its put). Known here
  // at once, without waiting for the scheduler to hear of the restart.
  bool LostInRestart(const StoredRef& ref, absl::Time made, std::string* why) const;

  // Deletes the objects from the stores holding them (asynchronously for other nodes).
  void Delete(const std::vector<StoredRef>& objects);

  // Records where a node's agent is (learned from leases) for deletes there.
  void NoteAgent(const std::string& node_id, const std::string& address);
  // How to find the agent of a node not noted yet ("" if unknown): asked by Delete.
  // Set once, before use.
  void set_agent_resolver(std::function<std::string(const std::string& node_id)> resolver) {
    resolver_ = std::move(resolver);
  }
  // The Workers stub of a node's agent (null if unknown).
  proto::Workers::Stub* WorkersOf(const std::string& node_id);
  proto::Workers::Stub* WorkersAt(const std::string& agent_address);
  const std::string& token() const { return token_; }

 private:
  std::unique_ptr<object_store::Client> store_;
  const std::string node_id_;
  const std::string agent_address_;
  const std::string token_;
  std::unique_ptr<proto::ObjectTransfer::Stub> transfer_;  // this node's agent
  std::function<std::string(const std::string&)> resolver_;

  absl::Mutex mu_;
  std::map<std::string, std::string> agents_ ABSL_GUARDED_BY(mu_);  // node id -> address
  std::map<std::string, std::unique_ptr<proto::Workers::Stub>> workers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace drover::internal

#endif  // DROVER_SDK_RUNTIME_STORE_ACCESS_H_
