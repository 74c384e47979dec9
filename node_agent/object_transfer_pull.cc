#include "node_agent/object_transfer_pull.h"

#include <algorithm>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/auth.h"
#include "common/log.h"
#include "common/rpc.h"
#include "common/status_macros.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/impl/rpc_method.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/channel_arguments.h"
#include "grpcpp/support/sync_stream.h"
#include "node_agent/object_transfer_codec.h"
#include "node_agent/object_transfer_raw.h"
#include "proto/node_agent.pb.h"

namespace drover {
namespace {

// Metadata rides in the first chunk, so a peer's message may exceed a chunk by it.
constexpr int kMaxMetadataBytes = 64 << 20;

// ReadObject read as raw bytes: each ObjectChunk arrives as a grpc::ByteBuffer (the
// received slices, not copied) and is decoded by ParseChunk, so that its data is
// copied once, from the received slices straight into the store, instead of first
// into a protobuf string (a 4 MiB allocation and copy per chunk) and then into the
// store.
const grpc::internal::RpcMethod kReadObjectMethod(
    "/drover.proto.ObjectTransfer/ReadObject", grpc::internal::RpcMethod::SERVER_STREAMING);

}  // namespace

ObjectPuller::ObjectPuller(const ObjectTransferOptions& options, LocalObjects* local,
                           const NodeIdentity* node)
    : options_(WithTransport(options)),
      local_(local),
      node_(node),
      scheduler_(proto::Scheduler::NewStub(
          MakeChannel(options_.scheduler_address, *options_.transport))) {}

void ObjectPuller::Shutdown() {
  stop_ = true;
  absl::MutexLock lock(&mu_);
  shutting_down_ = true;
  for (grpc::ClientContext* ctx : active_) ctx->TryCancel();
}

ObjectTransferStats ObjectPuller::stats() {
  absl::MutexLock lock(&mu_);
  return stats_;
}

bool ObjectPuller::Track(grpc::ClientContext* ctx) {
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return false;
  active_.insert(ctx);
  return true;
}

void ObjectPuller::Untrack(grpc::ClientContext* ctx) {
  absl::MutexLock lock(&mu_);
  active_.erase(ctx);
}

std::shared_ptr<grpc::Channel> ObjectPuller::PeerChannel(const std::string& address) {
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
    channel = MakeCustomChannel(address, std::move(args), *options_.transport);
  }
  return channel;
}

absl::StatusOr<ObjectPuller::FetchResult> ObjectPuller::Fetch(const std::string& id,
                                                              absl::Time deadline,
                                                              bool wait_for_holder,
                                                              const std::string& job_id) {
  if (id.empty()) return absl::InvalidArgumentError("FetchObject needs an object id");
  if (wait_for_holder) DROVER_RETURN_IF_ERROR(WaitForHolder(id, deadline));
  std::shared_ptr<Pull> pull;
  bool leader = false;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) {
      return absl::UnavailableError(absl::StrCat("node ", node_->Get(),
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
          " (started by an earlier request) to node ", node_->ForMessages()));
    }
    return pull->result;
  }
  absl::StatusOr<FetchResult> result = RunPull(id, deadline, pull.get());
  NotePull(id, job_id, pull.get(), result);
  {
    absl::MutexLock lock(&mu_);
    pulls_.erase(id);
    pull->result = result;
  }
  pull->done.Notify();
  return result;
}

std::optional<ObjectPuller::Progress> ObjectPuller::PullProgress(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = pulls_.find(id);
  if (it == pulls_.end()) return std::nullopt;
  const Pull& pull = *it->second;
  return Progress{pull.received.load(), pull.total.load(), pull.source};
}

