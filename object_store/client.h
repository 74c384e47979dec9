// Client: the C++ client of the node's object store (the SDK builds on it).
//
//   auto client = Client::Connect("/run/drover/store.sock");   // maps the arena once
//   ObjectId id = Client::RandomId();
//   DROVER_RETURN_IF_ERROR((*client)->Put(id, bytes, /*metadata=*/""));
//   absl::StatusOr<ObjectRef> ref = (*client)->Get(id, absl::Seconds(5));
//   use(ref->data());   // a view into shared memory: no copy
//   // ~ObjectRef releases the reference.
//
// Zero copy: Connect receives the store's arena descriptor and maps it once for the
// Client's lifetime; Create returns a writable span inside that mapping and Get a
// read-only one. Object bytes never cross the socket.
//
// Ownership: Connect returns the only owner of the Client. An ObjectRef keeps the
// connection and the mapping alive (shared ownership), so a ref may outlive the Client
// object; its data() stays valid until the ref is destroyed. A MutableObject's span is
// valid until Seal or Abort of that id, or until the Client is destroyed.
//
// Thread safety: a Client is thread-safe; one mutex around the socket serializes the
// requests, which are synchronous (one round trip each, ~10-20 µs between two processes
// here; Put copies the bytes of medium and large objects outside the lock), except the
// batch calls: PutMany and Release(refs) write all their requests
// in one go (pipelined; PutMany then reads the replies matched by request id) and
// Get(ids) is one request, so a batch of small objects costs about one round trip. ObjectRefs may be used and
// destroyed on any thread. Sealed objects are immutable: concurrent readers need no
// locking; writing into a MutableObject is the creator's business until Seal.
//
// Errors (absl canonical codes): NOT_FOUND unknown id, ALREADY_EXISTS double create,
// FAILED_PRECONDITION seal of a sealed object or of another client's object,
// RESOURCE_EXHAUSTED no room even after spilling, DEADLINE_EXCEEDED a Get/Wait timeout
// or any call past its deadline (below),
// UNAVAILABLE the store is away (it did not come back within the reconnect wait),
// INVALID_ARGUMENT a malformed request.
//
// Deadlines: every call answers by its deadline, whatever the store does (stopped,
// hung, killed, restarted). A Get or Wait with timeout T ends by T +
// ClientOptions::reply_grace; every other call by ClientOptions::call_timeout. The
// deadline bounds each wait of the call: for the connection (other threads' calls hold
// it one at a time), for another thread's reconnect, for a connect and the store's
// hello, for the reply. Past it the call answers DEADLINE_EXCEEDED naming the store's
// socket and what it waited for; a connection whose reply never came is dropped, so
// the next call connects again. A Get with an infinite timeout waits as long as it
// takes (and so may calls queued behind it, up to their own deadlines).
//
// A store that restarts: the node agent restarts a store that died on the same socket
// path (node_agent/store_supervisor.h). A call that finds the connection broken (or
// breaks it) connects again, retrying with a back-off of at most 100 ms, for up to
// ClientOptions::reconnect_wait counted from when the store was first found away;
// then the call is made again on the new connection (Put, Create, Get, Wait, Delete,
// Contains, Stats, PutMany: each is safe to repeat against an empty store). Seal,
// SealKeepingReference and Abort are not repeated: the object they name was created
// in the store that died and is gone with it (UNAVAILABLE says so). The restarted
// store is empty: objects put before are lost (a Get of one waits or answers NOT_FOUND
// as for any unknown id; the SDK tells which were lost, see runtime.cc GetValue).
// ObjectRefs taken before keep the old arena mapped and stay readable. After a
// reconnect arena_base(), arena_fd() and client_id() describe the new connection.
//
// Inside: a Client is a thin layer of requests over internal::Connection (the socket,
// the mapped arena, pipelining) and internal::LeasedPuts (the lease and the overlapped
// seal of medium puts); both under object_store/internal/, not for use elsewhere.
#ifndef DROVER_OBJECT_STORE_CLIENT_H_
#define DROVER_OBJECT_STORE_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "object_store/object_id.h"

