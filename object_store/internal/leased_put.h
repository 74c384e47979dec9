// LeasedPuts: medium-sized puts in one round trip, written into arena space the store
// leased to this client (Lease, SealLeased, ReturnLease in proto/object_store.proto;
// docs/object_store.md, "Leased puts"), with the seal overlapped with the end of the
// copy and acknowledged in shared memory.
//
// The lease: at most one range, carved front to back, [cursor, end). A put takes its
// block under the connection's lock, writes metadata and data outside it, and seals
// with one request. When what is left would not hold the next put (sized as the
// largest of the recent ones), the seal's write also returns the rest and asks for a
// new lease of that size; the store answers the seal first and at once, and the lease
// after it. Those answers are set aside by whichever read meets them
// (Connection::SetAsideLocked) and taken up by the next put, so a refill costs no
// round trip of its own. At most one refill is in flight. A lease is sized for one put,
// not many: the store places each new lease best-fit, so a put-and-delete loop keeps
// reusing the same few blocks (cache-warm, already mapped in this process), where a
// large lease carved front to back would walk through fresh, cold memory.
//
// Overlapped seal: for puts of kMinOverlappedPut or more, the seal goes out while the
// last part of the copy is still running; the store waits for a ready word this client
// stores when the copy is done (SealLeasedRequest.ready_value) and acknowledges in the
// word after it, so the put usually returns without reading the socket.
//
// Ownership: borrows the Connection, which must outlive it. Thread safety: all state
// is guarded by the connection's mutex; TryPut may be called from any thread
// (concurrent puts copy in parallel, each into its own block).
#ifndef DROVER_OBJECT_STORE_INTERNAL_LEASED_PUT_H_
#define DROVER_OBJECT_STORE_INTERNAL_LEASED_PUT_H_

#include <atomic>
#include <cstdint>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "object_store/internal/connection.h"
#include "object_store/object_id.h"
#include "proto/object_store.pb.h"

namespace drover::object_store::internal {

class LeasedPuts {
 public:
  // Largest block (metadata + data, each rounded to 64) put from a lease, and so the
  // most a client reserves (also at most 1/64 of the arena). Larger objects take
  // Create + Seal, whose second round trip is small beside their copy (~250 µs at
  // 4 MiB).
  static constexpr uint64_t kMaxLeasedBlock = 4u << 20;

  explicit LeasedPuts(Connection* conn);
  LeasedPuts(const LeasedPuts&) = delete;
  LeasedPuts& operator=(const LeasedPuts&) = delete;

  // Puts the object from the lease and returns the put's outcome; nullopt if it did
  // not (no lease to be had, the object too large for one, or a store that does not
  // know leases): the caller then puts it with Create + Seal. Waits (for the
  // connection, for the store's answers) until `deadline` at most.
  std::optional<absl::Status> TryPut(const ObjectId& id, absl::Span<const uint8_t> data,
                                     absl::string_view metadata, absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(conn_->mu());

 private:
  // Takes up the answers to a refill sent with an earlier put's seal.
  absl::Status TakeRefillLocked(absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(conn_->mu());
  // Appends, to the batch being built, the return of what is left of the lease (if
  // anything) and a Lease request for `bytes`: two frames, or one.
  absl::Status AppendRefillLocked(uint64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(conn_->mu());
  // Reply `i` of the frames AppendRefillLocked appended.
  void OnRefillReplyLocked(int i, const proto::StoreReply& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(conn_->mu());
  bool LeaseWantedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(conn_->mu());
  // The lease as it is before AppendRefillLocked forgets it (the refill returns its
  // rest), and putting it back if the refill was never sent: a call with no time left
  // to send fails without touching the connection, and a forgotten rest would stay
  // leased, unused, until the client disconnects.
  struct Lease {
    uint64_t cursor;
    uint64_t end;
  };
  Lease KeptLeaseLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(conn_->mu());
  void KeepLeaseUnlessSentLocked(const Lease& kept) ABSL_EXCLUSIVE_LOCKS_REQUIRED(conn_->mu());
  // Starts a batch with the seal of the block at `offset`; ready_value 0: the object is
  // complete already.
  absl::Status AppendSealLocked(const ObjectId& id, uint64_t offset, uint64_t data_size,
                                uint64_t metadata_size, uint64_t ready_value)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(conn_->mu());
  // Leases the 64-byte range that holds this client's ready word, once; kept until the
  // client disconnects. Without it, seals are not overlapped.
  void GetReadySlotLocked(absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(conn_->mu());
  // The word after the ready word, where the store acknowledges an overlapped seal.
  const std::atomic<uint64_t>* SealAck() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(conn_->mu());
  // Spins (up to kSpin) for the store's acknowledgement of the overlapped seal with
  // `ready_value`. True if the object is sealed; false if the store says it is not, or
  // is slow to say (then the reply on the socket tells).
  bool AwaitSealAckLocked(uint64_t ready_value) ABSL_EXCLUSIVE_LOCKS_REQUIRED(conn_->mu());

  static constexpr int kLeaseHistory = 8;

  Connection* const conn_;
  const uint64_t max_leased_block_;  // 0: the arena is too small to lease
  // The sizes of the last kLeaseHistory leased puts (a lease is sized for the largest).
  uint64_t recent_blocks_[kLeaseHistory] ABSL_GUARDED_BY(conn_->mu()) = {};
  uint64_t recent_next_ ABSL_GUARDED_BY(conn_->mu()) = 0;
  // The lease: [lease_cursor_, lease_end_), empty if equal.
  uint64_t lease_cursor_ ABSL_GUARDED_BY(conn_->mu()) = 0;
  uint64_t lease_end_ ABSL_GUARDED_BY(conn_->mu()) = 0;
  // Whether the refill last appended starts with a ReturnLease.
  bool refill_returns_ ABSL_GUARDED_BY(conn_->mu()) = false;
  // A refill went out with a seal; its answers are set aside in the connection.
  bool refill_in_flight_ ABSL_GUARDED_BY(conn_->mu()) = false;
  bool lease_unsupported_ ABSL_GUARDED_BY(conn_->mu()) = false;
  absl::Time lease_retry_after_ ABSL_GUARDED_BY(conn_->mu()) = absl::InfinitePast();
  // Overlapped seals: the leased 64-byte range of the ready word (0: none), whether it
  // was asked for, and the last ready value used.
  uint64_t ready_slot_ ABSL_GUARDED_BY(conn_->mu()) = 0;
  bool ready_slot_tried_ ABSL_GUARDED_BY(conn_->mu()) = false;
  uint64_t ready_seq_ ABSL_GUARDED_BY(conn_->mu()) = 0;
  // Whether the store acknowledges overlapped seals in shared memory (false once a
  // store sealed without writing the acknowledgement).
  bool seal_acks_ ABSL_GUARDED_BY(conn_->mu()) = true;
};

}  // namespace drover::object_store::internal

#endif  // DROVER_OBJECT_STORE_INTERNAL_LEASED_PUT_H_
