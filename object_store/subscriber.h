// Subscriber: receives the seal and removal events of a node's object store on a
// connection of its own (the store protocol's Subscribe; see store_server.h).
//
//   std::vector<StoreEvent> present;
//   auto sub = Subscriber::Connect("/run/drover/store.sock", &present);
//   // `present`: every sealed object at subscription time. Then, in order:
//   absl::StatusOr<StoreEvent> e = (*sub)->Next(absl::Seconds(1));
//
// Used by the node agent to keep the scheduler's object directory current; it maps
// nothing (the arena descriptor the store sends on connect is closed at once).
//
// Ownership: Connect returns the only owner; destroying it closes the connection.
// Thread safety: Next is called by one thread at a time; Interrupt may be called from
// any thread, also concurrently with Next.
// Errors: UNAVAILABLE the store is not there or went away (connect again: a restarted
// store is a new, empty store), DEADLINE_EXCEEDED no event within the timeout,
// CANCELLED after Interrupt, INVALID_ARGUMENT the store sent something malformed.
// A subscriber that stops reading is disconnected by the store once 64 MiB of events
// are queued for it (UNAVAILABLE on the next Next).
#ifndef DROVER_OBJECT_STORE_SUBSCRIBER_H_
#define DROVER_OBJECT_STORE_SUBSCRIBER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "object_store/object_id.h"
#include "object_store/protocol.h"

namespace drover::proto {
class StoreReply;
}

namespace drover::object_store {

struct StoreEvent {
  enum class Kind {
    kSealed,   // sealed (or present and sealed, in a snapshot)
    kRemoved,  // deleted, or a secondary copy evicted
  };
  Kind kind = Kind::kSealed;
  ObjectId id;
  uint64_t data_size = 0;  // 0 when the store does not know (an evicted copy)
  bool primary = true;
};

class Subscriber {
 public:
  // Connects to the store at `socket_path` and subscribes. With `snapshot` non-null,
  // it receives every sealed object present at that moment, and Next returns what
  // happens after. Waits at most `timeout` for the store's answers.
  static absl::StatusOr<std::unique_ptr<Subscriber>> Connect(
      const std::string& socket_path, std::vector<StoreEvent>* snapshot = nullptr,
      absl::Duration timeout = absl::Seconds(10));

  ~Subscriber();
  Subscriber(const Subscriber&) = delete;
  Subscriber& operator=(const Subscriber&) = delete;

  // The next event, waiting at most `timeout` (absl::InfiniteDuration(): until one
  // comes, the store goes away or Interrupt).
  absl::StatusOr<StoreEvent> Next(absl::Duration timeout);

  // Makes the current and every later Next return CANCELLED.
  void Interrupt();

 private:
  Subscriber(int fd, int wake_fd, uint64_t request_id);
  // The next frame as a StoreReply, waiting until `deadline`.
  absl::Status ReadReply(absl::Time deadline, proto::StoreReply* reply);

  int fd_;
  int wake_fd_;
  uint64_t request_id_;
  FrameDecoder in_;
  std::atomic<bool> interrupted_{false};
};

}  // namespace drover::object_store

#endif  // DROVER_OBJECT_STORE_SUBSCRIBER_H_
