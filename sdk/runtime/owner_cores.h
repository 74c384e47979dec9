// OwnerCores: the owner side's two cores (TaskSubmitter, ActorClient) and the one
// ConnectionLoop that reads their connections, owned together because they can only go
// in one order.
//
// The loop's handlers call into the cores (a frame, a lost worker, a closed actor
// connection), and the cores' sockets call the loop until they close. So teardown is:
// each core shuts its sockets and fails what is in flight (neither waits on a peer or on
// the loop), then the loop stops (bounded: its handlers never block), and only then
// does any of them go. Destroying the members in declaration order instead would free a
// core while the loop may still run its handlers (a use after free on the loop thread).
//
// Thread safety: Shutdown is idempotent and may be called from any thread except the
// loop's; the cores are thread-safe.
#ifndef DROVER_SDK_RUNTIME_OWNER_CORES_H_
#define DROVER_SDK_RUNTIME_OWNER_CORES_H_

#include <memory>

#include "sdk/runtime/actor_client.h"
#include "sdk/runtime/connection_loop.h"
#include "sdk/runtime/task_submitter.h"

namespace drover::internal {

class OwnerCores {
 public:
  // Both cores read their connections on this object's loop (the `loop` of the deps
  // is replaced by it).
  OwnerCores(TaskSubmitter::Deps submitter, ActorClient::Deps actors);
  // Shutdown, then the members.
  ~OwnerCores();
  OwnerCores(const OwnerCores&) = delete;
  OwnerCores& operator=(const OwnerCores&) = delete;

  // The cores shut their connections and fail what is in flight; then the loop stops.
  void Shutdown();

  TaskSubmitter& submitter() { return *submitter_; }
  ActorClient& actors() { return *actors_; }
  ConnectionLoop& loop() { return *loop_; }

 private:
  // Declared first: goes last (the cores' sockets call it until they close).
  std::unique_ptr<ConnectionLoop> loop_;
  std::unique_ptr<TaskSubmitter> submitter_;
  std::unique_ptr<ActorClient> actors_;
};

}  // namespace drover::internal

#endif  // DROVER_SDK_RUNTIME_OWNER_CORES_H_
