// ObjectServer: the serving half of object transfer (object_transfer.h). Streams a
// sealed object of this node's store to a reader: in ObjectChunks over the ReadObject
// stream, each chunk's data a slice pointing into the pinned object (no user-space
// copy), or, when the reader asks for it, over a one-time raw TCP connection
// (object_transfer_raw.h) offered on that stream. The object stays pinned
// (LocalObjects::Acquire) until the last slice handed to gRPC is gone, the raw send
// ends, or the read fails or is cancelled.
//
// Ownership: borrows `local`, which must outlive it. Thread safety: thread-safe; each
// ServeRead runs on the gRPC thread that serves its stream.
#ifndef DROVER_NODE_AGENT_OBJECT_TRANSFER_SERVE_H_
#define DROVER_NODE_AGENT_OBJECT_TRANSFER_SERVE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/byte_buffer.h"
#include "node_agent/local_objects.h"
#include "node_agent/object_transfer_options.h"
#include "proto/node_agent.pb.h"

namespace drover {

class ObjectServer {
 public:
  // Writes one encoded ObjectChunk to the reader; false when the reader went away.
  // `write_through`: the message must be on the socket when it returns (not only
  // queued in gRPC's transport).
  using WriteChunk = std::function<bool(grpc::ByteBuffer*, bool write_through)>;

  // `node` (this node's id, for messages) must outlive it.
  ObjectServer(const ObjectTransferOptions& options, LocalObjects* local,
               const NodeIdentity* node)
      : options_(WithTransport(options)), local_(local), node_(node) {}
  ObjectServer(const ObjectServer&) = delete;
  ObjectServer& operator=(const ObjectServer&) = delete;

  // Streams `req.object_id` from `req.offset` through `write` (see
  // ObjectTransfer::ServeRead). NOT_FOUND if this node has no sealed copy,
  // INVALID_ARGUMENT for a bad offset, CANCELLED if `write` failed or `cancelled`
  // (may be null) says the reader's call was cancelled.
  absl::Status ServeRead(const proto::ReadObjectRequest& req, const WriteChunk& write,
                         const std::function<bool()>& cancelled = nullptr);

  // Makes running raw sends stop (CANCELLED). Idempotent.
  void Shutdown() { stop_ = true; }

  // The serving counters (reads_*, bytes_served, raw_reads); the others stay 0.
  ObjectTransferStats stats();

 private:
  // Serves one raw-TCP offer on listening socket `lfd` (closed by it).
  absl::Status ServeRaw(const std::string& id, const ReadView& view, int64_t offset, int lfd,
                        int port, const WriteChunk& write,
                        const std::function<bool()>& cancelled);
  const ObjectTransferOptions options_;
  LocalObjects* const local_;
  const NodeIdentity* const node_;
  std::atomic<bool> stop_{false};
  absl::Mutex mu_;
  ObjectTransferStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace drover

#endif  // DROVER_NODE_AGENT_OBJECT_TRANSFER_SERVE_H_
