// ObjectTransfer: moves sealed objects between the object stores of different nodes.
//
//  - Serving side (ServeRead): streams an object out of this node's store in chunks
//    of `chunk_bytes` (4 MiB). The object stays pinned (LocalObjects::Acquire) for the
//    whole stream and is released when it ends, fails or is cancelled.
//  - Pulling side (Fetch): makes an object present here. Local -> done. Otherwise asks
//    the scheduler's object directory (GetObjectLocations) which live nodes hold it,
//    streams ReadObject from the first holder straight into the buffer returned by
//    LocalObjects::CreateSecondary (each chunk is copied once, in place; no staging
//    copy of the whole object), seals it and reports the new copy to the directory
//    (AddObjectLocations). Holders are tried in the directory's order; a holder that
//    fails mid-stream costs the partial copy (aborted) and the next holder is tried.
//
// Bytes in flight are bounded by gRPC's flow control on the one stream of a pull
// (the receiver takes a chunk only when the previous one was written into the store)
// plus the store's own allocation: CreateSecondary fails with RESOURCE_EXHAUSTED when
// there is no room, and Fetch returns that error as-is.
//
// Concurrent Fetches of one id share one pull: the first caller runs it, the others
// wait (each up to its own deadline) and get its result.
//
// Nothing waits forever: every call to the scheduler or a peer has a deadline (the
// Fetch deadline), and peer channels send HTTP/2 keepalive pings so that a peer that
// vanished (host down, cable pulled) fails the stream within ~keepalive_time +
// keepalive_timeout even when the deadline is far away.
//
// Thread safety: all public methods are thread-safe. `local` must outlive this object.
#ifndef DROVER_NODE_AGENT_OBJECT_TRANSFER_H_
#define DROVER_NODE_AGENT_OBJECT_TRANSFER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/server_builder.h"
#include "node_agent/local_objects.h"
#include "proto/node_agent.grpc.pb.h"
#include "proto/scheduler.grpc.pb.h"

namespace drover {

struct ObjectTransferOptions {
  // The cluster token, sent on every outbound call.
  std::string token;
  // host:port of the scheduler (the object directory).
  std::string scheduler_address;
  // Largest ObjectChunk.data served.
  int64_t chunk_bytes = 4 << 20;
  // Keepalive on peer channels: ping after this much silence on a connection with an
  // active call, and drop the connection if the ping is not answered in time.
  absl::Duration keepalive_time = absl::Seconds(2);
  absl::Duration keepalive_timeout = absl::Seconds(3);
  // Upper bound for directory calls (also capped by the Fetch deadline).
  absl::Duration directory_timeout = absl::Seconds(5);
};

// Counters since construction, for tests, logs and a future /metrics.
struct ObjectTransferStats {
  int64_t reads_started = 0;    // ReadObject streams that found their object
  int64_t reads_completed = 0;  // ... and sent it to the end
  int64_t bytes_served = 0;
  int64_t pulls_started = 0;    // Fetches that had to pull (one per shared transfer)
  int64_t pulls_succeeded = 0;
  int64_t bytes_pulled = 0;     // bytes written into the store by pulls, incl. aborted
  int64_t fetches_joined = 0;   // Fetches that waited on another caller's pull
};

class ObjectTransfer {
 public:
  struct FetchResult {
    int64_t size = 0;
    // Node the copy came from; this node's id if it was already here.
    std::string source_node;
  };

  ObjectTransfer(ObjectTransferOptions options, LocalObjects* local);
  // Calls Shutdown().
  ~ObjectTransfer();
  ObjectTransfer(const ObjectTransfer&) = delete;
  ObjectTransfer& operator=(const ObjectTransfer&) = delete;

  // This node's id in the scheduler (needed to report pulled copies and to skip
  // itself in the directory's list). Until set, pulled copies are not reported.
  void SetNodeId(const std::string& node_id);

  // Streams `req.object_id` from `req.offset` through `write`, which returns false when
  // the reader went away. NOT_FOUND if this node has no sealed copy, INVALID_ARGUMENT
  // for a bad offset, CANCELLED if `write` failed.
  absl::Status ServeRead(const proto::ReadObjectRequest& req,
                         const std::function<bool(const proto::ObjectChunk&)>& write);

  // Makes `id` present and sealed in the local store; see the file comment. Errors:
  // NOT_FOUND (no live node holds it), RESOURCE_EXHAUSTED (no room here), UNAVAILABLE
  // (the directory is unreachable, or every holder failed: the message names each
  // holder, its address and how many bytes had arrived), DEADLINE_EXCEEDED, ABORTED
  // (another local writer is creating the same id; retry).
  absl::StatusOr<FetchResult> Fetch(const std::string& id, absl::Time deadline);

  // Cancels running pulls (their Fetches return UNAVAILABLE) and refuses new ones.
  // Serving is stopped by shutting down the gRPC server. Idempotent.
  void Shutdown();

  ObjectTransferStats stats();

  // Server arguments that let peers' keepalive pings through (a server otherwise
  // answers frequent pings on an idle stream with GOAWAY). Call on the server that
  // registers the ObjectTransfer service.
  static void ConfigureServer(grpc::ServerBuilder* builder);

 private:
  struct Pull {
    absl::Notification done;
    absl::StatusOr<FetchResult> result;  // written before `done` is notified
  };
  struct Holder {
    std::string node_id;
    std::string address;
  };

  absl::StatusOr<FetchResult> RunPull(const std::string& id, absl::Time deadline);
  // One attempt from one holder. On failure the partial copy is aborted; `*fatal` says
  // whether trying another holder is pointless (local store error, deadline).
  absl::Status PullFrom(const Holder& holder, const std::string& id, absl::Time deadline,
                        int64_t* size, bool* fatal);
  absl::StatusOr<std::vector<Holder>> FindHolders(const std::string& id, absl::Time deadline);
  void ReportCopy(const std::string& id, int64_t size);
  // The channel to a peer (one per address, kept; tuned for bulk transfer).
  std::shared_ptr<grpc::Channel> PeerChannel(const std::string& address);
  // Registers a client context so that Shutdown can cancel it; false if shutting down.
  bool Track(grpc::ClientContext* ctx);
  void Untrack(grpc::ClientContext* ctx);
  std::string NodeId();

  const ObjectTransferOptions options_;
  LocalObjects* const local_;
  std::unique_ptr<proto::Scheduler::Stub> scheduler_;

  absl::Mutex mu_;
  std::string node_id_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, std::shared_ptr<Pull>> pulls_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<grpc::Channel>> peers_ ABSL_GUARDED_BY(mu_);
  std::set<grpc::ClientContext*> active_ ABSL_GUARDED_BY(mu_);
  ObjectTransferStats stats_ ABSL_GUARDED_BY(mu_);
};

// An object id for messages: printable ids as they are, others C-escaped.
std::string PrintableObjectId(const std::string& id);

}  // namespace drover

#endif  // DROVER_NODE_AGENT_OBJECT_TRANSFER_H_
