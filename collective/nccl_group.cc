#include "collective/nccl_group.h"

#include <cstring>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collective/group_internal.h"
#include "collective/kv_store.h"
#include "gpu/cuda_library.h"

namespace drover::collective {
namespace {

absl::StatusOr<ncclDataType_t> NcclType(DataType t) {
  switch (t) {
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
    case DataType::kFloat16: return ncclFloat16;
    case DataType::kInt32: return ncclInt32;
    case DataType::kInt64: return ncclInt64;
    case DataType::kUint8: return ncclUint8;
  }
  return absl::InvalidArgumentError("unknown data type");
}

ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  return ncclSum;
}

class NcclGroup : public internal::GroupBase {
 public:
  NcclGroup(GroupOptions options, const gpu::CudaApi* cu, const gpu::NcclApi* nc, ncclComm_t comm,
            cudaStream_t stream, float* scratch)
      : GroupBase(std::move(options), "NCCL"),
        cu_(cu),
        nc_(nc),
        comm_(comm),
        stream_(stream),
        scratch_(scratch) {}

  ~NcclGroup() override {
    StopWatching();
    cu_->cudaSetDevice(options_.device);
    if (comm_ != nullptr) {
      // A healthy communicator is finalized; a broken one was aborted already.
      nc_->ncclCommDestroy(comm_);
    }
    if (scratch_ != nullptr) cu_->cudaFree(scratch_);
    if (stream_ != nullptr) cu_->cudaStreamDestroy(stream_);
  }

  absl::Status AllReduce(void* buf, size_t count, DataType type, ReduceOp op) override {
    auto t = NcclType(type);
    if (!t.ok()) return t.status();
    return Run("AllReduce", [&] {
      return nc_->ncclAllReduce(buf, buf, count, *t, NcclOp(op), comm_, stream_);
    });
  }
  absl::Status Broadcast(void* buf, size_t count, DataType type, int root) override {
    if (root < 0 || root >= size()) {
      return Invalid("Broadcast", absl::StrCat("root ", root));
    }
    auto t = NcclType(type);
    if (!t.ok()) return t.status();
    return Run("Broadcast", [&] {
      return nc_->ncclBroadcast(buf, buf, count, *t, root, comm_, stream_);
    });
  }
  absl::Status AllGather(const void* in, void* out, size_t count_per_rank,
                         DataType type) override {
    auto t = NcclType(type);
    if (!t.ok()) return t.status();
    return Run("AllGather", [&] {
      return nc_->ncclAllGather(in, out, count_per_rank, *t, comm_, stream_);
    });
  }
  absl::Status ReduceScatter(const void* in, void* out, size_t count_per_rank, DataType type,
                             ReduceOp op) override {
    auto t = NcclType(type);
    if (!t.ok()) return t.status();
    return Run("ReduceScatter", [&] {
      return nc_->ncclReduceScatter(in, out, count_per_rank, *t, NcclOp(op), comm_, stream_);
    });
  }
  absl::Status Barrier() override {
    return Run("Barrier", [&] {
      return nc_->ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_);
    });
  }
  absl::Status Send(const void* buf, size_t bytes, int peer, uint32_t tag) override {
    if (tag != 0 || peer < 0 || peer >= size() || peer == rank()) {
      return Invalid("Send", absl::StrCat("peer ", peer, " tag ", tag, " (NCCL has no tags)"));
    }
    return Run(absl::StrCat("Send to rank ", peer), [&] {
      return nc_->ncclSend(buf, bytes, ncclUint8, peer, comm_, stream_);
    });
  }
  absl::Status Recv(void* buf, size_t bytes, int peer, uint32_t tag) override {
    if (tag != 0 || peer < 0 || peer >= size() || peer == rank()) {
      return Invalid("Recv", absl::StrCat("peer ", peer, " tag ", tag, " (NCCL has no tags)"));
    }
    return Run(absl::StrCat("Recv from rank ", peer), [&] {
      return nc_->ncclRecv(buf, bytes, ncclUint8, peer, comm_, stream_);
    });
  }

