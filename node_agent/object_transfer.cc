#include "node_agent/object_transfer.h"

#include <cstring>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/auth.h"
#include "common/log.h"
#include "common/rpc.h"
#include "common/status.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/impl/rpc_method.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/sync_stream.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace drover {
namespace {

// Metadata rides in the first chunk, so a peer's message may exceed a chunk by it.
constexpr int kMaxMetadataBytes = 64 << 20;

// ReadObject read as raw bytes: each ObjectChunk arrives as a grpc::ByteBuffer (the
// received slices, not copied) and is decoded here, so that its data is copied once,
// from the received slices straight into the store, instead of first into a
// protobuf string (a 4 MiB allocation and copy per chunk) and then into the store.
const grpc::internal::RpcMethod kReadObjectMethod(
    "/drover.proto.ObjectTransfer/ReadObject", grpc::internal::RpcMethod::SERVER_STREAMING);

// A read cursor over the slices of a message.
class SliceCursor {
 public:
  explicit SliceCursor(const std::vector<grpc::Slice>* slices) : s_(slices) {}

  bool Byte(uint8_t* b) {
    if (!Settle()) return false;
    *b = (*s_)[i_].begin()[pos_++];
    return true;
  }
  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!Byte(&b)) return false;
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  // Copies `n` bytes to `dst` (nullptr: skips them).
  bool Take(uint8_t* dst, size_t n) {
    while (n > 0) {
      if (!Settle()) return false;
      size_t k = std::min(n, (*s_)[i_].size() - pos_);
      if (dst != nullptr) {
        std::memcpy(dst, (*s_)[i_].begin() + pos_, k);
        dst += k;
      }
      pos_ += k;
      n -= k;
    }
    return true;
  }
  bool AtEnd() { return !Settle(); }

 private:
  // Moves past exhausted slices; false at the end.
  bool Settle() {
    while (i_ < s_->size() && pos_ == (*s_)[i_].size()) {
      ++i_;
      pos_ = 0;
    }
    return i_ < s_->size();
  }
  const std::vector<grpc::Slice>* s_;
  size_t i_ = 0;
  size_t pos_ = 0;
};

// The fields of one ObjectChunk; `data` is where its bytes start in the message.
struct RawChunk {
  int64_t offset = 0;
  int64_t total_size = 0;
  std::string metadata;
  uint64_t data_size = 0;
  SliceCursor data{nullptr};
};

// Decodes the ObjectChunk wire format (proto3: unknown fields are skipped).
bool ParseChunk(const std::vector<grpc::Slice>* slices, RawChunk* out) {
  SliceCursor c(slices);
  *out = RawChunk();
  out->data = SliceCursor(slices);
  while (!c.AtEnd()) {
    uint64_t tag;
    if (!c.Varint(&tag)) return false;
    uint64_t field = tag >> 3, v = 0;
    switch (tag & 7) {
      case 0:
        if (!c.Varint(&v)) return false;
        if (field == 1) out->offset = static_cast<int64_t>(v);
        if (field == 3) out->total_size = static_cast<int64_t>(v);
        break;
      case 1:
        if (!c.Take(nullptr, 8)) return false;
        break;
      case 5:
        if (!c.Take(nullptr, 4)) return false;
        break;
      case 2:
        if (!c.Varint(&v)) return false;
        if (field == 2) {
          out->data = c;
          out->data_size = v;
          if (!c.Take(nullptr, v)) return false;
        } else if (field == 4) {
          out->metadata.resize(v);
          if (!c.Take(reinterpret_cast<uint8_t*>(&out->metadata[0]), v)) return false;
        } else if (!c.Take(nullptr, v)) {
          return false;
        }
        break;
      default:
        return false;
    }
  }
  return true;
}

}  // namespace

std::string PrintableObjectId(const std::string& id) { return absl::CHexEscape(id); }

ObjectTransfer::ObjectTransfer(ObjectTransferOptions options, LocalObjects* local)
    : options_(std::move(options)),
      local_(local),
      scheduler_(proto::Scheduler::NewStub(MakeChannel(options_.scheduler_address))) {}

ObjectTransfer::~ObjectTransfer() { Shutdown(); }

void ObjectTransfer::SetNodeId(const std::string& node_id) {
  absl::MutexLock lock(&mu_);
  node_id_ = node_id;
}

std::string ObjectTransfer::NodeId() {
  absl::MutexLock lock(&mu_);
  return node_id_.empty() ? "(unregistered)" : node_id_;
}

void ObjectTransfer::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutting_down_ = true;
  for (grpc::ClientContext* ctx : active_) ctx->TryCancel();
}

