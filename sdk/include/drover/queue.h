// drover::Queue<T>: a FIFO shared by every process of a job on any node, the
// torch.multiprocessing.Queue of a cluster: bounded capacity, blocking and timed put
// and get, close, any number of producers and consumers.
//
//   drover::QueueOptions options;
//   options.capacity = 8;
//   auto q = drover::Queue<drover::Tensor>::Create(options);
//   drover::Task(Produce).Remote(*q, 0);                    // queues travel as arguments
//   while (true) {
//     absl::StatusOr<drover::Tensor> t = q->Get();           // waits for an item
//     if (absl::IsOutOfRange(t.status())) break;             // closed and drained
//     ...
//   }
//   // in Produce: for (...) q.Put(*batch);  then  q.Close();
//
// Items: any value tasks can take (msgpack; drover/task.h). A tensor goes into the
// object store once, on the producer's node (a copy, or none for a tensor made with
// drover::AllocateInStore, which is sealed in place), and only its id travels; a
// consumer on that node reads it in place, one on another node after its agent pulled
// it (one copy per node). The item owns those objects, and so does the consumer that
// takes it: they are freed when the consumer's last copy of the tensor goes (memory
// held is bounded by the capacity and what consumers keep), and the space is reused by
// the next put of that size. A tensor already in a store that this process does not
// own (read from a task result) travels by id, not copied: keep it alive until
// consumed.
//
// Order: one FIFO for all producers, so each producer's items come out in its order.
//
// Where it lives: an actor (a process on one node, costing no CPU in the books) runs
// the queue; puts and gets go straight to it (a Unix socket on its node, TCP from
// others), never through the scheduler. It lives until Destroy() or the end of the job
// (Close only ends the stream). If its process dies, every call, waiting or not, fails
// with ABORTED naming the cause (its exit code or signal and stderr tail): the queue
// and its items are lost.
//
// Thread safety: a Queue is a handle: copy it freely, use it from any thread (each
// blocking call uses a connection of its own, so a Get waiting in one thread does not
// hold up a Put in another).
//
// Errors (absl canonical codes): DEADLINE_EXCEEDED no room (Put) or no item (Get)
// within the timeout; OUT_OF_RANGE Get of a closed queue with no items left (the end of
// the stream); FAILED_PRECONDITION Put on a closed queue, or no drover::Init;
// ABORTED the queue's host died (the message says how); INVALID_ARGUMENT an item that
// does not encode, or an item of another type than T; NOT_FOUND Open of an unknown name.
#ifndef DROVER_SDK_INCLUDE_DROVER_QUEUE_H_
#define DROVER_SDK_INCLUDE_DROVER_QUEUE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "drover/internal/codec.h"
#include "drover/internal/pipeline_api.h"

namespace drover {

// A queue's counters (Queue<T>::Info).
struct QueueInfo {
  uint64_t size = 0;          // items queued now
  uint64_t capacity = 0;      // 0: unbounded
  bool closed = false;
  uint64_t puts = 0;          // items put since it was made
  uint64_t gets = 0;          // items taken
  uint64_t waiting_puts = 0;  // calls waiting now for room
  uint64_t waiting_gets = 0;  // ... for an item
  uint64_t stored_bytes = 0;  // bytes of the queued items' tensors in stores
};

struct QueueOptions {
  // Most items queued at once; a put waits while it is full. 0: unbounded.
  uint64_t capacity = 0;
  // Makes the queue findable with Queue<T>::Open(name) (names are unique among the
  // cluster's live actors). Empty: anonymous (pass the Queue itself to tasks).
  std::string name;
  // The node whose process hosts the queue (default: the scheduler's choice, this
  // node's when it can).
  std::string node_id;
  // Lets the queue outlive its creator's work: the creating driver's drover::Shutdown
  // (also run at exit) closes the queue and waits until its consumers have taken every
  // item and one of them was told the end (a get answered OUT_OF_RANGE; or 10 s after
  // the last item went, for consumers that stop counting), up to `drain_timeout`.
  // The job ends after that, so a producer can finish (return from main) while its
  // consumers drain, and the items' tensors stay in the store meanwhile. Only a driver
  // can create such a queue (a task's process does not decide when its job ends).
  // A producer killed by a signal still takes the queue with it.
  bool keep_until_drained = false;
  absl::Duration drain_timeout = absl::Hours(1);
};

namespace internal {
struct QueueAccess;  // below: for drover's own code, not for users
}  // namespace internal

template <typename T>
class Queue {
 public:
  // An invalid handle (every call fails). Valid ones come from Create, Open, or as a
  // task's argument.
  Queue() = default;

  // Creates a queue (its host process is started, or taken warm from the pool).
  static absl::StatusOr<Queue> Create(const QueueOptions& options = {}) {
    absl::StatusOr<std::shared_ptr<internal::QueueClient>> c = internal::CreateQueue(options);
    if (!c.ok()) return c.status();
    return Queue(*std::move(c));
  }
  // The queue created with `name`, waiting up to `timeout` for it to exist.
  static absl::StatusOr<Queue> Open(const std::string& name, absl::Duration timeout = absl::Seconds(10)) {
    absl::StatusOr<std::shared_ptr<internal::QueueClient>> c = internal::OpenQueue(name, timeout);
    if (!c.ok()) return c.status();
    return Queue(*std::move(c));
  }

