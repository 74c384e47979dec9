// RequestSwitch: what the store does with each StoreRequest. It parses a frame,
// checks the request (ids, sizes, limits), dispatches on its kind to the object table
// (object_table.h), and answers through the reactor (store_reactor.h). It also owns
// what outlives one request: the Gets waiting for seals (pending_gets.h), the
// subscribers and their events, and the server side of leased puts' overlapped seals
// (the ready word and its acknowledgement in the arena).
//
// Ownership: owns the ObjectTable; borrows the arena and the reactor, which must
// outlive it. Thread safety: none; the store's loop thread calls everything.
#ifndef DROVER_OBJECT_STORE_REQUEST_SWITCH_H_
#define DROVER_OBJECT_STORE_REQUEST_SWITCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "object_store/arena.h"
#include "object_store/object_id.h"
#include "object_store/object_table.h"
#include "object_store/pending_gets.h"
#include "object_store/store_reactor.h"
#include "object_store/store_server.h"
#include "proto/object_store.pb.h"

namespace drover::object_store {

class RequestSwitch {
 public:
  RequestSwitch(Arena* arena, StoreReactor* reactor, const ServerOptions& options);
  RequestSwitch(const RequestSwitch&) = delete;
  RequestSwitch& operator=(const RequestSwitch&) = delete;

  // Handles one frame of `c` and queues its reply (a Get that must wait is parked).
  // A frame that does not parse gets an INVALID_ARGUMENT reply with request id 0.
  void HandleFrame(StoreConn& c, absl::string_view body);
  // Answers the Gets waiting for objects sealed since the last call.
  void ProcessSealed();
  // True (once) if the last frame was a leased put's seal, whose reply should go out
  // before the frames behind it are handled.
  bool TakeFlushNow() {
    const bool f = flush_now_;
    flush_now_ = false;
    return f;
  }

  // Answers, DEADLINE_EXCEEDED for what is missing, the Gets whose timeout passed.
  void ExpireGets(absl::Time now);
  // The earliest timeout of a waiting Get (InfiniteFuture if none).
  absl::Time NextDeadline() const { return pending_.NextDeadline(); }
  // `client`'s connection closed (`why`): its Gets and subscription are dropped, its
  // unsealed objects aborted, its references and leases released.
  void OnDisconnected(ClientId client, const std::string& why);

 private:
  absl::Status HandleCreate(StoreConn& c, const proto::CreateRequest& r);
  void HandleGet(StoreConn& c);
  absl::Status HandleDelete(const ObjectId& id);
  void HandleSubscribe(StoreConn& c);
  absl::Status HandleSealLeased(StoreConn& c, const proto::SealLeasedRequest& r);
  // Fills a Get's result from the table. True if it is settled (found or failed for
  // good), false if the object is absent or unsealed and may still come.
  bool TryGet(ClientId client, const std::string& id, proto::GetResult* result);
  // Sends a finished Get's reply, first saying why each result in `waiting` is missing.
  void AnswerGet(ClientId client, proto::StoreReply* reply, const std::vector<char>& waiting,
                 bool timed_out);
  // An overlapped seal's ready slot (SealLeasedRequest.ready_offset): a 64-aligned
  // 64-byte range the client leased, outside the object.
  absl::Status CheckReadySlot(const StoreConn& c, const proto::SealLeasedRequest& r);
  // Waits (up to ServerOptions::ready_wait) until the client stored the ready value.
  absl::Status AwaitReady(const proto::SealLeasedRequest& r);
  // Copies an inline put's bytes into its new object, seals it and drops the creator's
  // reference; aborts the object if that fails.
  absl::Status FinishInlinePut(ClientId client, const ObjectId& id, const ObjectLocation& loc,
                               const std::string& data);
  void SendEvent(StoreConn& c, uint64_t request_id, proto::StoreEvent::Kind kind,
                 const ObjectInfo& info);
  // Tells every subscriber. Runs inside table callbacks too: it touches only the
  // connections, never the table.
  void Publish(proto::StoreEvent::Kind kind, const ObjectInfo& info);
  void FillStats(proto::StoreStats* out);

  Arena* const arena_;
  StoreReactor* const reactor_;
  const absl::Duration ready_wait_;  // ServerOptions::ready_wait
  ObjectTable table_;
  PendingGets pending_;
  std::vector<ObjectId> sealed_;  // filled by the table's on_sealed callback
  // Connections that sent Subscribe, and the request id their events carry.
  absl::flat_hash_map<ClientId, uint64_t> subscribers_;
  bool flush_now_ = false;  // set by a leased put: send its reply before the next frame

  // Reused for every request, so the hot path allocates little.
  proto::StoreRequest request_;
  proto::StoreReply reply_;
  proto::StoreReply event_;  // not reply_: events go out while a reply is being built
};

}  // namespace drover::object_store

#endif  // DROVER_OBJECT_STORE_REQUEST_SWITCH_H_
