// QueueBook: the state and rules of one drover::Queue, without I/O: the items in
// order, the capacity, the puts waiting for room and the gets waiting for items, their
// deadlines, and close. Each call says which requests to answer now and how; the host
// (queue_host.h) sends the answers.
//
// Rules: FIFO over all producers (so each producer's items stay in its order); a put
// waits while `capacity` items are queued (0: unbounded) and waiting puts are served
// in arrival order, as are waiting gets; Close lets gets take what is left, then
// answers OUT_OF_RANGE, and answers every put (and every waiting put) with
// FAILED_PRECONDITION; a wait past its deadline is answered DEADLINE_EXCEEDED.
//
// Thread safety: none; the host's thread owns it.
#ifndef DROVER_SDK_RUNTIME_QUEUE_BOOK_H_
#define DROVER_SDK_RUNTIME_QUEUE_BOOK_H_

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "proto/queue.pb.h"

namespace drover::internal {

class QueueBook {
 public:
  // A reply for request `request_id` of connection `conn`.
  struct Answer {
    uint64_t conn = 0;
    proto::QueueReply reply;
  };

  // `name` is how errors call the queue ("queue 'frames'").
  QueueBook(std::string name, uint64_t capacity);

  std::vector<Answer> Put(uint64_t conn, uint64_t request_id, proto::QueuePut put, absl::Time now);
  std::vector<Answer> Get(uint64_t conn, uint64_t request_id, const proto::QueueGet& get,
                          absl::Time now);
  std::vector<Answer> Close(uint64_t conn, uint64_t request_id);
  // The waits whose deadline is at or before `now`, answered DEADLINE_EXCEEDED.
  std::vector<Answer> Expire(absl::Time now);
  // `conn` is gone: its waits are dropped (a waiting put's item is not queued: the
  // store objects it owned are returned, to be deleted).
  std::vector<proto::StoredObject> Disconnected(uint64_t conn);

  proto::QueueStats Stats() const;
  // The earliest deadline of a wait (InfiniteFuture if none).
  absl::Time NextDeadline() const;
  // The store objects of the items still queued.
  std::vector<proto::StoredObject> Owned() const;

 private:
  struct Wait {
    uint64_t conn = 0;
    uint64_t request_id = 0;
    absl::Time deadline;
    uint32_t max_items = 1;
    proto::QueueItem item;  // a waiting put's
  };

  bool Full() const { return capacity_ > 0 && items_.size() >= capacity_; }
  void Push(proto::QueueItem item);
  // Takes up to `max` items into `reply`.
  void Take(uint32_t max, proto::QueueReply* reply);
  // Moves waiting puts into free room and serves waiting gets from the items, as far as
  // they go; appends their answers.
  void Settle(std::vector<Answer>* out);
  static Answer Reply(uint64_t conn, uint64_t request_id);
  static Answer Fail(uint64_t conn, uint64_t request_id, int code, std::string message);
  std::string Describe() const;

  const std::string name_;
  const uint64_t capacity_;
  std::deque<proto::QueueItem> items_;
  std::deque<Wait> puts_;
  std::deque<Wait> gets_;
  bool closed_ = false;
  uint64_t put_count_ = 0;
  uint64_t get_count_ = 0;
  uint64_t stored_bytes_ = 0;
  uint64_t ends_seen_ = 0;  // gets answered OUT_OF_RANGE
};

// The deadline of a wait of `timeout_ms` (negative: none) from `now`.
absl::Time WaitDeadline(int64_t timeout_ms, absl::Time now);

}  // namespace drover::internal

#endif  // DROVER_SDK_RUNTIME_QUEUE_BOOK_H_
