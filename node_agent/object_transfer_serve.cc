#include "node_agent/object_transfer_serve.h"

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "node_agent/object_transfer_codec.h"
#include "node_agent/object_transfer_raw.h"

namespace drover {
namespace {

// One pin of a served object, shared by ServeRead and every data slice it handed to
// gRPC: the store's pin is dropped when the last of them is gone (gRPC may hold a
// slice until the transport has written it, after Write returned).
struct SharedPin {
  std::atomic<int> refs{1};
  LocalObjects* local;
  std::string id;
  void Unref() {
    if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      local->Release(id);
      delete this;
    }
  }
  static void SliceDestroyed(void* p) { static_cast<SharedPin*>(p)->Unref(); }
};

}  // namespace

ObjectTransferStats ObjectServer::stats() {
  absl::MutexLock lock(&mu_);
  return stats_;
}

absl::Status ObjectServer::ServeRead(const proto::ReadObjectRequest& req,
                                     const WriteChunk& write,
                                     const std::function<bool()>& cancelled) {
  const std::string& id = req.object_id();
  if (id.empty()) return absl::InvalidArgumentError("ReadObject needs an object id");
  auto view = local_->Acquire(id);
  if (!view.ok()) {
    if (view.status().code() == absl::StatusCode::kNotFound) {
      return absl::NotFoundError(absl::StrCat("object ", PrintableObjectId(id),
                                              " is not in the object store of node ",
                                              node_->ForMessages()));
    }
    return view.status();
  }
  auto* pin = new SharedPin;
  pin->local = local_;
  pin->id = id;
  absl::Cleanup release = [pin] { pin->Unref(); };
  if (req.offset() < 0 || req.offset() > view->size) {
    return absl::InvalidArgumentError(absl::StrCat("ReadObject of ", PrintableObjectId(id),
                                                   ": offset ", req.offset(),
                                                   " is outside [0, ", view->size, "]"));
  }
  {
    absl::MutexLock lock(&mu_);
    ++stats_.reads_started;
  }
  if (options_.raw_tcp && !req.raw_tcp_ip().empty()) {
    int port = 0;
    int lfd = ListenOn(req.raw_tcp_ip(), &port);
    if (lfd >= 0) return ServeRaw(id, *view, req.offset(), lfd, port, write, cancelled);
    DROVER_LOG(DEBUG) << "ReadObject of " << PrintableObjectId(id) << ": cannot listen on "
                      << req.raw_tcp_ip() << " (" << std::strerror(errno)
                      << "); sending chunks over gRPC";
  }
  // Each ObjectChunk: a small header slice (object_transfer_codec.h), then a slice that
  // points at the pinned object bytes. No user-space copy before the kernel's.
  int64_t off = req.offset();
  bool first = true;
  std::string header;
  do {
    int64_t n = std::min(options_.chunk_bytes, view->size - off);
    header.clear();
    AppendChunkHeader(off, view->size,
                      first ? absl::string_view(view->metadata) : absl::string_view(),
                      static_cast<uint64_t>(n), &header);
    grpc::Slice slices[2] = {grpc::Slice(header), grpc::Slice()};
    size_t nslices = 1;
    if (n > 0) {
      pin->refs.fetch_add(1, std::memory_order_relaxed);
      slices[1] = grpc::Slice(const_cast<uint8_t*>(view->data) + off, static_cast<size_t>(n),
                              &SharedPin::SliceDestroyed, pin);
      nslices = 2;
    }
    grpc::ByteBuffer message(slices, nslices);
    if (!write(&message, /*write_through=*/false)) {
      return absl::CancelledError(absl::StrCat("the reader of ", PrintableObjectId(id),
                                               " went away after ", off - req.offset(),
                                               " bytes"));
    }
    off += n;
    first = false;
    absl::MutexLock lock(&mu_);
    stats_.bytes_served += n;
  } while (off < view->size);
  absl::MutexLock lock(&mu_);
  ++stats_.reads_completed;
  return absl::OkStatus();
}

absl::Status ObjectServer::ServeRaw(const std::string& id, const ReadView& view,
                                    int64_t offset, int lfd, int port, const WriteChunk& write,
                                    const std::function<bool()>& cancelled) {
  ScopedFd listener(lfd);
  DROVER_ASSIGN_OR_RETURN(const std::string token, NewRawToken());
  // The offer: where the data starts, its metadata, the port and the token; no data.
  std::string header;
  AppendRawOffer(offset, view.size, view.metadata, port, token, &header);
  grpc::Slice slice(header);
  grpc::ByteBuffer offer(&slice, 1);
  // Written through to the socket before this thread blocks in accept: otherwise the
  // offer can sit in gRPC's transport until something else (the puller's keepalive
  // ping, 2 s later) makes the sync server flush it.
  if (!write(&offer, /*write_through=*/true)) {
    return absl::CancelledError(absl::StrCat("the reader of ", PrintableObjectId(id),
                                             " went away before its raw connection"));
  }
  const std::function<bool()> is_cancelled = [&] {
    return stop_.load() || (cancelled && cancelled());
  };
  DROVER_ASSIGN_OR_RETURN(
      std::unique_ptr<SocketStream> conn,
      AcceptRawReader(listener.get(), token, *options_.transport, options_.raw_connect_timeout,
                      is_cancelled, PrintableObjectId(id)));
  {
    absl::MutexLock lock(&mu_);
    ++stats_.raw_reads;
  }
  // The data, straight from the pinned object.
  int64_t sent = 0;
  absl::Status result = SendRaw(*conn, view.data + offset, view.size - offset,
                                options_.keepalive_time + options_.keepalive_timeout,
                                is_cancelled, PrintableObjectId(id), &sent);
  absl::MutexLock lock(&mu_);
  stats_.bytes_served += sent;
  if (result.ok()) ++stats_.reads_completed;
  return result;
}

}  // namespace drover
