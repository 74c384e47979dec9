// Shared memory within a node, hierarchical across nodes (see group.h, "CPU algorithms").
//
// Creation (every rank, in this order): join the group's prefix in the KV; publish this
// rank's node id and read everyone's; connect a Gloo full mesh of all ranks (for the
// operations without a shared-memory path); local rank 0 of each node creates the node's
// segment (shm_open, O_EXCL, mode 0600, sized, touched) and publishes its name in the KV,
// the others open and map it (MAP_POPULATE), all meet at a barrier in the segment and
// the creator unlinks it; with several nodes, the node leaders connect a Gloo context of
// their own on "<prefix>leaders/", and when every node has the same number L > 1 of ranks,
// local rank i > 0 connects with the local ranks i of the other nodes on
// "<prefix>rail<i>/" (rail 0 is the leaders' context).
//
// Segment layout: a header (magic, abort word, futex word, sleeper count, then one
// arrival counter per local rank, each on its own cache line), then one slot of
// chunk bytes per local rank, then a result region of one chunk (1 MiB by default).
//
// Synchronisation is one primitive, a barrier: rank i stores its barrier number into
// its arrival counter and waits until every counter has reached it: first spinning
// (~20 µs, the 0.2 µs hand-off when both ranks are on a core), then yielding (up to
// 200 µs), then sleeping on a futex that every arrival bumps (and wakes if someone
// sleeps). Every wait is bounded by the operation's deadline: DEADLINE_EXCEEDED naming
// the operation and the local ranks that did not arrive. A rank that fails stores its
// status code in the abort word and wakes the others, so they fail at once too.
//
// AllReduce of one chunk of n elements over L local ranks (slice j = [n*j/L, n*(j+1)/L)):
//   1. rank i copies every slice but its own into its slot;             barrier
//   2. rank i folds slice i of the other slots into slice i of its own
//      buffer (its own slice never goes through the segment), and copies
//      the result into the result region;                                barrier
//   3. rank i copies the other slices of the result region into its buffer.
// Step 3 of chunk k and step 1 of chunk k+1 touch different regions, and nobody writes
// the result region of chunk k+1 before every rank has passed the first barrier of
// chunk k+1 (i.e. finished step 3 of chunk k), so two barriers per chunk suffice.
// The invariant between operations: an operation may start by writing its slot without
// a barrier, because no operation ends reading the slots (AllGather ends with a
// barrier); it writes the result region only after a barrier.
//
// AllReduce across nodes. Nodes of equal size L > 1: the 2-D ("rail") algorithm. Local
// rank i owns the contiguous slice [n*i/L, n*(i+1)/L) of the whole buffer:
//   1. reduce-scatter within the node: step k covers sub-chunk k of every slice at once
//      (chunk/2/L bytes of each); rank i copies the other slices' sub-chunks into its
//      slot, barrier, folds sub-chunk i of the other slots into its own buffer;
//   2. rank i allreduces its slice with local rank i of every other node over its rail's
//      Gloo ring: L rings at once, each carrying 1/L of the buffer, no rank idle (kAvg:
//      summed, then each rank divides its own slice);
//   3. allgather within the node through the result region: rank i copies sub-chunk k
//      of its slice in, barrier, copies the others' out.
// Steps 1 and 3 alternate between the two halves of the slots and of the result region
// by step parity, so one barrier per step suffices: a rank writes half k%2 in step k
// only after passing barrier k-1, which every rank reaches after its reads of step k-2.
// Step 3 writes only the result region, after step 1's barriers (no reader of an earlier
// operation is left), and ends reading the result region, keeping the invariant above.
// Counts below L leave some slices (and their rails' Gloo calls) empty; every rail has
// equal slice lengths on every node, so the rails agree.
// Nodes of unequal sizes (or DROVER_SHM_RAILS=0): reduce to local rank 0 through the
// segment (the chunked AllReduce above, result kept by rank 0 only), Gloo ring among
// the leaders on the whole buffer, broadcast back through the result region.
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <type_traits>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "collective/group.h"
#include "collective/group_internal.h"
#include "collective/kv_store.h"
#include "common/net.h"
#include "common/shm_names.h"
#include "gloo/types.h"