 private:
  // ncclCommAbort from the watcher's thread: the kernels in flight are told to stop, and
  // the operation's polling loop (which holds comm_mu_ whenever it touches the
  // communicator) finds comm_ gone and returns the notice.
  void AbortTransport(const absl::Status&) override {
    absl::MutexLock lock(&comm_mu_);
    if (comm_ != nullptr) {
      cu_->cudaSetDevice(options_.device);
      nc_->ncclCommAbort(comm_);
      comm_ = nullptr;
    }
  }

  // Records the failure, aborting the communicator (a broken one cannot be reused).
  absl::Status Break(const std::string& op, absl::Status s) {
    {
      absl::MutexLock lock(&comm_mu_);
      if (comm_ != nullptr) {
        nc_->ncclCommAbort(comm_);
        comm_ = nullptr;
      }
    }
    return Fail(op, s);
  }

  // Enqueues one NCCL call and polls until the stream is done, the communicator reports
  // an error, the group is aborted, or the timeout passes.
  absl::Status Run(const std::string& op, const std::function<ncclResult_t()>& enqueue) {
    if (absl::Status s = Usable(op); !s.ok()) return s;
    cu_->cudaSetDevice(options_.device);
    const absl::Time deadline = absl::Now() + options_.timeout;
    ncclResult_t r;
    std::string last;
    {
      absl::MutexLock lock(&comm_mu_);
      if (comm_ == nullptr) {
        return Fail(op, absl::AbortedError(absl::StrCat(Where(op), ": the communicator was aborted")));
      }
      r = enqueue();
      if (r != ncclSuccess && r != ncclInProgress) last = nc_->ncclGetLastError(comm_);
    }
    if (r != ncclSuccess && r != ncclInProgress) {
      return Break(op, absl::UnavailableError(
                           absl::StrCat(Where(op), ": ", nc_->ncclGetErrorString(r), " ", last)));
    }
    while (true) {
      ncclResult_t async = ncclSuccess;
      {
        absl::MutexLock lock(&comm_mu_);
        if (comm_ == nullptr) {
          return Fail(op, absl::AbortedError(absl::StrCat(Where(op), ": the communicator was aborted")));
        }
        nc_->ncclCommGetAsyncError(comm_, &async);
        if (async != ncclSuccess && async != ncclInProgress) last = nc_->ncclGetLastError(comm_);
      }
      if (async != ncclSuccess && async != ncclInProgress) {
        return Break(op, absl::UnavailableError(absl::StrCat(
                             Where(op), ": a peer failed or a connection broke: ",
                             nc_->ncclGetErrorString(async), " ", last)));
      }
      if (async == ncclSuccess) {
        cudaError_t q = cu_->cudaStreamQuery(stream_);
        if (q == cudaSuccess) return absl::OkStatus();
        if (q != cudaErrorNotReady) {
          return Break(op, absl::InternalError(
                               absl::StrCat(Where(op), ": CUDA error ", cu_->cudaGetErrorName(q))));
        }
      }
      if (absl::Now() > deadline) {
        return Break(op, absl::DeadlineExceededError(absl::StrCat(
                             Where(op), " timed out after ", absl::FormatDuration(options_.timeout),
                             ": a peer did not take part (dead, hung, or in a different "
                             "operation); the communicator was aborted")));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  // The loaded libraries (immutable tables, alive for the process).
  const gpu::CudaApi* const cu_;
  const gpu::NcclApi* const nc_;
  absl::Mutex comm_mu_;
  ncclComm_t comm_ ABSL_GUARDED_BY(comm_mu_);
  cudaStream_t stream_;
  float* scratch_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Group>> NewNcclGroup(const GroupOptions& options,
                                                    GpuRuntime* runtime) {
  auto where = [&](absl::string_view what) {
    return absl::StrCat("creating NCCL group '", options.name, "' (rank ", options.rank, " of ",
                        options.size, "): ", what);
  };
  // First, before any rendezvous: is there a GPU at all?
  std::unique_ptr<GpuRuntime> owned;
  if (runtime == nullptr) {
    owned = NewCudaRuntime();
    runtime = owned.get();
  }
  absl::StatusOr<int> devices = runtime->DeviceCount();
  if (!devices.ok() || *devices == 0) {
    return absl::FailedPreconditionError(where(absl::StrCat(
        "no GPU is visible to this process (",
        devices.ok() ? "0 devices" : std::string(devices.status().message()),
        "); NCCL needs one. Run on a node with GPUs and ask for them (--gpus-per-proc), or "
        "use the Gloo backend for CPU buffers")));
  }
  if (options.device < 0 || options.device >= *devices) {
    return absl::InvalidArgumentError(where(absl::StrCat(
        "device ", options.device, " outside the ", *devices, " visible devices")));
  }
  if (absl::Status s = internal::ValidateOptions(options); !s.ok()) return s;
  // Both libraries before any rendezvous, so that a missing one fails at once, naming
  // where it was looked for.
  absl::StatusOr<const gpu::CudaApi*> cuda = gpu::LoadCudaRuntime();
  if (!cuda.ok()) return absl::FailedPreconditionError(where(cuda.status().message()));
  absl::StatusOr<const gpu::NcclApi*> nccl = gpu::LoadNccl();
  if (!nccl.ok()) return absl::FailedPreconditionError(where(nccl.status().message()));
  const gpu::CudaApi* cu = *cuda;
  const gpu::NcclApi* nc = *nccl;
  auto kv = internal::ConnectKv(options);
  if (!kv.ok()) return kv.status();
  auto prefix = internal::JoinPrefix(**kv, options);
  if (!prefix.ok()) return prefix.status();

  ncclUniqueId id;
  const std::string key = *prefix + "nccl_unique_id";
  if (options.rank == 0) {
    ncclResult_t r = nc->ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
      return absl::InternalError(where(absl::StrCat("ncclGetUniqueId: ", nc->ncclGetErrorString(r))));
    }
    if (absl::Status s = (*kv)->Set(key, std::string(id.internal, sizeof(id.internal)));
        !s.ok()) {
      return absl::Status(s.code(), where(s.message()));
    }
  } else {
    auto v = (*kv)->Get(key, options.timeout);
    if (!v.ok()) return absl::Status(v.status().code(), where(v.status().message()));
    if ((*v)->size() != sizeof(id.internal)) {
      return absl::InternalError(where("the NCCL unique id in the KV has the wrong size"));
    }
    std::memcpy(id.internal, (*v)->data(), sizeof(id.internal));
  }

  if (cudaError_t e = cu->cudaSetDevice(options.device); e != cudaSuccess) {
    return absl::FailedPreconditionError(
        where(absl::StrCat("cudaSetDevice(", options.device, "): ", cu->cudaGetErrorName(e))));
  }
  cudaStream_t stream = nullptr;
  float* scratch = nullptr;
  if (cu->cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess ||
      cu->cudaMalloc(reinterpret_cast<void**>(&scratch), sizeof(float)) != cudaSuccess) {
    if (stream) cu->cudaStreamDestroy(stream);
    return absl::InternalError(where("creating the stream or scratch buffer failed"));
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = nc->ncclCommInitRankConfig(&comm, options.size, id, options.rank, &config);
  const absl::Time deadline = absl::Now() + options.timeout;
  ncclResult_t state = r;
  while (r == ncclSuccess || r == ncclInProgress) {
    nc->ncclCommGetAsyncError(comm, &state);
    if (state != ncclInProgress) break;
    if (absl::Now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (state != ncclSuccess) {
    if (comm != nullptr) nc->ncclCommAbort(comm);
    cu->cudaFree(scratch);
    cu->cudaStreamDestroy(stream);
    if (state == ncclInProgress) {
      return absl::DeadlineExceededError(where(absl::StrCat(
          "ncclCommInitRank did not complete within ", absl::FormatDuration(options.timeout),
          "; did every rank create the group?")));
    }
    return absl::UnavailableError(
        where(absl::StrCat("ncclCommInitRank: ", nc->ncclGetErrorString(state))));
  }
  return std::unique_ptr<Group>(new NcclGroup(options, cu, nc, comm, stream, scratch));
}

namespace {
const bool kRegistered = RegisterGroupFactory(
    Backend::kNccl, [](const GroupOptions& o) { return NewNcclGroup(o, nullptr); });
}  // namespace

}  // namespace drover::collective