namespace drover::object_store {

namespace internal {
class Connection;
class LeasedPuts;
}  // namespace internal

// An object being written. REQUIRES: the creator writes `data` and then calls
// Client::Seal(id) (or Client::Abort(id)); if the client disconnects first, the store
// aborts the object and frees its space.
struct MutableObject {
  ObjectId id;
  absl::Span<uint8_t> data;              // writable, in the shared arena, 64-byte aligned
  absl::Span<const uint8_t> metadata;    // already written by the store
  bool mutable_object = false;           // created with Create(..., mutable_object)
};

// A reference to a sealed object, pinning it in the store (never evicted, spilled or
// freed while held). Move-only; the destructor (or Reset) releases the reference
// without waiting, ever: neither for the store's answer nor for the connection (if
// another call holds it, e.g. a Get with a long timeout, that call sends the release
// as it ends).
class ObjectRef {
 public:
  ObjectRef() = default;
  ~ObjectRef() { Reset(); }
  ObjectRef(ObjectRef&& other) noexcept { *this = std::move(other); }
  ObjectRef& operator=(ObjectRef&& other) noexcept;
  ObjectRef(const ObjectRef&) = delete;
  ObjectRef& operator=(const ObjectRef&) = delete;

  // False for a default-constructed or moved-from ref.
  bool valid() const { return conn_ != nullptr; }
  const ObjectId& id() const { return id_; }
  // The object's bytes, read-only, in place in the shared arena (64-byte aligned).
  absl::Span<const uint8_t> data() const { return data_; }
  // The metadata given at Create (e.g. a tensor header), in place in the arena.
  absl::Span<const uint8_t> metadata() const { return metadata_; }
  absl::string_view metadata_view() const {
    return absl::string_view(reinterpret_cast<const char*>(metadata_.data()), metadata_.size());
  }
  // True for a mutable object (Client::Create with mutable_object): its holders may
  // write its data in place, through mutable_data(), while they hold a reference.
  bool is_mutable() const { return mutable_; }
  // The data, writable: only for a mutable object (empty otherwise).
  absl::Span<uint8_t> mutable_data() const {
    if (!mutable_) return {};
    return absl::Span<uint8_t>(const_cast<uint8_t*>(data_.data()), data_.size());
  }
  // Releases the reference now. The ref becomes invalid.
  void Reset();