namespace drover::collective::internal {
namespace {


// Default chunk; DROVER_SHM_CHUNK_BYTES overrides it (for measurements; every rank of a
// node must see the same value).
constexpr size_t kDefaultChunkBytes = 1 << 20;

size_t ChunkBytes() {
  if (const char* v = std::getenv("DROVER_SHM_CHUNK_BYTES"); v && *v) {
    size_t n = std::strtoull(v, nullptr, 10);
    if (n >= 4096) return n / 64 * 64;
  }
  return kDefaultChunkBytes;
}
constexpr size_t kLine = 64;
constexpr uint64_t kMagic = 0x64726f7673686d31ull;  // "drovshm1"
constexpr int kMaxLocalRanks = 256;

// DROVER_SHM_RAILS=0 turns the rail allreduce off (the leaders' path instead), for
// measurements; every rank must see the same value.
bool RailsDisabled() {
  const char* v = std::getenv("DROVER_SHM_RAILS");
  return v != nullptr && std::string(v) == "0";
}

struct alignas(kLine) Counter {
  std::atomic<uint64_t> value;
};

struct Header {
  uint64_t magic;
  uint32_t local_size;
  uint32_t unused;
  uint64_t chunk_bytes;
  alignas(kLine) std::atomic<int32_t> abort_code;  // 0, or the absl::StatusCode of a failure
  std::atomic<int32_t> abort_rank;
  alignas(kLine) std::atomic<uint32_t> epoch;       // futex word: bumped by every arrival
  alignas(kLine) std::atomic<uint32_t> sleepers;
  Counter arrive[kMaxLocalRanks];
};
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

constexpr size_t kHeaderBytes = (sizeof(Header) + 4095) / 4096 * 4096;

// Tuning knobs for measurements (the defaults are what docs/benchmarks.md measured).
absl::Duration EnvMicros(const char* name, int64_t default_us) {
  if (const char* v = std::getenv(name); v && *v) return absl::Microseconds(std::atoll(v));
  return absl::Microseconds(default_us);
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

template <typename T>
inline T Combine(T a, T b, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return static_cast<T>(a + b);
    case ReduceOp::kMax: return a < b ? b : a;
    case ReduceOp::kMin: return b < a ? b : a;
  }
  return a;
}

// dst[k] = dst[k] op srcs[0][k] op srcs[1][k] ... (float16 accumulates in float and
// rounds once).
template <typename T>
void ReduceInto(T* __restrict dst, const std::vector<const T*>& srcs, size_t n, ReduceOp op) {
  if constexpr (std::is_same_v<T, gloo::float16>) {
    for (size_t k = 0; k < n; ++k) {
      float acc = gloo::cpu_half2float(dst[k]);
      for (const T* s : srcs) acc = Combine(acc, static_cast<float>(gloo::cpu_half2float(s[k])), op);
      dst[k] = gloo::cpu_float2half_rn(acc);
    }
  } else {
    for (const T* src : srcs) {
      const T* __restrict s = src;
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg:
          for (size_t k = 0; k < n; ++k) dst[k] = static_cast<T>(dst[k] + s[k]);
          break;
        case ReduceOp::kMax:
          for (size_t k = 0; k < n; ++k) dst[k] = dst[k] < s[k] ? s[k] : dst[k];
          break;
        case ReduceOp::kMin:
          for (size_t k = 0; k < n; ++k) dst[k] = s[k] < dst[k] ? s[k] : dst[k];
          break;
      }
    }
  }
}

template <typename T>
void DivideInPlace(T* p, size_t n, int by) {
  if constexpr (std::is_same_v<T, gloo::float16>) {
    for (size_t i = 0; i < n; ++i) {
      p[i] = gloo::cpu_float2half_rn(gloo::cpu_half2float(p[i]) / static_cast<float>(by));
    }
  } else {
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / by);
  }
}

// The node's segment, mapped by every local rank.
class ShmSegment {
 public:
  ~ShmSegment() {
    if (base_ != nullptr) ::munmap(base_, bytes_);
    if (!unlinked_ && !name_.empty()) ::shm_unlink(name_.c_str());
  }

