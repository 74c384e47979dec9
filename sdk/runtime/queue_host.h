// QueueHost: the process side of one drover::Queue. A Queue is an actor (so the
// scheduler places it, names it, and reports its death like any actor's) whose object
// runs a small server on a thread of its own: actor calls run one at a time on the
// worker's thread, and a get that waits for an item must not hold up the puts that
// would bring it. Clients call the actor once (Endpoint) and then talk to the server
// directly (proto/queue.proto): a Unix socket for clients on the host's node, TCP for
// the others. The rules of the queue are QueueBook's (queue_book.h).
//
// Ownership: the actor owns the server; the server owns the queued items and the store
// objects they own (deleted if the host is destroyed with items left; a host killed
// leaves them to the end of the job, which deletes every object of the job).
// Threading: the server's loop thread does all its I/O and owns the QueueBook; the
// constructor and Endpoint run on the worker's thread and share only immutable fields.
#ifndef DROVER_SDK_RUNTIME_QUEUE_HOST_H_
#define DROVER_SDK_RUNTIME_QUEUE_HOST_H_

#include <cstdint>
#include <memory>
#include <string>

#include "drover/internal/codec.h"

namespace drover::internal {

// What the queue's actor is created with.
struct QueueSpec {
  std::string queue_id;
  std::string name;
  uint64_t capacity = 0;
  MSGPACK_DEFINE(queue_id, name, capacity);
};

// The queue as its clients know it: its spec, and where its server listens.
struct QueueEndpoint {
  QueueSpec spec;
  std::string unix_path;    // for clients on node_id
  std::string tcp_address;  // "ip:port", for the others
  std::string node_id;
  int64_t pid = 0;          // the host's process (for messages and tests)
  MSGPACK_DEFINE(spec, unix_path, tcp_address, node_id, pid);
};

class QueueServer;

class QueueHost {
 public:
  // Starts the server (throws std::runtime_error if it cannot listen: the actor's
  // creation then fails with that message).
  explicit QueueHost(QueueSpec spec);
  ~QueueHost();
  QueueHost(const QueueHost&) = delete;
  QueueHost& operator=(const QueueHost&) = delete;

  QueueEndpoint Endpoint();

 private:
  std::unique_ptr<QueueServer> server_;
};

// The actor's factory (registered with DROVER_REMOTE in queue_host.cc).
QueueHost* MakeQueueHost(QueueSpec spec);

}  // namespace drover::internal

#endif  // DROVER_SDK_RUNTIME_QUEUE_HOST_H_