ObjectTransferStats ObjectTransfer::stats() {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void ObjectTransfer::ConfigureServer(grpc::ServerBuilder* builder) {
  // Pullers ping every keepalive_time while a stream is stalled; without these the
  // server counts those pings as abuse and closes the connection.
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
}

bool ObjectTransfer::Track(grpc::ClientContext* ctx) {
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return false;
  active_.insert(ctx);
  return true;
}

void ObjectTransfer::Untrack(grpc::ClientContext* ctx) {
  absl::MutexLock lock(&mu_);
  active_.erase(ctx);
}

std::shared_ptr<grpc::Channel> ObjectTransfer::PeerChannel(const std::string& address) {
  absl::MutexLock lock(&mu_);
  auto& channel = peers_[address];
  if (channel == nullptr) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
                static_cast<int>(absl::ToInt64Milliseconds(options_.keepalive_time)));
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                static_cast<int>(absl::ToInt64Milliseconds(options_.keepalive_timeout)));
    // Ping only while a call is open; keep pinging while it receives nothing.
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetMaxReceiveMessageSize(static_cast<int>(options_.chunk_bytes) + kMaxMetadataBytes);
    // Bulk transfer: large HTTP/2 frames (fewer frame headers and wake-ups), and a large
    // initial stream window so the sender never waits for window updates on a fast
    // link (BDP probing then sizes it).
    args.SetInt(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, (1 << 24) - 1);
    args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 << 20);
    args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 1);
    channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  }
  return channel;
}

// ---------------------------------------------------------------------------
// Serving