  // Every local rank calls this; `where` prefixes error messages.
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Open(
      KvClient& kv, const std::string& prefix, int node_index, int local_rank, int local_size,
      absl::Duration timeout, const std::string& where) {
    if (local_size > kMaxLocalRanks) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", local_size,
                                                     " ranks on one node; at most ",
                                                     kMaxLocalRanks));
    }
    auto seg = std::unique_ptr<ShmSegment>(new ShmSegment);
    seg->local_rank_ = local_rank;
    seg->local_size_ = local_size;
    seg->chunk_ = ChunkBytes();
    seg->bytes_ = kHeaderBytes + (local_size + 1) * seg->chunk_;
    const std::string key = absl::StrCat(prefix, "shm/node", node_index);
    int fd = -1;
    if (local_rank == 0) {
      // The PID namespace and the owner (the rank's drover-launch) first, so that the
      // owner can remove the segments of a rank that died before unlinking
      // (common/shm_names.h); then this pid and a random part: a name taken is someone
      // else's live segment, so pick another.
      char prefix[96];
      if (CollectiveSegmentPrefix(PidNamespaceId(), CollectiveSegmentOwner(), prefix,
                                  sizeof(prefix)) < 0) {
        return absl::InternalError(absl::StrCat(where, ": segment name too long"));
      }
      absl::BitGen gen;
      for (int attempt = 0; attempt < 8 && fd < 0; ++attempt) {
        seg->name_ = absl::StrCat(prefix, ::getpid(), "-", absl::Uniform<uint64_t>(gen), "-n",
                                  node_index);
        fd = ::shm_open(seg->name_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
        if (fd < 0 && errno != EEXIST) break;
      }
      if (fd < 0) {
        std::string err = std::strerror(errno);
        seg->name_.clear();
        return absl::InternalError(absl::StrCat(where, ": shm_open: ", err));
      }
      if (::ftruncate(fd, seg->bytes_) != 0) {
        std::string err = std::strerror(errno);
        ::close(fd);
        return absl::ResourceExhaustedError(absl::StrCat(
            where, ": sizing the shared-memory segment to ", seg->bytes_, " bytes: ", err));
      }
    } else {
      auto name = kv.Get(key, timeout);
      if (!name.ok()) {
        return absl::Status(name.status().code(),
                            absl::StrCat(where, ": waiting for the node's shared-memory "
                                                "segment: ",
                                         name.status().message()));
      }
      seg->name_ = **name;
      seg->unlinked_ = true;  // the creator's job
      fd = ::shm_open(seg->name_.c_str(), O_RDWR, 0600);
      if (fd < 0) {
        return absl::InternalError(
            absl::StrCat(where, ": shm_open ", seg->name_, ": ", std::strerror(errno)));
      }
    }
    void* p = ::mmap(nullptr, seg->bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                     fd, 0);
    int mmap_errno = errno;
    ::close(fd);
    if (p == MAP_FAILED) {
      return absl::ResourceExhaustedError(
          absl::StrCat(where, ": mapping the shared-memory segment: ", std::strerror(mmap_errno)));
    }
    seg->base_ = static_cast<char*>(p);
    if (local_rank == 0) {
      // Touch everything now (first touch is ~4 µs a page), then tell the others.
      std::memset(seg->base_, 0, seg->bytes_);
      seg->header()->magic = kMagic;
      seg->header()->local_size = local_size;
      seg->header()->chunk_bytes = seg->chunk_;
      if (absl::Status s = kv.Set(key, seg->name_); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat(where, ": publishing the segment: ",
                                                   s.message()));
      }
    } else if (seg->header()->magic != kMagic ||
               seg->header()->local_size != static_cast<uint32_t>(local_size) ||
               seg->header()->chunk_bytes != seg->chunk_) {
      return absl::InternalError(absl::StrCat(where, ": segment ", seg->name_,
                                              " does not belong to this group"));
    }
    // Everyone has mapped it once everyone has arrived here.
    if (absl::Status s = seg->Barrier(absl::Now() + timeout, where); !s.ok()) return s;
    if (local_rank == 0) {
      ::shm_unlink(seg->name_.c_str());
      seg->unlinked_ = true;
    }
    return seg;
  }

  char* slot(int local_rank) const {
    return base_ + kHeaderBytes + static_cast<size_t>(local_rank) * chunk_;
  }
  size_t chunk_bytes() const { return chunk_; }
  char* result() const { return slot(local_size_); }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }

  // `where` names the operation for errors.
  absl::Status Barrier(absl::Time deadline, const std::string& where) {
    Header* h = header();
    const uint64_t b = ++seq_;
    h->arrive[local_rank_].value.store(b, std::memory_order_release);
    h->epoch.fetch_add(1, std::memory_order_seq_cst);
    if (h->sleepers.load(std::memory_order_seq_cst) > 0) Wake();
    const absl::Time start = absl::Now();
    for (uint64_t i = 0;; ++i) {
      if (AllArrived(b)) return absl::OkStatus();
      if ((i & 63) != 0) {
        CpuRelax();
        continue;
      }
      if (int code = h->abort_code.load(std::memory_order_acquire); code != 0) {
        return absl::Status(static_cast<absl::StatusCode>(code),
                            absl::StrCat(where, ": local rank ", h->abort_rank.load(),
                                         " of this node failed first (",
                                         absl::StatusCodeToString(
                                             static_cast<absl::StatusCode>(code)),
                                         ")"));
      }
      const absl::Time now = absl::Now();
      if (now >= deadline) {
        std::vector<int> missing;
        for (int j = 0; j < local_size_; ++j) {
          if (h->arrive[j].value.load(std::memory_order_acquire) < b) missing.push_back(j);
        }
        return absl::DeadlineExceededError(
            absl::StrCat(where, " timed out: local rank(s) ", absl::StrJoin(missing, ","),
                         " of this node did not take part (dead, hung, or in a different "
                         "operation)"));
      }
      const absl::Duration waited = now - start;
      if (waited < spin_) continue;
      if (waited < spin_ + yield_) {
        ::sched_yield();
        continue;
      }
      const uint32_t e = h->epoch.load(std::memory_order_seq_cst);
      h->sleepers.fetch_add(1, std::memory_order_seq_cst);
      if (!AllArrived(b) && h->abort_code.load() == 0) {
        absl::Duration d = std::min(deadline - now, absl::Milliseconds(50));
        struct timespec ts = absl::ToTimespec(d);
        ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&h->epoch), FUTEX_WAIT, e, &ts,
                  nullptr, 0);
      }
      h->sleepers.fetch_sub(1, std::memory_order_seq_cst);
    }
  }

  // Tells the other local ranks that this one failed (they stop waiting for it).
  void Abort(absl::StatusCode code) {
    Header* h = header();
    int32_t expected = 0;
    if (h->abort_code.compare_exchange_strong(expected, static_cast<int32_t>(code))) {
      h->abort_rank.store(local_rank_);
    }
    h->epoch.fetch_add(1, std::memory_order_seq_cst);
    Wake();
  }

 private:
  ShmSegment() = default;
  Header* header() const { return reinterpret_cast<Header*>(base_); }

  bool AllArrived(uint64_t b) const {
    for (int j = 0; j < local_size_; ++j) {
      if (header()->arrive[j].value.load(std::memory_order_acquire) < b) return false;
    }
    return true;
  }

  void Wake() {
    ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&header()->epoch), FUTEX_WAKE, INT_MAX,
              nullptr, nullptr, 0);
  }

  std::string name_;
  bool unlinked_ = false;
  char* base_ = nullptr;
  size_t bytes_ = 0;
  size_t chunk_ = kDefaultChunkBytes;
  int local_rank_ = 0;
  int local_size_ = 1;
  uint64_t seq_ = 0;
  absl::Duration spin_ = EnvMicros("DROVER_SHM_SPIN_US", 20);
  absl::Duration yield_ = EnvMicros("DROVER_SHM_YIELD_US", 200);
};