absl::StatusOr<ObjectPuller::FetchResult> ObjectPuller::RunPull(const std::string& id,
                                                                    absl::Time deadline,
                                                                    Pull* pull) {
  // Already here (checked by the leader only, so a copy sealed by a pull that just
  // finished is seen).
  if (local_->Contains(id)) {
    if (auto size = LocalSize(id); size.ok()) return FetchResult{*size, node_->ForMessages()};
  }
  DROVER_ASSIGN_OR_RETURN(const std::vector<Holder> holders, FindHolders(id, deadline));
  if (holders.empty()) {
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
  for (const Holder& h : holders) {
    if (absl::Now() >= deadline) {
      failures.push_back(absl::StrCat("the fetch's deadline passed before ", h.node_id,
                                      " (listed as a holder) was tried"));
      return absl::DeadlineExceededError(absl::StrJoin(failures, "; "));
    }
    Attempt attempt;
    attempt.pull = pull;
    {
      absl::MutexLock lock(&mu_);
      pull->source = h.node_id;
      pull->received = 0;
      if (pull->started == absl::InfiniteFuture()) pull->started = absl::Now();
    }
    absl::Status s = PullFrom(h, id, deadline, &attempt);
    if (s.ok()) {
      {
        absl::MutexLock lock(&mu_);
        ++stats_.pulls_succeeded;
      }
      DROVER_LOG(DEBUG) << "pulled " << PrintableObjectId(id) << " (" << attempt.size
                        << " bytes) from " << h.node_id;
      ReportCopy(id, attempt.size);
      return FetchResult{attempt.size, h.node_id};
    }
    if (s.code() == absl::StatusCode::kAlreadyExists) {
      // Someone else on this node made it meanwhile (a local put, or a Fetch racing
      // through another agent entry point).
      if (local_->Contains(id)) {
        if (auto size = LocalSize(id); size.ok()) return FetchResult{*size, node_->ForMessages()};
      }
      return absl::AbortedError(absl::StrCat("object ", PrintableObjectId(id),
                                             " is being created on node ", node_->ForMessages(),
                                             " by another writer; retry the fetch"));
    }
    if (attempt.fatal) return s;
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

void ObjectPuller::NotePull(const std::string& id, const std::string& job_id, Pull* pull,
                            const absl::StatusOr<FetchResult>& result) {
  if (!options_.on_pull) return;
  PullRecord r;
  {
    absl::MutexLock lock(&mu_);
    if (pull->started == absl::InfiniteFuture()) return;  // no holder was tried
    r.start = pull->started;
    r.source_node = pull->source;
  }
  r.end = absl::Now();
  r.object_id = id;
  r.job_id = job_id;
  if (r.job_id.empty()) {
    // The task layer's ids are "<job>.<owner>.<n>".
    const size_t dot = id.find('.');
    if (dot != std::string::npos && dot > 0) r.job_id = id.substr(0, dot);
  }
  if (result.ok() && result->source_node == node_->ForMessages()) return;  // made here meanwhile
  r.status = result.status();
  r.bytes = result.ok() ? result->size : pull->received.load();
  options_.on_pull(r);
}

absl::StatusOr<proto::GetObjectLocationsReply> ObjectPuller::AskDirectory(const std::string& id,
                                                                          absl::Time deadline,
                                                                          absl::Duration wait) {
  grpc::ClientContext ctx;
  ctx.AddMetadata(kTokenMetadataKey, options_.token);
  // A waiting call may take until the fetch's deadline (the scheduler answers shortly
  // before it); a plain one gets the usual directory timeout.
  ctx.set_deadline(absl::ToChronoTime(
      wait > absl::ZeroDuration() ? deadline
                                  : std::min(deadline, absl::Now() + options_.directory_timeout)));
  if (!Track(&ctx)) return absl::UnavailableError("shutting down");
  absl::Cleanup untrack = [&] { Untrack(&ctx); };
  proto::GetObjectLocationsRequest req;
  req.set_object_id(id);
  req.set_wait_ms(std::max<int64_t>(0, absl::ToInt64Milliseconds(wait)));
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
  return reply;
}

absl::Status ObjectPuller::WaitForHolder(const std::string& id, absl::Time deadline) {
  if (local_->Contains(id)) return absl::OkStatus();
  DROVER_ASSIGN_OR_RETURN(const proto::GetObjectLocationsReply reply,
                          AskDirectory(id, deadline, deadline - absl::Now()));
  if (reply.locations_size() > 0) return absl::OkStatus();
  return absl::DeadlineExceededError(
      absl::StrCat("no live node came to hold object ", PrintableObjectId(id),
                   " before the fetch's deadline (waited for it in the scheduler's directory at ",
                   options_.scheduler_address, ")"));
}

absl::StatusOr<std::vector<ObjectPuller::Holder>> ObjectPuller::FindHolders(const std::string& id,
                                                                            absl::Time deadline) {
  DROVER_ASSIGN_OR_RETURN(const proto::GetObjectLocationsReply reply,
                          AskDirectory(id, deadline, absl::ZeroDuration()));
  const std::string self = node_->Get();
  std::vector<Holder> out;
  for (const auto& loc : reply.locations()) {
    // A stale entry for this node (it is not here: Contains said so).
    if (!self.empty() && loc.node_id() == self) continue;
    out.push_back({loc.node_id(), loc.agent_address()});
  }
  return out;
}

absl::Status ObjectPuller::PullFrom(const Holder& h, const std::string& id,
                                    absl::Time deadline, Attempt* attempt) {
  const std::string raw_ip = options_.raw_tcp ? NumericHostOf(h.address) : std::string();
  absl::Status s = PullOnce(h, id, deadline, raw_ip, attempt);
  if (!s.ok() && attempt->raw_unreachable && !attempt->fatal) {
    DROVER_LOG(WARNING) << s.message() << "; asking " << h.node_id << " for chunks over gRPC";
    s = PullOnce(h, id, deadline, "", attempt);
  }
  return s;
}

absl::StatusOr<int64_t> ObjectPuller::LocalSize(const std::string& id) {
  DROVER_ASSIGN_OR_RETURN(const ReadView view, local_->Acquire(id));
  local_->Release(id);
  return view.size;
}

absl::Status ObjectPuller::PullOnce(const Holder& h, const std::string& id,
                                    absl::Time deadline, const std::string& raw_ip,
                                    Attempt* attempt) {
  attempt->raw_unreachable = false;
  grpc::ClientContext ctx;
  ctx.AddMetadata(kTokenMetadataKey, options_.token);
  ctx.set_deadline(absl::ToChronoTime(deadline));
  if (!Track(&ctx)) {
    attempt->fatal = true;
    return absl::UnavailableError(absl::StrCat("node ", node_->ForMessages(), " is shutting down"));
  }
  absl::Cleanup untrack = [&] { Untrack(&ctx); };

  proto::ReadObjectRequest req;
  req.set_object_id(id);
  if (!raw_ip.empty()) req.set_raw_tcp_ip(raw_ip);
  std::shared_ptr<grpc::Channel> channel = PeerChannel(h.address);
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
          channel.get(), kReadObjectMethod, &ctx, req));
  grpc::ByteBuffer message;
  std::vector<grpc::Slice> slices;
  ChunkView chunk;
  int64_t received = 0;
  int64_t total = -1;
  uint8_t* dst = nullptr;
  bool created = false;
  std::string problem;        // the holder broke the protocol
  absl::Status local_error;   // this node's store refused
  std::string raw_error;      // the raw connection failed
  bool raw_done = false;      // every byte came over the raw connection
  while (reader->Read(&message)) {
    slices.clear();
    if (!message.Dump(&slices).ok() || !ParseChunk(&slices, &chunk)) {
      problem = "it sent a chunk that does not parse as an ObjectChunk";
      break;
    }
    if (raw_done) {
      problem = "it sent a chunk after the raw transfer";
      break;
    }
    if (!created) {
      if (chunk.offset != 0 || chunk.total_size < 0) {
        problem = absl::StrCat("its first chunk has offset ", chunk.offset, " and total size ",
                               chunk.total_size);
        break;
      }
      total = chunk.total_size;
      attempt->pull->total = total;
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
    attempt->pull->received = received;
    message.Clear();
    if (chunk.raw_port != 0) {
      if (raw_ip.empty() || chunk.raw_port < 0 || chunk.raw_port > 65535 ||
          chunk.raw_token.size() != kRawTokenBytes || n != 0 || received != 0) {
        problem = "it sent an unrequested or malformed raw-TCP offer";
        break;
      }
      {
        absl::MutexLock lock(&mu_);
        ++stats_.raw_pulls;
      }
      // The data, straight into the store allocation (the kernel's copy only).
      bool connected = false;
      int64_t got = 0;
      absl::Status rs = ReceiveRaw(raw_ip, static_cast<int>(chunk.raw_port), chunk.raw_token,
                                   *options_.transport, dst, total, deadline, options_.raw_connect_timeout,
                                   options_.keepalive_time + options_.keepalive_timeout, stop_,
                                   &got, &connected, &attempt->pull->received);
      received += got;
      if (!rs.ok()) {
        raw_error = std::string(rs.message());
        attempt->raw_unreachable = !connected;
        break;
      }
      raw_done = true;
    }
  }
  if (!problem.empty() || !local_error.ok() || !raw_error.empty()) ctx.TryCancel();
  grpc::Status s = reader->Finish();
  {
    absl::MutexLock lock(&mu_);
    stats_.bytes_pulled += received;
  }
  if (!local_error.ok()) {
    attempt->fatal = local_error.code() != absl::StatusCode::kAlreadyExists;
    return absl::Status(local_error.code(),
                        absl::StrCat("cannot store the pulled copy of ", PrintableObjectId(id),
                                     " (", total, " bytes) on node ", node_->ForMessages(), ": ",
                                     local_error.message()));
  }
  // Every byte arrived and was checked: the copy is complete even if the stream then
  // failed (the holder died right after its last chunk).
  if (problem.empty() && created && received == total) {
    absl::Status sealed = local_->Seal(id);
    if (!sealed.ok()) {
      local_->Abort(id);
      attempt->fatal = true;
      return absl::Status(sealed.code(), absl::StrCat("cannot seal the pulled copy of ",
                                                      PrintableObjectId(id), " on node ",
                                                      node_->ForMessages(), ": ", sealed.message()));
    }
    attempt->size = total;
    return absl::OkStatus();
  }
  if (created) local_->Abort(id);
  std::string why = !problem.empty() ? absl::StrCat("the holder broke the protocol: ", problem)
                    : !raw_error.empty() ? raw_error
                    : !s.ok()        ? s.error_message()
                    : created        ? "the stream ended early"
                                     : "the holder sent no data";
  std::string msg = absl::StrCat("pull of ", PrintableObjectId(id), " from ", h.node_id, " (",
                                 h.address, ") failed after ", received, " of ",
                                 total >= 0 ? absl::StrCat(total) : std::string("?"),
                                 " bytes: ", why);
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED || absl::Now() >= deadline) {
    attempt->fatal = true;
    return absl::DeadlineExceededError(msg);
  }
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) {
      attempt->fatal = true;
      return absl::UnavailableError(absl::StrCat(msg, " (node ", node_->Get(), " is shutting down)"));
    }
  }
  if (problem.empty() && !created && s.error_code() == grpc::StatusCode::NOT_FOUND) {
    return absl::NotFoundError(msg);  // a stale directory entry
  }
  return absl::UnavailableError(msg);
}

void ObjectPuller::ReportCopy(const std::string& id, int64_t size) {
  const std::string node_id = node_->Get();
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