absl::Status ObjectTransfer::ServeRead(
    const proto::ReadObjectRequest& req,
    const std::function<bool(const proto::ObjectChunk&)>& write) {
  const std::string& id = req.object_id();
  if (id.empty()) return absl::InvalidArgumentError("ReadObject needs an object id");
  auto view = local_->Acquire(id);
  if (!view.ok()) {
    if (view.status().code() == absl::StatusCode::kNotFound) {
      return absl::NotFoundError(absl::StrCat("object ", PrintableObjectId(id),
                                              " is not in the object store of node ", NodeId()));
    }
    return view.status();
  }
  absl::Cleanup release = [&] { local_->Release(id); };
  if (req.offset() < 0 || req.offset() > view->size) {
    return absl::InvalidArgumentError(absl::StrCat("ReadObject of ", PrintableObjectId(id),
                                                   ": offset ", req.offset(),
                                                   " is outside [0, ", view->size, "]"));
  }
  {
    absl::MutexLock lock(&mu_);
    ++stats_.reads_started;
  }
  proto::ObjectChunk chunk;
  int64_t off = req.offset();
  bool first = true;
  do {
    int64_t n = std::min(options_.chunk_bytes, view->size - off);
    chunk.set_offset(off);
    chunk.set_total_size(view->size);
    chunk.set_data(view->data + off, n);
    if (first) {
      chunk.set_metadata(view->metadata);
    } else {
      chunk.clear_metadata();
    }
    if (!write(chunk)) {
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

// ---------------------------------------------------------------------------
// Pulling

absl::StatusOr<ObjectTransfer::FetchResult> ObjectTransfer::Fetch(const std::string& id,
                                                                  absl::Time deadline) {
  if (id.empty()) return absl::InvalidArgumentError("FetchObject needs an object id");
  std::shared_ptr<Pull> pull;
  bool leader = false;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) {
      return absl::UnavailableError(absl::StrCat("node ", node_id_,
                                                 " is shutting down; fetch elsewhere"));
    }
    auto it = pulls_.find(id);
    if (it != pulls_.end()) {
      pull = it->second;
      ++stats_.fetches_joined;
    } else {
      pull = std::make_shared<Pull>();
      pulls_.emplace(id, pull);
      leader = true;
    }
  }
  if (!leader) {
    if (!pull->done.WaitForNotificationWithDeadline(deadline)) {
      return absl::DeadlineExceededError(absl::StrCat(
          "timed out waiting for the pull of ", PrintableObjectId(id),
          " (started by an earlier request) to node ", NodeId()));
    }
    return pull->result;
  }
  absl::StatusOr<FetchResult> result = RunPull(id, deadline);
  {
    absl::MutexLock lock(&mu_);
    pulls_.erase(id);
    pull->result = result;
  }
  pull->done.Notify();
  return result;
}

absl::StatusOr<ObjectTransfer::FetchResult> ObjectTransfer::RunPull(const std::string& id,
                                                                    absl::Time deadline) {
  // Already here (checked by the leader only, so a copy sealed by a pull that just
  // finished is seen).
  auto local_size = [&]() -> absl::StatusOr<int64_t> {
    auto v = local_->Acquire(id);
    if (!v.ok()) return v.status();
    int64_t size = v->size;
    local_->Release(id);
    return size;
  };
  if (local_->Contains(id)) {
    if (auto size = local_size(); size.ok()) return FetchResult{*size, NodeId()};
  }
  auto holders = FindHolders(id, deadline);
  if (!holders.ok()) return holders.status();
  if (holders->empty()) {
    return absl::NotFoundError(absl::StrCat(
        "object ", PrintableObjectId(id),
        " is held by no live node (the scheduler's directory lists none): it was never put, "
        "was deleted, or every node holding it died"));
  }
  {
    absl::MutexLock lock(&mu_);
    ++stats_.pulls_started;
  }
  std::vector<std::string> failures;
  bool all_not_found = true;
  for (const Holder& h : *holders) {
    if (absl::Now() >= deadline) {
      failures.push_back("the deadline passed");
      return absl::DeadlineExceededError(absl::StrJoin(failures, "; "));
    }
    int64_t size = 0;
    bool fatal = false;
    absl::Status s = PullFrom(h, id, deadline, &size, &fatal);
    if (s.ok()) {
      {
        absl::MutexLock lock(&mu_);
        ++stats_.pulls_succeeded;
      }
      DROVER_LOG(DEBUG) << "pulled " << PrintableObjectId(id) << " (" << size << " bytes) from "
                        << h.node_id;
      ReportCopy(id, size);
      return FetchResult{size, h.node_id};
    }
    if (s.code() == absl::StatusCode::kAlreadyExists) {
      // Someone else on this node made it meanwhile (a local put, or a Fetch racing
      // through another agent entry point).
      if (local_->Contains(id)) {
        if (auto size = local_size(); size.ok()) return FetchResult{*size, NodeId()};
      }
      return absl::AbortedError(absl::StrCat("object ", PrintableObjectId(id),
                                             " is being created on node ", NodeId(),
                                             " by another writer; retry the fetch"));
    }
    if (fatal) return s;
    if (s.code() != absl::StatusCode::kNotFound) all_not_found = false;
    DROVER_LOG(WARNING) << s.message();
    failures.emplace_back(s.message());
  }
  std::string msg = absl::StrJoin(failures, "; ");
  if (all_not_found) {
    return absl::NotFoundError(absl::StrCat("object ", PrintableObjectId(id),
                                            " is listed by the directory but no holder has it: ",
                                            msg));
  }
  return absl::UnavailableError(msg);
}

absl::StatusOr<std::vector<ObjectTransfer::Holder>> ObjectTransfer::FindHolders(
    const std::string& id, absl::Time deadline) {
  grpc::ClientContext ctx;
  ctx.AddMetadata(kTokenMetadataKey, options_.token);
  ctx.set_deadline(absl::ToChronoTime(std::min(deadline, absl::Now() + options_.directory_timeout)));
  if (!Track(&ctx)) return absl::UnavailableError("shutting down");
  absl::Cleanup untrack = [&] { Untrack(&ctx); };
  proto::GetObjectLocationsRequest req;
  req.set_object_id(id);
  proto::GetObjectLocationsReply reply;
  grpc::Status s = scheduler_->GetObjectLocations(&ctx, req, &reply);
  if (!s.ok()) {
    absl::StatusCode code = absl::Now() >= deadline ? absl::StatusCode::kDeadlineExceeded
                            : s.error_code() == grpc::StatusCode::UNAUTHENTICATED
                                ? absl::StatusCode::kUnauthenticated
                                : absl::StatusCode::kUnavailable;
    return absl::Status(code, absl::StrCat("cannot ask the scheduler at ",
                                           options_.scheduler_address, " where object ",
                                           PrintableObjectId(id), " is: ", s.error_message()));
  }
  std::string self;
  {
    absl::MutexLock lock(&mu_);
    self = node_id_;
  }
  std::vector<Holder> out;
  for (const auto& loc : reply.locations()) {
    // A stale entry for this node (it is not here: Contains said so).
    if (!self.empty() && loc.node_id() == self) continue;
    out.push_back({loc.node_id(), loc.agent_address()});
  }
  return out;
}

absl::Status ObjectTransfer::PullFrom(const Holder& h, const std::string& id,
                                      absl::Time deadline, int64_t* size, bool* fatal) {
  grpc::ClientContext ctx;
  ctx.AddMetadata(kTokenMetadataKey, options_.token);
  ctx.set_deadline(absl::ToChronoTime(deadline));
  if (!Track(&ctx)) {
    *fatal = true;
    return absl::UnavailableError(absl::StrCat("node ", NodeId(), " is shutting down"));
  }
  absl::Cleanup untrack = [&] { Untrack(&ctx); };

  proto::ReadObjectRequest req;
  req.set_object_id(id);
  std::shared_ptr<grpc::Channel> channel = PeerChannel(h.address);
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
          channel.get(), kReadObjectMethod, &ctx, req));
  grpc::ByteBuffer message;
  std::vector<grpc::Slice> slices;
  RawChunk chunk;
  int64_t received = 0;
  int64_t total = -1;
  uint8_t* dst = nullptr;
  bool created = false;
  std::string problem;        // the holder broke the protocol
  absl::Status local_error;   // this node's store refused
  while (reader->Read(&message)) {
    slices.clear();
    if (!message.Dump(&slices).ok() || !ParseChunk(&slices, &chunk)) {
      problem = "it sent a chunk that does not parse as an ObjectChunk";
      break;
    }
    if (!created) {
      if (chunk.offset != 0 || chunk.total_size < 0) {
        problem = absl::StrCat("its first chunk has offset ", chunk.offset, " and total size ",
                               chunk.total_size);
        break;
      }
      total = chunk.total_size;
      auto view = local_->CreateSecondary(id, total, chunk.metadata);
      if (!view.ok()) {
        local_error = view.status();
        break;
      }
      created = true;
      dst = view->data;
    }
    int64_t n = static_cast<int64_t>(chunk.data_size);
    if (chunk.total_size != total || chunk.offset != received || n > total - received) {
      problem = absl::StrCat("it sent ", n, " bytes at offset ", chunk.offset,
                             " (total size ", chunk.total_size, ") when ", received, " of ",
                             total, " bytes had arrived");
      break;
    }
    // The one copy of the pulled bytes: from the received slices into the store.
    if (n > 0) chunk.data.Take(dst + received, static_cast<size_t>(n));
    received += n;
    message.Clear();
  }
  if (!problem.empty() || !local_error.ok()) ctx.TryCancel();
  grpc::Status s = reader->Finish();
  {
    absl::MutexLock lock(&mu_);
    stats_.bytes_pulled += received;
  }
  if (!local_error.ok()) {
    *fatal = local_error.code() != absl::StatusCode::kAlreadyExists;
    return absl::Status(local_error.code(),
                        absl::StrCat("cannot store the pulled copy of ", PrintableObjectId(id),
                                     " (", total, " bytes) on node ", NodeId(), ": ",
                                     local_error.message()));
  }
  // Every byte arrived and was checked: the copy is complete even if the stream then
  // failed (the holder died right after its last chunk).
  if (problem.empty() && created && received == total) {
    absl::Status sealed = local_->Seal(id);
    if (!sealed.ok()) {
      local_->Abort(id);
      *fatal = true;
      return absl::Status(sealed.code(), absl::StrCat("cannot seal the pulled copy of ",
                                                      PrintableObjectId(id), " on node ",
                                                      NodeId(), ": ", sealed.message()));
    }
    *size = total;
    return absl::OkStatus();
  }
  if (created) local_->Abort(id);
  std::string why = !problem.empty() ? absl::StrCat("the holder broke the protocol: ", problem)
                    : !s.ok()        ? s.error_message()
                    : created        ? "the stream ended early"
                                     : "the holder sent no data";
  std::string msg = absl::StrCat("pull of ", PrintableObjectId(id), " from ", h.node_id, " (",
                                 h.address, ") failed after ", received, " of ",
                                 total >= 0 ? absl::StrCat(total) : std::string("?"),
                                 " bytes: ", why);
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED || absl::Now() >= deadline) {
    *fatal = true;
    return absl::DeadlineExceededError(msg);
  }
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) {
      *fatal = true;
      return absl::UnavailableError(absl::StrCat(msg, " (node ", node_id_, " is shutting down)"));
    }
  }
  if (problem.empty() && !created && s.error_code() == grpc::StatusCode::NOT_FOUND) {
    return absl::NotFoundError(msg);  // a stale directory entry
  }
  return absl::UnavailableError(msg);
}

void ObjectTransfer::ReportCopy(const std::string& id, int64_t size) {
  std::string node_id;
  {
    absl::MutexLock lock(&mu_);
    node_id = node_id_;
  }
  if (node_id.empty()) {
    DROVER_LOG(WARNING) << "pulled " << PrintableObjectId(id)
                        << " before this node registered; the directory will not list this copy";
    return;
  }
  proto::AddObjectLocationsRequest req;
  req.set_node_id(node_id);
  auto* o = req.add_objects();
  o->set_object_id(id);
  o->set_size(size);
  grpc::ClientContext ctx;
  PrepareContext(&ctx, options_.token,
                 std::chrono::milliseconds(absl::ToInt64Milliseconds(options_.directory_timeout)));
  proto::AddObjectLocationsReply reply;
  grpc::Status s = scheduler_->AddObjectLocations(&ctx, req, &reply);
  if (!s.ok()) {
    // The copy is here and usable; other nodes just will not pull from it.
    DROVER_LOG(WARNING) << "cannot report the copy of " << PrintableObjectId(id) << " on "
                        << node_id << " to the scheduler: " << s.error_message();
  }
}

}  // namespace drover