// Where the ranks are.
struct Topology {
  std::vector<std::vector<int>> nodes;  // ranks of each node, nodes ordered by lowest rank
  int node_index = 0;
  int local_rank = 0;
  int local_size = 1;
  // Several nodes with the same number L > 1 of ranks each: AllReduce runs over L rails
  // (see the top of this file) instead of through the node leaders.
  bool rails = false;
  bool leader() const { return local_rank == 0; }
};

class HybridGroup : public GroupBase {
 public:
  HybridGroup(GroupOptions options, Algorithm algorithm, Topology topo,
              std::unique_ptr<GroupBase> world, std::unique_ptr<ShmSegment> shm,
              std::unique_ptr<GroupBase> leaders, std::unique_ptr<GroupBase> rail)
      : GroupBase(std::move(options), AlgorithmName(algorithm)),
        algorithm_(algorithm),
        topo_(std::move(topo)),
        world_(std::move(world)),
        shm_(std::move(shm)),
        leaders_(std::move(leaders)),
        rail_(std::move(rail)) {}
  ~HybridGroup() override { StopWatching(); }

  absl::Status AllReduce(void* buf, size_t count, DataType type, ReduceOp op) override {
    if (absl::Status s = Usable("AllReduce"); !s.ok() || count == 0) return s;
    if (buf == nullptr) return Invalid("AllReduce", "null buffer");
    const absl::Time deadline = absl::Now() + options_.timeout;
    return Run("AllReduce", [&] {
      return DispatchType(type, [&](auto tag) -> absl::Status {
        using T = typename decltype(tag)::type;
        T* p = static_cast<T*>(buf);
        if (topo_.nodes.size() == 1) {
          return LocalAllReduce<T>(p, count, op, /*everyone=*/true,
                                   op == ReduceOp::kAvg ? size() : 1, deadline, "AllReduce");
        }
        if (topo_.rails) return RailAllReduce<T>(p, count, type, op, deadline);
        const ReduceOp across = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
        if (absl::Status s = LocalAllReduce<T>(p, count, across, /*everyone=*/false, 1,
                                               deadline, "AllReduce");
            !s.ok()) {
          return s;
        }
        if (topo_.leader()) {
          if (absl::Status s = Across(leaders_->AllReduce(p, count, type, across), "AllReduce");
              !s.ok()) {
            return s;
          }
          if (op == ReduceOp::kAvg) DivideInPlace(p, count, size());
        }
        return LocalBroadcast(buf, count * sizeof(T), 0, deadline, "AllReduce");
      });
    });
  }

  absl::Status Broadcast(void* buf, size_t count, DataType type, int root) override {
    if (root < 0 || root >= size()) {
      return Invalid("Broadcast", absl::StrCat("root ", root, " outside [0, ", size(), ")"));
    }
    if (absl::Status s = Usable("Broadcast"); !s.ok() || count == 0) return s;
    if (topo_.nodes.size() > 1) {
      return Run("Broadcast", [&] { return world_->Broadcast(buf, count, type, root); });
    }
    if (buf == nullptr) return Invalid("Broadcast", "null buffer");
    const absl::Time deadline = absl::Now() + options_.timeout;
    return Run("Broadcast", [&] {
      return LocalBroadcast(buf, count * DataTypeSize(type), LocalIndex(root), deadline,
                            "Broadcast");
    });
  }

