// The Gloo backend: CPU buffers over Gloo's TCP transport, a full mesh connected through
// the scheduler's KV (GlooKvStore).
//
// AllReduce is Gloo's ring allreduce (bandwidth-optimal: each rank sends and receives
// 2 (n-1)/n of the buffer). Broadcast, AllGather and Barrier are Gloo's. ReduceScatter is
// a ring written here over Gloo's unbound buffers ((n-1)/n of the input sent per rank,
// half of an allreduce); Gloo's own reduce-scatter is an old-style algorithm tied to
// float buffers and power-of-two blocks. Send/Recv are unbound-buffer sends on a slot
// derived from the tag.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "collective/gloo_abort.h"
#include "collective/group.h"
#include "collective/group_internal.h"
#include "collective/kv_store.h"
#include "common/net.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/types.h"

namespace drover::collective::internal {
namespace {


// Slot prefixes of our own algorithms; Gloo's use 0x01..0x0f.
constexpr uint8_t kReduceScatterSlotPrefix = 0x40;
constexpr uint8_t kSendRecvSlotPrefix = 0x41;

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

template <typename T>
ReduceFn ReduceFor(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return static_cast<ReduceFn>(&gloo::sum<T>);
    case ReduceOp::kMax:
      return static_cast<ReduceFn>(&gloo::max<T>);
    case ReduceOp::kMin:
      return static_cast<ReduceFn>(&gloo::min<T>);
  }
  return nullptr;
}

template <typename T>
void DivideInPlace(T* p, size_t n, int by) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / by);
}

template <>
void DivideInPlace<gloo::float16>(gloo::float16* p, size_t n, int by) {
  for (size_t i = 0; i < n; ++i) {
    p[i] = gloo::cpu_float2half_rn(gloo::cpu_half2float(p[i]) / static_cast<float>(by));
  }
}

// Gloo reports timeouts as IoException("Timed out waiting ...", "... timeout ...").
bool LooksLikeTimeout(const std::string& what) {
  std::string lower = absl::AsciiStrToLower(what);
  return absl::StrContains(lower, "timed out") || absl::StrContains(lower, "timeout");
}