 private:
  friend class Client;
  std::shared_ptr<internal::Connection> conn_;
  ObjectId id_;
  absl::Span<const uint8_t> data_;
  absl::Span<const uint8_t> metadata_;
  bool mutable_ = false;
};

// The store's counters (see proto/object_store.proto StoreStats).
// How a Client behaves when its store goes away.
struct ClientOptions {
  // How long calls wait for a store that went away to be back (from the first call
  // that found it away) before they answer UNAVAILABLE; after that, each call tries
  // to connect once and answers at once. The agent restarts a dead store within
  // ~0.2 s (longer if it keeps dying: up to 5 s between tries).
  absl::Duration reconnect_wait = absl::Seconds(15);
  // How long the store may take to answer beyond what a call asks it to wait (a Get's
  // timeout; nothing for the other calls). A store that has not answered by then is
  // taken for stopped or hung: the call answers DEADLINE_EXCEEDED and the connection
  // is dropped (the next call connects again). At least 2 s (internal::kMinReplyWait
  // twice: a call is refused before it is sent with under 1 s left).
  absl::Duration reply_grace = absl::Seconds(5);
  // The deadline of a call that has no timeout of its own (Put, Create, Seal, Delete,
  // Contains, Stats...): waiting for the connection (held by other threads' calls),
  // for the store to be back and for the reply, all together.
  absl::Duration call_timeout = absl::Seconds(60);
};

struct StoreStats {
  uint64_t capacity = 0;
  uint64_t used = 0;
  uint64_t largest_free = 0;
  uint64_t objects = 0;
  uint64_t sealed = 0;
  uint64_t referenced = 0;
  uint64_t spilled_objects = 0;
  uint64_t spilled_bytes = 0;
  uint64_t evictions = 0;
  uint64_t spills = 0;
  uint64_t restores = 0;
  uint64_t clients = 0;
  uint64_t pending_gets = 0;
  uint64_t leased_bytes = 0;  // arena space held as leases (leased puts), part of `used`
  uint64_t leases = 0;        // leased ranges, over all clients
};

class Client {
 public:
  // Connects to the store at `socket_path`, receives the arena descriptor and maps it.
  // UNAVAILABLE if no store listens there.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const std::string& socket_path,
                                                         ClientOptions options = {});
  // The same, giving up after `connect_timeout` (at most call_timeout): a store that
  // accepts but never says hello (stopped) answers DEADLINE_EXCEEDED by then.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const std::string& socket_path,
                                                         ClientOptions options,
                                                         absl::Duration connect_timeout);

  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Allocates an unsealed object of `data_size` bytes with `metadata` in front of it
  // and returns its writable span. Follow with Seal (or Abort). `secondary` marks a
  // copy of an object whose primary lives on another node (pulled copies): under
  // memory pressure it is evicted rather than spilled. `mutable_object` makes an object
  // that stays writable by its holders after the seal (see CreateRequest in
  // proto/object_store.proto); INVALID_ARGUMENT with `secondary`.
  absl::StatusOr<MutableObject> Create(const ObjectId& id, uint64_t data_size,
                                       absl::string_view metadata = {},
                                       bool secondary = false, bool mutable_object = false);
  // Makes the object immutable and visible to every Get, and drops the creator's
  // reference (Get it to keep reading it pinned).
  absl::Status Seal(const ObjectId& id);
  // Seals as Seal does but keeps the creator's reference, returned as a ref over the
  // object's bytes (one round trip where Seal + Get take two), pinned where it was
  // written: for a creator that goes on reading what it wrote.
  // REQUIRES: `object` came from Create on this client and is neither sealed nor aborted.
  absl::StatusOr<ObjectRef> SealKeepingReference(const MutableObject& object);
  // Frees an unsealed object this client created.
  absl::Status Abort(const ObjectId& id);
  // Writes the object and seals it: visible to every client once Put returns, with no
  // reference kept. Up to kMaxInlinePut (64 KiB) of data the bytes travel in the
  // request (one round trip); up to min(4 MiB, arena/64) with metadata, they are
  // written into arena space the store leased to this client and sealed with one
  // request (one round trip; see docs/object_store.md, "Leased puts"); larger objects
  // go Create + copy + Seal (two; on failure after Create the object is aborted). Same errors in every case
  // (ALREADY_EXISTS, RESOURCE_EXHAUSTED naming the space, ...).
  absl::Status Put(const ObjectId& id, absl::Span<const uint8_t> data,
                   absl::string_view metadata = {});
  absl::Status Put(const ObjectId& id, absl::string_view data, absl::string_view metadata = {}) {
    return Put(id, absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(data.data()),
                                              data.size()),
               metadata);
  }

  // Puts many objects, pipelined: the requests of up to kMaxBatch objects go out in
  // one write, then their replies are read (~1 round trip per batch instead of one per
  // object). Objects up to kMaxInlinePut (64 KiB) travel inline in the request (the store copies them
  // in and seals them); larger ones are put one by one as by Put. Each put stands on
  // its own: on error the others stay put, and the status names the first failure and
  // how many failed. REQUIRES: ids.size() == data.size().
  static constexpr size_t kMaxBatch = 1024;
  absl::Status PutMany(const std::vector<ObjectId>& ids,
                       const std::vector<absl::Span<const uint8_t>>& data,
                       absl::string_view metadata = {});
  // Releases every ref in `*refs` (one write for up to kMaxBatch of them, without
  // waiting for the answers or for a call that holds the connection, as ~ObjectRef)
  // and clears the vector. Refs of other clients are reset.
  void Release(std::vector<ObjectRef>* refs);

  // Waits up to `timeout` for the object to be sealed and returns a reference to it.
  // absl::ZeroDuration() does not wait; absl::InfiniteDuration() waits until it comes
  // (or the store goes away). DEADLINE_EXCEEDED / NOT_FOUND if it did not come.
  absl::StatusOr<ObjectRef> Get(const ObjectId& id, absl::Duration timeout);
  // All of `ids` (at most kMaxIdsPerGet, 4096), in order, waiting up to `timeout` for all of them.
  // Pass a std::vector<ObjectId>: a bare `{"a", "b"}` is ambiguous (std::string has an
  // iterator-pair constructor).
  // All or nothing: if any is missing, the error names the missing ids and the
  // references taken to the others are released.
  absl::StatusOr<std::vector<ObjectRef>> Get(const std::vector<ObjectId>& ids,
                                             absl::Duration timeout);
  // OK once every id is sealed in the store; DEADLINE_EXCEEDED after `timeout`.
  absl::Status Wait(const std::vector<ObjectId>& ids, absl::Duration timeout);
  // Deletes the object (when its last reference goes, if it is referenced).
  absl::Status Delete(const ObjectId& id);
  // True if a sealed copy is in this node's store (in memory or spilled).
  absl::StatusOr<bool> Contains(const ObjectId& id);
  absl::StatusOr<StoreStats> Stats();
  // The same, answered by `timeout` (at most call_timeout): for a caller that must not
  // stall behind a store that stopped answering (the agent's heartbeat).
  absl::StatusOr<StoreStats> Stats(absl::Duration timeout);

  // 20 random bytes as 40 lowercase hex characters.
  static ObjectId RandomId();

  // The shared arena as mapped in this process (for checks such as "is this pointer
  // in the arena").
  const uint8_t* arena_base() const;
  uint64_t arena_capacity() const;
  // The arena's descriptor (this client's own: valid while the client lives, closed
  // with it), to map the same memory a second time with other protections: the Python
  // module maps it read-only so that writes through views of sealed objects fault.
  int arena_fd() const;
  // The id the store assigned to this connection.
  uint64_t client_id() const;
  const std::string& socket_path() const { return socket_path_; }
  // How many times this client connected again after its store went away.
  uint64_t reconnects() const;
  // When this client last found its store gone before it connected again to a
  // restarted one, with a new arena (InfinitePast if it never did; a store that was
  // only stopped or slow keeps its arena and objects): an object put in this store
  // before then, and not in it now, was lost with the store that died.
  absl::Time store_lost_at() const;

 private:
  // One connection and the leased puts over it.
  struct Link;
  Client(std::string socket_path, ClientOptions options,
         std::shared_ptr<internal::Connection> conn);
  // The current link; if it is broken, connects again first (waiting for the store as
  // ClientOptions says). UNAVAILABLE if the store is not back.
  // DEADLINE_EXCEEDED if `deadline` passes first (waiting for another thread's
  // reconnect, or connecting).
  absl::StatusOr<std::shared_ptr<Link>> Current(absl::Time deadline);
  // Runs `f(link)` on the current link and, if the link broke meanwhile (its store went
  // away) and the deadline has not passed, once more on a new one.
  template <typename F>
  auto Run(absl::Time deadline, F&& f) -> decltype(f(std::declval<Link&>()));
  // The deadline of a call with no timeout of its own (call_timeout from now).
  absl::Time CallDeadline() const;
  absl::StatusOr<MutableObject> CreateOn(Link& link, const ObjectId& id, uint64_t data_size,
                                         absl::string_view metadata, bool secondary,
                                         bool mutable_object, absl::Time deadline);
  absl::Status SealOn(Link& link, const ObjectId& id, absl::Time deadline);
  absl::Status AbortOn(Link& link, const ObjectId& id, absl::Time deadline);
  // The status of a Seal/Abort that failed because the store went away.
  absl::Status LostBeforeSeal(Link& link, const ObjectId& id, absl::Status s);

  const std::string socket_path_;
  const ClientOptions options_;
  mutable absl::Mutex link_mu_;
  // The transport (internal/connection.h), shared with the ObjectRefs handed out.
  std::shared_ptr<Link> link_ ABSL_GUARDED_BY(link_mu_);
  // Links that broke, kept mapped so that spans of MutableObjects created on them do
  // not dangle (the last few only: each keeps a dead store's arena mapped).
  std::vector<std::shared_ptr<Link>> retired_ ABSL_GUARDED_BY(link_mu_);
  // When the store was first found away (InfiniteFuture while connected).
  absl::Time away_since_ ABSL_GUARDED_BY(link_mu_) = absl::InfiniteFuture();
  uint64_t reconnects_ ABSL_GUARDED_BY(link_mu_) = 0;
  absl::Time lost_at_ ABSL_GUARDED_BY(link_mu_) = absl::InfinitePast();
  // True while one thread connects again (without link_mu_: a connect may wait for a
  // hello); the others wait for its outcome, each until its own deadline.
  bool reconnecting_ ABSL_GUARDED_BY(link_mu_) = false;
};

}  // namespace drover::object_store

#endif  // DROVER_OBJECT_STORE_CLIENT_H_