  absl::Status AllGather(const void* in, void* out, size_t count_per_rank,
                         DataType type) override {
    if (absl::Status s = Usable("AllGather"); !s.ok() || count_per_rank == 0) return s;
    if (topo_.nodes.size() > 1) {
      return Run("AllGather", [&] { return world_->AllGather(in, out, count_per_rank, type); });
    }
    if (in == nullptr || out == nullptr) return Invalid("AllGather", "null buffer");
    const absl::Time deadline = absl::Now() + options_.timeout;
    return Run("AllGather", [&]() -> absl::Status {
      // One node: local rank == rank. Each rank copies a chunk of its input into its
      // slot; everyone copies every slot out. No operation ends reading the slots except
      // this one, which therefore ends with a barrier (so the next may write them).
      const size_t bytes = count_per_rank * DataTypeSize(type);
      const int n = shm_->local_size(), me = shm_->local_rank();
      const size_t chunk = shm_->chunk_bytes();
      for (size_t off = 0; off < bytes; off += chunk) {
        const size_t len = std::min(chunk, bytes - off);
        std::memcpy(shm_->slot(me), static_cast<const char*>(in) + off, len);
        if (absl::Status s = shm_->Barrier(deadline, Where("AllGather")); !s.ok()) return s;
        for (int j = 0; j < n; ++j) {
          std::memcpy(static_cast<char*>(out) + j * bytes + off, shm_->slot(j), len);
        }
        if (absl::Status s = shm_->Barrier(deadline, Where("AllGather")); !s.ok()) return s;
      }
      return absl::OkStatus();
    });
  }

  absl::Status ReduceScatter(const void* in, void* out, size_t count_per_rank, DataType type,
                             ReduceOp op) override {
    if (absl::Status s = Usable("ReduceScatter"); !s.ok()) return s;
    return Run("ReduceScatter",
               [&] { return world_->ReduceScatter(in, out, count_per_rank, type, op); });
  }

  absl::Status Barrier() override {
    if (absl::Status s = Usable("Barrier"); !s.ok()) return s;
    const absl::Time deadline = absl::Now() + options_.timeout;
    return Run("Barrier", [&]() -> absl::Status {
      if (shm_) {
        if (absl::Status s = shm_->Barrier(deadline, Where("Barrier")); !s.ok()) return s;
      }
      if (topo_.nodes.size() == 1) return absl::OkStatus();
      if (topo_.leader()) {
        if (absl::Status s = Across(leaders_->Barrier(), "Barrier"); !s.ok()) return s;
      }
      if (shm_) return shm_->Barrier(deadline, Where("Barrier"));
      return absl::OkStatus();
    });
  }

  absl::Status Send(const void* buf, size_t bytes, int peer, uint32_t tag) override {
    if (absl::Status s = Usable("Send"); !s.ok()) return s;
    return Run("Send", [&] { return world_->Send(buf, bytes, peer, tag); });
  }
  absl::Status Recv(void* buf, size_t bytes, int peer, uint32_t tag) override {
    if (absl::Status s = Usable("Recv"); !s.ok()) return s;
    return Run("Recv", [&] { return world_->Recv(buf, bytes, peer, tag); });
  }

 private:
  int LocalIndex(int rank) const {
    const auto& mine = topo_.nodes[topo_.node_index];
    return static_cast<int>(std::find(mine.begin(), mine.end(), rank) - mine.begin());
  }

  // The local ranks' waits end at once (the segment's abort word), and so do the Gloo
  // contexts' (their connections are signalled and closed).
  void AbortTransport(const absl::Status& cause) override {
    if (shm_) shm_->Abort(absl::StatusCode::kAborted);
    world_->Abort(cause);
    if (leaders_) leaders_->Abort(cause);
    if (rail_) rail_->Abort(cause);
  }

  // A failure of the leaders' Gloo step, named as this group's operation.
  absl::Status Across(const absl::Status& s, const std::string& op) const {
    if (s.ok()) return s;
    return absl::Status(s.code(), absl::StrCat(Where(op), ": across nodes: ", s.message()));
  }

  absl::Status Run(const std::string& op, const std::function<absl::Status()>& body) {
    absl::Status s = body();
    if (s.ok()) return s;
    if (shm_) shm_->Abort(s.code());
    return Fail(op, s);
  }

