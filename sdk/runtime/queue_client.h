// QueueClient: this process's side of one drover::Queue: the queue's actor, where its
// server listens (QueueEndpoint) and a pool of connections to it. Every call takes a
// connection of its own from the pool (opening one if none is idle), so a blocking
// Get in one thread never holds up a Put in another; a call's connection returns to
// the pool when the call is answered.
//
// When a connection breaks (the host's process died), or a call waiting for its answer
// finds (every 5 s) that the scheduler lists the actor as dead (its node vanished), the
// call fails with ABORTED and the cause from the actor's record; later calls fail the
// same way at once.
//
// Thread safety: thread-safe. One QueueClient per queue and process (shared by every
// Queue handle of it, including those decoded from task arguments).
#ifndef DROVER_SDK_RUNTIME_QUEUE_CLIENT_H_
#define DROVER_SDK_RUNTIME_QUEUE_CLIENT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/framed_socket.h"
#include "drover/internal/pipeline_api.h"
#include "drover/queue.h"
#include "drover/internal/runtime_api.h"
#include "proto/queue.pb.h"
#include "sdk/runtime/context.h"
#include "sdk/runtime/queue_host.h"

namespace drover::internal {

class QueueClient {
 public:
  QueueClient(RuntimeContext* ctx, std::shared_ptr<ActorState> actor, QueueEndpoint endpoint);

  const std::string& name() const { return endpoint_.spec.name; }
  const std::string& id() const { return endpoint_.spec.queue_id; }
  const std::shared_ptr<ActorState>& actor() const { return actor_; }
  const QueueEndpoint& endpoint() const { return endpoint_; }

  // Sends `request` on a connection of its own and returns the reply (its status, or
  // the transport's). `wait` bounds how long the host may take (the request's own
  // timeout; the client adds a margin).
  absl::StatusOr<proto::QueueReply> Call(proto::QueueRequest request, absl::Duration wait);

  // Marks the queue destroyed: later calls fail at once with FAILED_PRECONDITION.
  void MarkDestroyed();

 private:
  absl::StatusOr<std::unique_ptr<FramedSocket>> Connect();
  // The error for a broken connection: the host's death and its cause.
  absl::Status Lost(const absl::Status& transport);

  RuntimeContext* const ctx_;
  const std::shared_ptr<ActorState> actor_;
  const QueueEndpoint endpoint_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<FramedSocket>> idle_ ABSL_GUARDED_BY(mu_);
  uint64_t next_request_ ABSL_GUARDED_BY(mu_) = 1;
  absl::Status gone_ ABSL_GUARDED_BY(mu_);  // set once the host is known to be gone
};

// For drover::Shutdown in a driver: closes the queues this process created with
// QueueOptions::keep_until_drained and waits until their consumers drained them
// (see QueueOptions). Logs to stderr what it waits for. Returns at once when there
// are none.
void DrainQueuesBeforeExit();

}  // namespace drover::internal

#endif  // DROVER_SDK_RUNTIME_QUEUE_CLIENT_H_