  // Appends `value`, waiting up to `timeout` while the queue is full.
  absl::Status Put(const T& value, absl::Duration timeout = absl::InfiniteDuration()) {
    if (!client_) return Invalid();
    absl::StatusOr<internal::EncodedValue> enc = internal::Encode(value, internal::DefaultCodecContext());
    if (!enc.ok()) return enc.status();
    return internal::QueuePut(*client_, *std::move(enc), timeout);
  }

  // Takes the item at the front, waiting up to `timeout` for one.
  absl::StatusOr<T> Get(absl::Duration timeout = absl::InfiniteDuration()) {
    if (!client_) return Invalid();
    absl::StatusOr<std::vector<internal::OwnedValue>> items = internal::QueueGet(*client_, timeout, 1);
    if (!items.ok()) return items.status();
    return internal::DecodeOwned<T>(items->front());
  }

  // Takes up to `max_items` (at least one, waiting up to `timeout` for it) in one round
  // trip: for many small items.
  absl::StatusOr<std::vector<T>> GetMany(int max_items, absl::Duration timeout = absl::InfiniteDuration()) {
    if (!client_) return Invalid();
    absl::StatusOr<std::vector<internal::OwnedValue>> items =
        internal::QueueGet(*client_, timeout, max_items);
    if (!items.ok()) return items.status();
    std::vector<T> out;
    out.reserve(items->size());
    absl::Status first;
    for (const internal::OwnedValue& item : *items) {
      absl::StatusOr<T> v = internal::DecodeOwned<T>(item);  // decodes (and frees) every item
      if (v.ok()) {
        out.push_back(*std::move(v));
      } else if (first.ok()) {
        first = v.status();
      }
    }
    if (!first.ok()) return first;
    return out;
  }

  // Ends the stream: later puts fail, waiting puts fail, gets take what is left and
  // then fail with OUT_OF_RANGE. Idempotent.
  absl::Status Close() { return client_ ? internal::QueueClose(*client_) : Invalid(); }
  absl::StatusOr<QueueInfo> Info() { return client_ ? internal::QueueStats(*client_) : Invalid(); }
  // Stops the queue's host (items left are deleted); every later call fails.
  absl::Status Destroy() { return client_ ? internal::QueueDestroy(*client_) : Invalid(); }

  bool valid() const { return client_ != nullptr; }
  std::string name() const { return client_ ? internal::QueueName(*client_) : ""; }
  std::string id() const { return client_ ? internal::QueueId(*client_) : ""; }

 private:
  friend struct internal::QueueAccess;
  explicit Queue(std::shared_ptr<internal::QueueClient> client) : client_(std::move(client)) {}
  static absl::Status Invalid() { return absl::FailedPreconditionError("an invalid (default-constructed) Queue"); }
  std::shared_ptr<internal::QueueClient> client_;
};

namespace internal {

// A Queue over a queue client, and a Queue's client: for the msgpack adaptors below
// and code inside drover (sdk/runtime/), which is how SDK handles expose their internal
// state (as Objects and Tensor do), so that user code cannot make handles from it.
struct QueueAccess {
  template <typename T>
  static Queue<T> Make(std::shared_ptr<QueueClient> client) {
    return Queue<T>(std::move(client));
  }
  template <typename T>
  static const std::shared_ptr<QueueClient>& Client(const Queue<T>& q) {
    return q.client_;
  }
};

}  // namespace internal
}  // namespace drover

// A Queue travels as its id and where its host listens; the receiver connects to it.
namespace msgpack {
MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS) {
namespace adaptor {

template <typename T>
struct pack<drover::Queue<T>> {
  template <typename Stream>
  packer<Stream>& operator()(packer<Stream>& o, const drover::Queue<T>& q) const {
    if (!q.valid()) throw drover::internal::DecodeError("an invalid Queue cannot be sent");
    const std::string ext = drover::internal::EncodeQueue(*drover::internal::QueueAccess::Client(q));
    o.pack_ext(ext.size(), drover::internal::kQueueExtType);
    o.pack_ext_body(ext.data(), static_cast<uint32_t>(ext.size()));
    return o;
  }
};

template <typename T>
struct convert<drover::Queue<T>> {
  const msgpack::object& operator()(const msgpack::object& o, drover::Queue<T>& q) const {
    if (o.type != msgpack::type::EXT || o.via.ext.type() != drover::internal::kQueueExtType) {
      throw drover::internal::DecodeError("expected a Queue, got " + drover::internal::DescribeMsgpack(o));
    }
    q = drover::internal::QueueAccess::Make<T>(drover::internal::DecodeQueue(o.via.ext.data(), o.via.ext.size));
    return o;
  }
};

}  // namespace adaptor
}  // MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS)
}  // namespace msgpack

#endif  // DROVER_SDK_INCLUDE_DROVER_QUEUE_H_