  // Reduces `count` elements over the node's ranks; with `everyone` every local rank
  // ends with the result, else only local rank 0. `divide_by` > 1 divides the result.
  template <typename T>
  absl::Status LocalAllReduce(T* buf, size_t count, ReduceOp op, bool everyone, int divide_by,
                              absl::Time deadline, const std::string& op_name) {
    if (!shm_) {
      if (divide_by > 1) DivideInPlace(buf, count, divide_by);
      return absl::OkStatus();
    }
    const std::string where = Where(op_name);
    const int n = shm_->local_size(), me = shm_->local_rank();
    const size_t chunk = shm_->chunk_bytes() / sizeof(T);
    std::vector<const T*> others;
    for (size_t off = 0; off < count; off += chunk) {
      const size_t len = std::min(chunk, count - off);
      auto lo = [&](int j) { return len * j / n; };
      T* in = buf + off;
      const size_t mine_lo = lo(me), mine_hi = lo(me + 1);
      T* myslot = reinterpret_cast<T*>(shm_->slot(me));
      std::memcpy(static_cast<void*>(myslot), in, mine_lo * sizeof(T));
      std::memcpy(static_cast<void*>(myslot + mine_hi), in + mine_hi,
                  (len - mine_hi) * sizeof(T));
      if (absl::Status s = shm_->Barrier(deadline, where); !s.ok()) return s;
      others.clear();
      for (int j = 0; j < n; ++j) {
        if (j != me) others.push_back(reinterpret_cast<const T*>(shm_->slot(j)) + mine_lo);
      }
      ReduceInto(in + mine_lo, others, mine_hi - mine_lo, op);
      if (divide_by > 1) DivideInPlace(in + mine_lo, mine_hi - mine_lo, divide_by);
      T* result = reinterpret_cast<T*>(shm_->result());
      std::memcpy(static_cast<void*>(result + mine_lo), in + mine_lo,
                  (mine_hi - mine_lo) * sizeof(T));
      if (absl::Status s = shm_->Barrier(deadline, where); !s.ok()) return s;
      if (everyone || me == 0) {
        std::memcpy(static_cast<void*>(in), result, mine_lo * sizeof(T));
        std::memcpy(static_cast<void*>(in + mine_hi), result + mine_hi,
                    (len - mine_hi) * sizeof(T));
      }
    }
    return absl::OkStatus();
  }

  // Local rank `root`'s `bytes` of `buf` into every local rank's `buf`.
  absl::Status LocalBroadcast(void* buf, size_t bytes, int root, absl::Time deadline,
                              const std::string& op_name) {
    if (!shm_) return absl::OkStatus();
    const std::string where = Where(op_name);
    const bool is_root = shm_->local_rank() == root;
    char* p = static_cast<char*>(buf);
    const size_t chunk = shm_->chunk_bytes();
    for (size_t off = 0; off < bytes; off += chunk) {
      const size_t len = std::min(chunk, bytes - off);
      // Nobody still reads the result region (previous chunk or operation).
      if (absl::Status s = shm_->Barrier(deadline, where); !s.ok()) return s;
      if (is_root) std::memcpy(shm_->result(), p + off, len);
      if (absl::Status s = shm_->Barrier(deadline, where); !s.ok()) return s;
      if (!is_root) std::memcpy(p + off, shm_->result(), len);
    }
    return absl::OkStatus();
  }

  // The 2-D ("rail") allreduce over nodes of L ranks each (topo_.rails): local rank i
  // owns the contiguous slice [count*i/L, count*(i+1)/L) of the buffer.
  //   1. reduce-scatter within the node: rank i ends with the node's reduction of its slice;
  //   2. rank i allreduces its slice with local rank i of every other node (its rail's Gloo
  //      ring): L rings in parallel, each carrying 1/L of the buffer;
  //   3. allgather within the node: every rank copies the other slices out.
  template <typename T>
  absl::Status RailAllReduce(T* buf, size_t count, DataType type, ReduceOp op,
                             absl::Time deadline) {
    const std::string where = Where("AllReduce");
    const ReduceOp across = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
    const int me = shm_->local_rank();
    const SliceSteps<T> steps(count, shm_->local_size(), shm_->chunk_bytes());
    if (absl::Status s = LocalReduceScatter(buf, steps, across, deadline, where); !s.ok()) {
      return s;
    }
    T* mine = buf + steps.lo(me);
    const size_t mine_count = steps.lo(me + 1) - steps.lo(me);
    Group* rail = topo_.leader() ? leaders_.get() : rail_.get();
    if (absl::Status s = Across(rail->AllReduce(mine, mine_count, type, across), "AllReduce");
        !s.ok()) {
      return s;
    }
    if (op == ReduceOp::kAvg) DivideInPlace(mine, mine_count, size());
    return LocalAllGatherSlices(buf, steps, deadline, where);
  }

