#include "node_agent/object_transfer.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
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
  int64_t raw_port = 0;
  std::string raw_token;
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
        if (field == 5) out->raw_port = static_cast<int64_t>(static_cast<int32_t>(v));
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
        } else if (field == 4 || field == 6) {
          std::string& dst = field == 4 ? out->metadata : out->raw_token;
          if (v > (1u << 30)) return false;
          dst.resize(v);
          if (v > 0 && !c.Take(reinterpret_cast<uint8_t*>(&dst[0]), v)) return false;
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


// --- raw TCP ---------------------------------------------------------------------

constexpr size_t kRawTokenBytes = 32;
// Largest single send/recv, so that cancellation and shutdown are noticed often.
constexpr size_t kRawIoBytes = 16 << 20;

class ScopedFd {
 public:
  explicit ScopedFd(int fd = -1) : fd_(fd) {}
  ~ScopedFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// A numeric IP (v4 or v6) and port as a socket address; false if `ip` is not numeric.
bool ToSockaddr(const std::string& ip, int port, sockaddr_storage* ss, socklen_t* len) {
  std::memset(ss, 0, sizeof(*ss));
  auto* v4 = reinterpret_cast<sockaddr_in*>(ss);
  if (inet_pton(AF_INET, ip.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    *len = sizeof(sockaddr_in);
    return true;
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(ss);
  if (inet_pton(AF_INET6, ip.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    *len = sizeof(sockaddr_in6);
    return true;
  }
  return false;
}

// The numeric IP of the host part of "host:port" / "[v6]:port"; empty if unresolvable.
std::string NumericHostOf(const std::string& address) {
  std::string host;
  if (!address.empty() && address.front() == '[') {
    size_t end = address.find(']');
    if (end == std::string::npos) return "";
    host = address.substr(1, end - 1);
  } else {
    size_t colon = address.rfind(':');
    if (colon == std::string::npos) return "";
    host = address.substr(0, colon);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) return "";
  char buf[INET6_ADDRSTRLEN] = "";
  const void* a = nullptr;
  if (res->ai_family == AF_INET) a = &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  if (res->ai_family == AF_INET6) a = &reinterpret_cast<sockaddr_in6*>(res->ai_addr)->sin6_addr;
  std::string out;
  if (a != nullptr && inet_ntop(res->ai_family, a, buf, sizeof(buf)) != nullptr) out = buf;
  freeaddrinfo(res);
  return out;
}

// Listens on ip:0 (one pending connection); -1 if `ip` is not one of this host's.
int ListenOn(const std::string& ip, int* port) {
  sockaddr_storage ss;
  socklen_t len;
  if (!ToSockaddr(ip, 0, &ss, &len)) return -1;
  int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(fd, 1) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    ::close(fd);
    return -1;
  }
  *port = ss.ss_family == AF_INET ? ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port)
                                  : ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return fd;
}

// poll() for `events` up to `ms`; > 0 if ready.
int PollFd(int fd, short events, int ms) {
  pollfd p{fd, events, 0};
  int r = ::poll(&p, 1, ms);
  return r;
}

void SetTimeouts(int fd, absl::Duration d) {
  timeval tv = absl::ToTimeval(d);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

bool SameToken(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
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
  stop_ = true;
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

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
void PutTag(std::string* out, int field, int wire_type) {
  PutVarint(out, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire_type));
}

}  // namespace

absl::Status ObjectTransfer::ServeRead(const proto::ReadObjectRequest& req,
                                       const WriteChunk& write,
                                       const std::function<bool()>& cancelled) {
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
  // Each ObjectChunk is encoded by hand: a small header slice (offset, total_size,
  // metadata in the first, the data field's tag and length) followed by a slice that
  // points at the pinned object bytes. No user-space copy before the kernel's.
  int64_t off = req.offset();
  bool first = true;
  std::string header;
  do {
    int64_t n = std::min(options_.chunk_bytes, view->size - off);
    header.clear();
    PutTag(&header, 1, 0);
    PutVarint(&header, static_cast<uint64_t>(off));
    PutTag(&header, 3, 0);
    PutVarint(&header, static_cast<uint64_t>(view->size));
    if (first && !view->metadata.empty()) {
      PutTag(&header, 4, 2);
      PutVarint(&header, view->metadata.size());
      header += view->metadata;
    }
    PutTag(&header, 2, 2);
    PutVarint(&header, static_cast<uint64_t>(n));
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

absl::Status ObjectTransfer::ServeRaw(const std::string& id, const ReadView& view,
                                      int64_t offset, int lfd, int port,
                                      const WriteChunk& write,
                                      const std::function<bool()>& cancelled) {
  ScopedFd listener(lfd);
  std::string token(kRawTokenBytes, '\0');
  if (::getrandom(&token[0], token.size(), 0) != static_cast<ssize_t>(token.size())) {
    return absl::InternalError(absl::StrCat("getrandom: ", std::strerror(errno)));
  }
  // The offer: offset, total_size, metadata, raw_port, raw_token; no data.
  std::string header;
  PutTag(&header, 1, 0);
  PutVarint(&header, static_cast<uint64_t>(offset));
  PutTag(&header, 3, 0);
  PutVarint(&header, static_cast<uint64_t>(view.size));
  if (!view.metadata.empty()) {
    PutTag(&header, 4, 2);
    PutVarint(&header, view.metadata.size());
    header += view.metadata;
  }
  PutTag(&header, 5, 0);
  PutVarint(&header, static_cast<uint64_t>(port));
  PutTag(&header, 6, 2);
  PutVarint(&header, token.size());
  header += token;
  grpc::Slice slice(header);
  grpc::ByteBuffer offer(&slice, 1);
  // Written through to the socket before this thread blocks in accept: otherwise the
  // offer can sit in gRPC's transport until something else (the puller's keepalive
  // ping, 2 s later) makes the sync server flush it.
  if (!write(&offer, /*write_through=*/true)) {
    return absl::CancelledError(absl::StrCat("the reader of ", PrintableObjectId(id),
                                             " went away before its raw connection"));
  }
  auto is_cancelled = [&] { return stop_.load() || (cancelled && cancelled()); };
  // One connection, presenting the token, within raw_connect_timeout.
  const absl::Time give_up = absl::Now() + options_.raw_connect_timeout;
  int cfd = -1;
  while (cfd < 0) {
    if (is_cancelled()) {
      return absl::CancelledError(absl::StrCat("the reader of ", PrintableObjectId(id),
                                               " went away before its raw connection"));
    }
    if (absl::Now() >= give_up) {
      return absl::DeadlineExceededError(
          absl::StrCat("ReadObject of ", PrintableObjectId(id), ": no raw connection within ",
                       absl::FormatDuration(options_.raw_connect_timeout)));
    }
    if (PollFd(listener.get(), POLLIN, 100) > 0) {
      cfd = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC);
    }
  }
  ScopedFd conn(cfd);
  SetTimeouts(conn.get(), absl::Milliseconds(100));
  std::string got(kRawTokenBytes, '\0');
  size_t have = 0;
  while (have < got.size()) {
    if (is_cancelled() || absl::Now() >= give_up) break;
    ssize_t k = ::recv(conn.get(), &got[have], got.size() - have, 0);
    if (k == 0) break;
    if (k < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
      break;
    }
    have += static_cast<size_t>(k);
  }
  if (have < got.size() || !SameToken(got, token)) {
    return absl::PermissionDeniedError(
        absl::StrCat("ReadObject of ", PrintableObjectId(id),
                     ": the raw connection did not present the offer's token"));
  }
  {
    absl::MutexLock lock(&mu_);
    ++stats_.raw_reads;
  }
  // The data, straight from the pinned object.
  const uint8_t* p = view.data + offset;
  int64_t left = view.size - offset;
  int64_t sent = 0;
  absl::Time last_progress = absl::Now();
  const absl::Duration stall = options_.keepalive_time + options_.keepalive_timeout;
  absl::Status result;
  while (left > 0) {
    if (is_cancelled()) {
      result = absl::CancelledError(absl::StrCat("the reader of ", PrintableObjectId(id),
                                                 " went away after ", sent, " bytes"));
      break;
    }
    ssize_t k = ::send(conn.get(), p, std::min<int64_t>(left, kRawIoBytes), MSG_NOSIGNAL);
    if (k > 0) {
      p += k;
      left -= k;
      sent += k;
      last_progress = absl::Now();
      continue;
    }
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (absl::Now() - last_progress < stall) continue;
      result = absl::UnavailableError(absl::StrCat(
          "the reader of ", PrintableObjectId(id), " took nothing for ",
          absl::FormatDuration(stall), " after ", sent, " bytes"));
      break;
    }
    result = absl::UnavailableError(absl::StrCat("the raw connection for ", PrintableObjectId(id),
                                                 " broke after ", sent,
                                                 " bytes: ", std::strerror(errno)));
    break;
  }
  absl::MutexLock lock(&mu_);
  stats_.bytes_served += sent;
  if (result.ok()) ++stats_.reads_completed;
  return result;
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
  const std::string raw_ip = options_.raw_tcp ? NumericHostOf(h.address) : std::string();
  bool raw_unreachable = false;
  absl::Status s = PullOnce(h, id, deadline, raw_ip, size, fatal, &raw_unreachable);
  if (!s.ok() && raw_unreachable && !*fatal) {
    DROVER_LOG(WARNING) << s.message() << "; asking " << h.node_id << " for chunks over gRPC";
    s = PullOnce(h, id, deadline, "", size, fatal, &raw_unreachable);
  }
  return s;
}

absl::Status ObjectTransfer::ReceiveRaw(const std::string& ip, int port,
                                        const std::string& token, uint8_t* dst, int64_t want,
                                        absl::Time deadline, int64_t* got, bool* connected) {
  *got = 0;
  *connected = false;
  const std::string where = absl::StrCat(ip.find(':') != std::string::npos ? "[" : "", ip,
                                         ip.find(':') != std::string::npos ? "]" : "", ":",
                                         port);
  sockaddr_storage ss;
  socklen_t len;
  if (!ToSockaddr(ip, port, &ss, &len)) {
    return absl::InvalidArgumentError(absl::StrCat("bad raw address ", where));
  }
  ScopedFd fd(::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (fd.get() < 0) {
    return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  }
  const absl::Time connect_by = std::min(deadline, absl::Now() + options_.raw_connect_timeout);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    if (errno != EINPROGRESS) {
      return absl::UnavailableError(
          absl::StrCat("cannot connect to the raw offer at ", where, ": ", std::strerror(errno)));
    }
    while (PollFd(fd.get(), POLLOUT, 100) <= 0) {
      if (stop_) return absl::UnavailableError("shutting down");
      if (absl::Now() >= connect_by) {
        return absl::UnavailableError(
            absl::StrCat("timed out connecting to the raw offer at ", where));
      }
    }
    int err = 0;
    socklen_t elen = sizeof(err);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &elen);
    if (err != 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot connect to the raw offer at ", where, ": ", std::strerror(err)));
    }
  }
  ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
  SetTimeouts(fd.get(), absl::Milliseconds(100));
  size_t sent = 0;
  while (sent < token.size()) {
    ssize_t k = ::send(fd.get(), token.data() + sent, token.size() - sent, MSG_NOSIGNAL);
    if (k > 0) {
      sent += static_cast<size_t>(k);
    } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) &&
               absl::Now() < connect_by && !stop_) {
      continue;
    } else {
      return absl::UnavailableError(absl::StrCat("cannot send the token to the raw offer at ",
                                                 where, ": ", std::strerror(errno)));
    }
  }
  *connected = true;
  const absl::Duration stall = options_.keepalive_time + options_.keepalive_timeout;
  absl::Time last_progress = absl::Now();
  while (*got < want) {
    if (stop_) return absl::UnavailableError("shutting down");
    ssize_t k = ::recv(fd.get(), dst + *got,
                       static_cast<size_t>(std::min<int64_t>(want - *got, kRawIoBytes)), 0);
    if (k > 0) {
      *got += k;
      last_progress = absl::Now();
      continue;
    }
    if (k == 0) {
      return absl::UnavailableError(
          absl::StrCat("the holder closed the raw connection (", where, ")"));
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return absl::UnavailableError(
          absl::StrCat("the raw connection (", where, ") broke: ", std::strerror(errno)));
    }
    absl::Time now = absl::Now();
    if (now >= deadline) return absl::DeadlineExceededError("the deadline passed");
    if (now - last_progress >= stall) {
      return absl::UnavailableError(absl::StrCat("no data on the raw connection (", where,
                                                 ") for ", absl::FormatDuration(stall)));
    }
  }
  return absl::OkStatus();
}

absl::Status ObjectTransfer::PullOnce(const Holder& h, const std::string& id,
                                      absl::Time deadline, const std::string& raw_ip,
                                      int64_t* size, bool* fatal, bool* raw_unreachable) {
  *raw_unreachable = false;
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
  if (!raw_ip.empty()) req.set_raw_tcp_ip(raw_ip);
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
                                   dst, total, deadline, &got, &connected);
      received += got;
      if (!rs.ok()) {
        raw_error = std::string(rs.message());
        *raw_unreachable = !connected;
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
                    : !raw_error.empty() ? raw_error
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
