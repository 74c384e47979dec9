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
// Data path. Over gRPC, each chunk is an ObjectChunk encoded by hand around a slice that
// points into the pinned object (no user-space copy on the serving side); the puller
// copies it once from the received slices into the store. Faster (the default): the
// puller asks for a raw-TCP offer (ReadObjectRequest.raw_tcp_ip = the holder's IP as
// the puller reaches it); the holder listens on that address only (port 0, one
// connection, closed after), answers with the port and a random 32-byte one-time
// token in the stream's first message, waits up to raw_connect_timeout for a
// connection presenting the token, and sends the bytes straight from the pinned
// object with send(); the puller recv()s them straight into the store allocation. So
// the only copies are the kernel's, as for plain TCP. The gRPC stream stays open for
// the whole transfer (it carries the holder's final status) and is cancelled if the
// raw connection breaks. If the raw connection cannot be made at all (a firewall,
// a holder without this feature), the same holder is asked again for chunks over gRPC.
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

#include <atomic>
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
#include "grpcpp/support/byte_buffer.h"
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
  // Move object data over a one-time plain TCP connection negotiated on the ReadObject
  // stream (see the file comment). Pulling: ask holders for it; serving: offer it when
  // asked. Either side can turn it off; the data then travels in ObjectChunks.
  bool raw_tcp = true;
  // How long a holder waits for the reader's raw connection (and its token), and how
  // long a reader tries to connect.
  absl::Duration raw_connect_timeout = absl::Seconds(5);
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
  int64_t raw_reads = 0;        // ReadObject streams whose data went over raw TCP
  int64_t raw_pulls = 0;        // pulls whose data came over raw TCP (incl. failed)
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
  // Each chunk is handed to `write` as an encoded ObjectChunk whose data slice points
  // into the pinned object (no copy); the pin is held until gRPC drops the last slice.
  // `write_through`: the message must be on the socket when `write` returns (not
  // only queued in gRPC's transport). `cancelled` (may be null) says whether the
  // reader's call was cancelled.
  using WriteChunk = std::function<bool(grpc::ByteBuffer*, bool write_through)>;
  absl::Status ServeRead(const proto::ReadObjectRequest& req, const WriteChunk& write,
                         const std::function<bool()>& cancelled = nullptr);

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
  // One stream; `raw_ip` non-empty asks for a raw-TCP offer. `*raw_unreachable` is set
  // when the offer came but no raw connection could be made (nothing was received).
  absl::Status PullOnce(const Holder& holder, const std::string& id, absl::Time deadline,
                        const std::string& raw_ip, int64_t* size, bool* fatal,
                        bool* raw_unreachable);
  // Receives `want` bytes into `dst` over a raw connection to ip:port; `*got` counts
  // them. `*connected` says whether the connection and token got through.
  absl::Status ReceiveRaw(const std::string& ip, int port, const std::string& token,
                          uint8_t* dst, int64_t want, absl::Time deadline, int64_t* got,
                          bool* connected);
  // Serves one raw-TCP offer on listening socket `lfd` (closed by it).
  absl::Status ServeRaw(const std::string& id, const ReadView& view, int64_t offset, int lfd,
                        int port, const WriteChunk& write,
                        const std::function<bool()>& cancelled);
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

  std::atomic<bool> stop_{false};  // Shutdown was called (read without mu_)
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
