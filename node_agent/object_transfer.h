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
//    Asked to wait for a holder (FetchObjectRequest.wait_for_holder), a Fetch of an
//    object no live node holds yet first waits in the directory (GetObjectLocations
//    with a wait, woken when any node reports a copy, this one included) instead of
//    answering NOT_FOUND.
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
// Units: ObjectTransfer composes the serving half (object_transfer_serve.h) and the
// pulling half (object_transfer_pull.h), which share the ObjectChunk codec
// (object_transfer_codec.h) and the raw-TCP path (object_transfer_raw.h).
//
// Thread safety: all public methods are thread-safe. `local` must outlive this object.
#ifndef DROVER_NODE_AGENT_OBJECT_TRANSFER_H_
#define DROVER_NODE_AGENT_OBJECT_TRANSFER_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/byte_buffer.h"
#include "node_agent/local_objects.h"
#include "node_agent/object_transfer_options.h"
#include "node_agent/object_transfer_pull.h"
#include "node_agent/object_transfer_serve.h"
#include "proto/node_agent.pb.h"

namespace drover {

class ObjectTransfer {
 public:
  using FetchResult = ObjectPuller::FetchResult;

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
  using WriteChunk = ObjectServer::WriteChunk;
  absl::Status ServeRead(const proto::ReadObjectRequest& req, const WriteChunk& write,
                         const std::function<bool()>& cancelled = nullptr) {
    return server_.ServeRead(req, write, cancelled);
  }

  // Makes `id` present and sealed in the local store; see the file comment. Errors:
  // NOT_FOUND (no live node holds it), RESOURCE_EXHAUSTED (no room here), UNAVAILABLE
  // (the directory is unreachable, or every holder failed: the message names each
  // holder, its address and how many bytes had arrived), DEADLINE_EXCEEDED, ABORTED
  // (another local writer is creating the same id; retry). With `wait_for_holder`, an
  // object that no live node holds yet is waited for (in the directory, until
  // `deadline`) instead of answered with NOT_FOUND.
  absl::StatusOr<FetchResult> Fetch(const std::string& id, absl::Time deadline,
                                    bool wait_for_holder = false) {
    return puller_.Fetch(id, deadline, wait_for_holder);
  }

  // How far the pull of `id` running now has come; nullopt if none runs.
  std::optional<ObjectPuller::Progress> PullProgress(const std::string& id) {
    return puller_.PullProgress(id);
  }

  // Cancels running pulls (their Fetches return UNAVAILABLE) and refuses new ones.
  // Serving is stopped by shutting down the gRPC server. Idempotent.
  void Shutdown();

  ObjectTransferStats stats();

  // Server arguments that let peers' keepalive pings through (a server otherwise
  // answers frequent pings on an idle stream with GOAWAY). Call on the server that
  // registers the ObjectTransfer service.
  static void ConfigureServer(grpc::ServerBuilder* builder);

 private:
  NodeIdentity node_;
  ObjectServer server_;
  ObjectPuller puller_;
};

}  // namespace drover

#endif  // DROVER_NODE_AGENT_OBJECT_TRANSFER_H_