  // How the rail path walks the slices through the segment: step k covers elements
  // [k*per_step, (k+1)*per_step) of every slice at once; sub-chunk j of a step sits at
  // j*per_step in a half of the segment region (halves alternate by step, so a rank may
  // write step k+1 while another still reads step k: one barrier per step).
  template <typename T>
  struct SliceSteps {
    SliceSteps(size_t count, int local_size, size_t chunk_bytes)
        : count(count), local_size(local_size), half_bytes(chunk_bytes / 2) {
      const size_t share = half_bytes / local_size;  // bytes per slice per step
      per_step = share >= kLine ? share / kLine * kLine / sizeof(T) : share / sizeof(T);
      per_step = std::max<size_t>(per_step, 1);
      const size_t longest = (count + local_size - 1) / local_size;
      n = (longest + per_step - 1) / per_step;
    }
    size_t lo(int j) const { return count * j / local_size; }
    // Elements [begin, end) of slice j in step k (empty if the slice is shorter).
    size_t begin(int j, size_t k) const { return std::min(lo(j) + k * per_step, lo(j + 1)); }
    size_t end(int j, size_t k) const { return std::min(lo(j) + (k + 1) * per_step, lo(j + 1)); }
    T* at(char* region, size_t k, int j) const {
      return reinterpret_cast<T*>(region + (k & 1) * half_bytes) + j * per_step;
    }
    size_t count;
    int local_size;
    size_t half_bytes;
    size_t per_step = 1;
    size_t n = 0;  // steps
  };

  // Step 1 of RailAllReduce. Per step: rank i copies the sub-chunks of the other slices
  // into its slot; barrier; rank i folds sub-chunk i of the other slots into its buffer.
  // Ends reading the slots; the next write of a slot (RailAllReduce's allgather writes
  // only the result region, the next operation comes after its barriers) waits for that.
  template <typename T>
  absl::Status LocalReduceScatter(T* buf, const SliceSteps<T>& st, ReduceOp op,
                                  absl::Time deadline, const std::string& where) {
    const int n = st.local_size, me = shm_->local_rank();
    std::vector<const T*> others;
    for (size_t k = 0; k < st.n; ++k) {
      for (int j = 0; j < n; ++j) {
        if (j == me) continue;
        const size_t b = st.begin(j, k), e = st.end(j, k);
        std::memcpy(static_cast<void*>(st.at(shm_->slot(me), k, j)), buf + b, (e - b) * sizeof(T));
      }
      if (absl::Status s = shm_->Barrier(deadline, where); !s.ok()) return s;
      const size_t b = st.begin(me, k), e = st.end(me, k);
      if (b == e) continue;
      others.clear();
      for (int j = 0; j < n; ++j) {
        if (j != me) others.push_back(st.at(shm_->slot(j), k, me));
      }
      ReduceInto(buf + b, others, e - b, op);
    }
    return absl::OkStatus();
  }

  // Step 3 of RailAllReduce, through the result region. Per step: rank i copies its
  // sub-chunk in; barrier; everyone copies the others' out. Its first write follows the
  // reduce-scatter's barriers, so nobody still reads the result region of an earlier
  // operation; it ends reading the result region, never the slots.
  template <typename T>
  absl::Status LocalAllGatherSlices(T* buf, const SliceSteps<T>& st, absl::Time deadline,
                                    const std::string& where) {
    const int n = st.local_size, me = shm_->local_rank();
    for (size_t k = 0; k < st.n; ++k) {
      {
        const size_t b = st.begin(me, k), e = st.end(me, k);
        std::memcpy(static_cast<void*>(st.at(shm_->result(), k, me)), buf + b, (e - b) * sizeof(T));
      }
      if (absl::Status s = shm_->Barrier(deadline, where); !s.ok()) return s;
      for (int j = 0; j < n; ++j) {
        if (j == me) continue;
        const size_t b = st.begin(j, k), e = st.end(j, k);
        std::memcpy(static_cast<void*>(buf + b), st.at(shm_->result(), k, j), (e - b) * sizeof(T));
      }
    }
    return absl::OkStatus();
  }