std::chrono::milliseconds ToChrono(absl::Duration d) {
  return std::chrono::milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

class GlooGroup : public GroupBase {
 public:
  GlooGroup(GroupOptions options, std::unique_ptr<KvClient> kv,
            std::shared_ptr<gloo::transport::Device> device,
            std::shared_ptr<gloo::rendezvous::Context> context)
      : GroupBase(std::move(options), "gloo"),
        kv_(std::move(kv)),
        device_(std::move(device)),
        ctx_(std::move(context)) {}
  ~GlooGroup() override { StopWatching(); }

  absl::Status AllReduce(void* buf, size_t count, DataType type, ReduceOp op) override {
    if (count == 0) return Usable("AllReduce");
    if (buf == nullptr) return Invalid("AllReduce", "null buffer");
    return Run("AllReduce", [&] {
      return DispatchType(type, [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* p = static_cast<T*>(buf);
        gloo::AllreduceOptions opts(ctx_);
        opts.setOutput<T>(p, count);
        opts.setReduceFunction(ReduceFor<T>(op));
        opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
        opts.setTimeout(Timeout());
        gloo::allreduce(opts);
        if (op == ReduceOp::kAvg) DivideInPlace(p, count, size());
        return absl::OkStatus();
      });
    });
  }

  absl::Status Broadcast(void* buf, size_t count, DataType type, int root) override {
    if (root < 0 || root >= size()) {
      return Invalid("Broadcast", absl::StrCat("root ", root, " outside [0, ", size(), ")"));
    }
    if (count == 0) return Usable("Broadcast");
    if (buf == nullptr) return Invalid("Broadcast", "null buffer");
    return Run("Broadcast", [&] {
      gloo::BroadcastOptions opts(ctx_);
      opts.setOutput<uint8_t>(static_cast<uint8_t*>(buf), count * DataTypeSize(type));
      opts.setRoot(root);
      opts.setTimeout(Timeout());
      gloo::broadcast(opts);
      return absl::OkStatus();
    });
  }

  absl::Status AllGather(const void* in, void* out, size_t count_per_rank,
                         DataType type) override {
    if (count_per_rank == 0) return Usable("AllGather");
    if (in == nullptr || out == nullptr) return Invalid("AllGather", "null buffer");
    const size_t bytes = count_per_rank * DataTypeSize(type);
    return Run("AllGather", [&] {
      gloo::AllgatherOptions opts(ctx_);
      opts.setInput<uint8_t>(static_cast<uint8_t*>(const_cast<void*>(in)), bytes);
      opts.setOutput<uint8_t>(static_cast<uint8_t*>(out), bytes * size());
      opts.setTimeout(Timeout());
      gloo::allgather(opts);
      return absl::OkStatus();
    });
  }

  absl::Status ReduceScatter(const void* in, void* out, size_t count_per_rank, DataType type,
                             ReduceOp op) override {
    if (count_per_rank == 0) return Usable("ReduceScatter");
    if (in == nullptr || out == nullptr) return Invalid("ReduceScatter", "null buffer");
    return Run("ReduceScatter", [&] {
      return DispatchType(type, [&](auto tag) {
        using T = typename decltype(tag)::type;
        RingReduceScatter<T>(static_cast<const T*>(in), static_cast<T*>(out), count_per_rank,
                             ReduceFor<T>(op));
        if (op == ReduceOp::kAvg) DivideInPlace(static_cast<T*>(out), count_per_rank, size());
        return absl::OkStatus();
      });
    });
  }

  absl::Status Barrier() override {
    return Run("Barrier", [&] {
      gloo::BarrierOptions opts(ctx_);
      opts.setTimeout(Timeout());
      gloo::barrier(opts);
      return absl::OkStatus();
    });
  }

  absl::Status Send(const void* buf, size_t bytes, int peer, uint32_t tag) override {
    if (peer < 0 || peer >= size() || peer == rank()) {
      return Invalid("Send", absl::StrCat("peer ", peer, " is not another rank of the group"));
    }
    if (bytes == 0) return Usable("Send");
    return Run(absl::StrCat("Send to rank ", peer), [&] {
      auto ub = ctx_->createUnboundBuffer(const_cast<void*>(buf), bytes);
      ub->send(peer, gloo::Slot::build(kSendRecvSlotPrefix, tag));
      ub->waitSend(Timeout());
      return absl::OkStatus();
    });
  }

  absl::Status Recv(void* buf, size_t bytes, int peer, uint32_t tag) override {
    if (peer < 0 || peer >= size() || peer == rank()) {
      return Invalid("Recv", absl::StrCat("peer ", peer, " is not another rank of the group"));
    }
    if (bytes == 0) return Usable("Recv");
    return Run(absl::StrCat("Recv from rank ", peer), [&] {
      auto ub = ctx_->createUnboundBuffer(buf, bytes);
      ub->recv(peer, gloo::Slot::build(kSendRecvSlotPrefix, tag));
      ub->waitRecv(Timeout());
      return absl::OkStatus();
    });
  }

 private:
  std::chrono::milliseconds Timeout() const { return ToChrono(options_.timeout); }

  // Signals an error on every connection: a Gloo wait in flight on this thread returns
  // (its IoException becomes the notice), even one whose connection had already broken
  // mid-payload (see gloo_abort.h), and the peers see the sockets close.
  void AbortTransport(const absl::Status& cause) override {
    const std::string why = absl::StrCat("aborted: ", cause.message());
    for (int i = 0; i < size(); ++i) {
      if (i != rank()) AbortGlooPair(ctx_->getPair(i).get(), why);
    }
  }

  // Runs one Gloo operation, turning Gloo's exceptions into a status; a failure breaks
  // the group (the ranks' operation sequences no longer agree).
  absl::Status Run(const std::string& op, const std::function<absl::Status()>& body) {
    if (absl::Status s = Usable(op); !s.ok()) return s;
    absl::Status status;
    try {
      status = body();
      if (status.ok()) return status;
    } catch (const ::gloo::IoException& e) {
      std::string what = e.what();
      if (LooksLikeTimeout(what)) {
        status = absl::DeadlineExceededError(absl::StrCat(
            Where(op), " timed out after ", absl::FormatDuration(options_.timeout),
            ": a peer did not take part (dead, hung, or in a different operation); gloo: ",
            what));
      } else {
        status = absl::UnavailableError(absl::StrCat(
            Where(op), ": a connection to a peer broke (did a rank exit?); gloo: ", what));
      }
    } catch (const std::exception& e) {
      status = absl::InternalError(absl::StrCat(Where(op), ": gloo: ", e.what()));
    }
    return Fail(op, status);
  }

  // Ring reduce-scatter. Step s (0..n-2): send chunk (r-s-1) to the right, receive chunk
  // (r-s-2) from the left and fold it in; after n-1 steps chunk r holds the full
  // reduction. A chunk is sent only after it was reduced in the previous step.
  template <typename T>
  void RingReduceScatter(const T* in, T* out, size_t per, ReduceFn reduce) {
    const int n = size(), r = rank();
    if (n == 1) {
      std::memcpy(static_cast<void*>(out), in, per * sizeof(T));
      return;
    }
    const size_t chunk = per * sizeof(T);
    std::vector<T> acc(in, in + per * n);
    std::vector<T> scratch(per);
    auto acc_buf = ctx_->createUnboundBuffer(acc.data(), acc.size() * sizeof(T));
    auto scratch_buf = ctx_->createUnboundBuffer(scratch.data(), chunk);
    const uint64_t slot = gloo::Slot::build(kReduceScatterSlotPrefix, 0);
    const int right = (r + 1) % n, left = (r + n - 1) % n;
    const auto deadline = std::chrono::steady_clock::now() + Timeout();
    auto mod = [n](int v) { return ((v % n) + n) % n; };
    for (int s = 0; s < n - 1; ++s) {
      const int send_c = mod(r - s - 1), recv_c = mod(r - s - 2);
      acc_buf->send(right, slot, send_c * chunk, chunk);
      scratch_buf->recv(left, slot, 0, chunk);
      scratch_buf->waitRecv(deadline);
      T* dst = acc.data() + recv_c * per;
      reduce(dst, dst, scratch.data(), per);
      acc_buf->waitSend(deadline);
    }
    std::memcpy(static_cast<void*>(out), acc.data() + r * per, chunk);
  }

  std::unique_ptr<KvClient> kv_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> ctx_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GroupBase>> NewGlooGroup(const GroupOptions& options) {
  if (absl::Status s = ValidateOptions(options); !s.ok()) return s;
  auto kv = ConnectKv(options);
  if (!kv.ok()) return kv.status();
  auto prefix = JoinPrefix(**kv, options);
  if (!prefix.ok()) return prefix.status();
  return NewGlooGroupAt(options, std::move(*kv), *prefix);
}

absl::StatusOr<std::unique_ptr<GroupBase>> NewGlooGroupAt(const GroupOptions& options,
                                                      std::unique_ptr<KvClient> kv_client,
                                                      const std::string& prefix_str) {
  if (absl::Status s = ValidateOptions(options); !s.ok()) return s;
  auto where = [&](const std::string& what) {
    return absl::StrCat("creating group '", options.name, "' (rank ", options.rank, " of ",
                        options.size, ", job ", options.job_id, " generation ",
                        options.generation, "): ", what);
  };
  std::unique_ptr<KvClient>* kv = &kv_client;
  const std::string* prefix = &prefix_str;
  gloo::transport::tcp::attr attr;
  if (!options.interface.empty()) {
    attr.iface = options.interface;
  } else if (!options.hostname.empty()) {
    attr.hostname = options.hostname;
  } else {
    // The address this node uses to reach rank 0's node is one the others can reach
    // us at (MASTER_ADDR itself is only right on rank 0's node).
    std::string host;
    if (const char* master = std::getenv("MASTER_ADDR"); master && *master) {
      if (auto local = LocalAddressFor(master); local.ok()) host = *local;
    }
    attr.hostname = host.empty() ? Hostname() : host;
  }
  std::shared_ptr<gloo::transport::Device> device;
  try {
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(where(absl::StrCat(
        "cannot bind Gloo's TCP device to ",
        attr.iface.empty() ? "host " + attr.hostname : "interface " + attr.iface, ": ",
        e.what())));
  }
  auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
  context->setTimeout(ToChrono(options.timeout));
  GlooKvStore store(kv->get(), *prefix, ToChrono(options.timeout));
  try {
    context->connectFullMesh(store, device);
  } catch (const std::exception& e) {
    if (!store.last_error().ok()) {
      return absl::Status(store.last_error().code(),
                          where(absl::StrCat("rendezvous: ", store.last_error().message())));
    }
    std::string what = e.what();
    if (LooksLikeTimeout(what)) {
      return absl::DeadlineExceededError(where(absl::StrCat("connecting to peers: ", what)));
    }
    return absl::UnavailableError(where(absl::StrCat("connecting to peers: ", what)));
  }
  return std::unique_ptr<GroupBase>(
      new GlooGroup(options, std::move(*kv), std::move(device), std::move(context)));
}

}  // namespace drover::collective::internal