  Algorithm algorithm_;
  Topology topo_;
  std::unique_ptr<GroupBase> world_;
  std::unique_ptr<ShmSegment> shm_;
  std::unique_ptr<GroupBase> leaders_;
  // With topo_.rails, on local ranks > 0: the Gloo group of this rank's rail (local rank
  // 0's rail is leaders_).
  std::unique_ptr<GroupBase> rail_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GroupBase>> NewHybridGroup(const GroupOptions& options) {
  if (absl::Status s = ValidateOptions(options); !s.ok()) return s;
  auto where = [&](const std::string& what) {
    return absl::StrCat("creating group '", options.name, "' (rank ", options.rank, " of ",
                        options.size, ", job ", options.job_id, " generation ",
                        options.generation, "): ", what);
  };
  auto kv = ConnectKv(options);
  if (!kv.ok()) return kv.status();
  auto prefix = JoinPrefix(**kv, options);
  if (!prefix.ok()) return prefix.status();

  // Where everyone is.
  const std::string node_id = options.node_id.empty() ? Hostname() : options.node_id;
  if (absl::Status s = (*kv)->Set(absl::StrCat(*prefix, "node/", options.rank), node_id);
      !s.ok()) {
    return absl::Status(s.code(), where(absl::StrCat("publishing the node: ", s.message())));
  }
  std::map<std::string, std::vector<int>> by_node;
  std::vector<std::string> node_of(options.size);
  for (int r = 0; r < options.size; ++r) {
    auto v = (*kv)->Get(absl::StrCat(*prefix, "node/", r), options.timeout);
    if (!v.ok()) {
      return absl::Status(v.status().code(),
                          where(absl::StrCat("waiting for rank ", r, " to join: ",
                                             v.status().message())));
    }
    node_of[r] = **v;
    by_node[node_of[r]].push_back(r);
  }
  Topology topo;
  for (int r = 0; r < options.size; ++r) {
    auto& ranks = by_node[node_of[r]];
    if (ranks.front() == r) topo.nodes.push_back(ranks);  // ordered by lowest rank
  }
  for (size_t i = 0; i < topo.nodes.size(); ++i) {
    const auto& ranks = topo.nodes[i];
    auto it = std::find(ranks.begin(), ranks.end(), options.rank);
    if (it != ranks.end()) {
      topo.node_index = static_cast<int>(i);
      topo.local_rank = static_cast<int>(it - ranks.begin());
      topo.local_size = static_cast<int>(ranks.size());
    }
  }
  Algorithm algorithm = options.algorithm;
  if (algorithm == Algorithm::kAuto) {
    if (topo.nodes.size() == 1) {
      algorithm = Algorithm::kShm;
    } else if (topo.nodes.size() == static_cast<size_t>(options.size)) {
      algorithm = Algorithm::kGloo;
    } else {
      algorithm = Algorithm::kHierarchical;
    }
  }
  if (topo.nodes.size() > 1 && topo.local_size > 1 && !RailsDisabled()) {
    topo.rails = std::all_of(topo.nodes.begin(), topo.nodes.end(),
                             [&](const std::vector<int>& n) {
                               return n.size() == topo.nodes[0].size();
                             });
  }
  if (algorithm == Algorithm::kShm && topo.nodes.size() > 1) {
    return absl::InvalidArgumentError(where(absl::StrCat(
        "algorithm shm needs every rank on one node; the ranks are on ", topo.nodes.size(),
        " nodes")));
  }

  auto world_kv = ConnectKv(options);
  if (!world_kv.ok()) return world_kv.status();
  auto world = NewGlooGroupAt(options, std::move(*world_kv), absl::StrCat(*prefix, "world/"));
  if (!world.ok() || algorithm == Algorithm::kGloo) return world;

  std::unique_ptr<ShmSegment> shm;
  if (topo.local_size > 1) {
    auto seg = ShmSegment::Open(**kv, *prefix, topo.node_index, topo.local_rank,
                                topo.local_size, options.timeout,
                                where("shared-memory segment"));
    if (!seg.ok()) return seg.status();
    shm = std::move(*seg);
  }
  std::unique_ptr<GroupBase> leaders;
  if (topo.nodes.size() > 1 && topo.leader()) {
    GroupOptions lo = options;
    lo.name = options.name + ".leaders";
    lo.rank = topo.node_index;
    lo.size = static_cast<int>(topo.nodes.size());
    auto leaders_kv = ConnectKv(lo);
    if (!leaders_kv.ok()) return leaders_kv.status();
    auto g = NewGlooGroupAt(lo, std::move(*leaders_kv), absl::StrCat(*prefix, "leaders/"));
    if (!g.ok()) return g.status();
    leaders = std::move(*g);
  }
  // Rails: local rank i > 0 of every node meets the local ranks i of the other nodes on
  // "<prefix>rail<i>/" (rail 0 is the leaders' group).
  std::unique_ptr<GroupBase> rail;
  if (topo.rails && !topo.leader()) {
    GroupOptions ro = options;
    ro.name = absl::StrCat(options.name, ".rail", topo.local_rank);
    ro.rank = topo.node_index;
    ro.size = static_cast<int>(topo.nodes.size());
    auto rail_kv = ConnectKv(ro);
    if (!rail_kv.ok()) return rail_kv.status();
    auto g = NewGlooGroupAt(ro, std::move(*rail_kv),
                            absl::StrCat(*prefix, "rail", topo.local_rank, "/"));
    if (!g.ok()) return g.status();
    rail = std::move(*g);
  }
  return std::unique_ptr<GroupBase>(new HybridGroup(options, algorithm, std::move(topo),
                                                std::move(*world), std::move(shm),
                                                std::move(leaders), std::move(rail)));
}

}  // namespace drover::collective::internal
