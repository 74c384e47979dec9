// A process of a drover job that checks drover/tensor_collectives.h on real object-store
// tensors (run by sdk/tensor_collectives_test.cc on a TestCluster). Each rank puts
// tensors whose elements are a deterministic function of (rank, index), runs every
// operation on every dtype and compares each result's header and every element with a
// reference computed locally; then reads other ranks' results by id (same node: in
// place, already in this store; other node: pulled); then checks that bad arguments
// fail with the documented codes on every rank and leave no object behind, and that the
// group still works afterwards.
//
//   tensor_collectives_worker --out=DIR     writes DIR/rank<R>.txt (what it checked, or
//                                           the first mismatch); exit 0 on success
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "drover/collective.h"
#include "drover/objects.h"
#include "drover/tensor.h"
#include "drover/tensor_collectives.h"
#include "object_store/client.h"
#include "object_store/tensor.h"
#include "sdk/internal/objects_internal.h"
#include "sdk/internal/tensor_internal.h"

namespace drover {
namespace {

namespace os = object_store;
using internal::TensorAccess;

int g_rank = -1;
std::string g_out_dir;
std::string g_report;

void Report(const std::string& line) {
  g_report += line + "\n";
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void WriteReport() {
  if (g_out_dir.empty()) return;
  std::ofstream f(absl::StrCat(g_out_dir, "/rank", g_rank, ".txt"));
  f << g_report;
}

[[noreturn]] void Die(const std::string& msg) {
  Report(absl::StrCat("FAILED: ", msg));
  std::fprintf(stderr, "tensor_collectives_worker rank %d: %s\n", g_rank, msg.c_str());
  WriteReport();
  std::exit(1);
}

void Check(const absl::Status& s, const std::string& what) {
  if (!s.ok()) Die(absl::StrCat(what, ": ", s.ToString()));
}

template <typename T>
T Take(absl::StatusOr<T> v, const std::string& what) {
  Check(v.status(), what);
  return std::move(*v);
}

// Small integers: exact in every dtype; sums of 4 ranks stay < 256.
double Input(int rank, int64_t i) { return static_cast<double>((rank * 7 + i * 3) % 11 + rank); }

uint16_t HalfFromSmallInt(int v) {
  if (v == 0) return 0;
  int e = 0;
  while ((2 << e) <= v) ++e;
  return static_cast<uint16_t>(((e + 15) << 10) | ((v << (10 - e)) - 1024));
}

double HalfToDouble(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = e == 0 ? std::ldexp(m, -24) : e == 31 ? INFINITY : std::ldexp(m + 1024, e - 25);
  return (h >> 15) ? -v : v;
}

void SetElement(DType t, uint8_t* base, int64_t i, double v) {
  switch (t) {
    case DType::kFloat16: {
      uint16_t h = HalfFromSmallInt(static_cast<int>(v));
      std::memcpy(base + 2 * i, &h, 2);
      break;
    }
    case DType::kFloat32: reinterpret_cast<float*>(base)[i] = static_cast<float>(v); break;
    case DType::kFloat64: reinterpret_cast<double*>(base)[i] = v; break;
    case DType::kInt32: reinterpret_cast<int32_t*>(base)[i] = static_cast<int32_t>(v); break;
    case DType::kInt64: reinterpret_cast<int64_t*>(base)[i] = static_cast<int64_t>(v); break;
    case DType::kUInt8: base[i] = static_cast<uint8_t>(v); break;
    default: std::memset(base + i * DTypeSize(t), static_cast<int>(v), DTypeSize(t));
  }
}

double GetElement(DType t, const uint8_t* base, int64_t i) {
  switch (t) {
    case DType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, base + 2 * i, 2);
      return HalfToDouble(h);
    }
    case DType::kFloat32: return reinterpret_cast<const float*>(base)[i];
    case DType::kFloat64: return reinterpret_cast<const double*>(base)[i];
    case DType::kInt32: return reinterpret_cast<const int32_t*>(base)[i];
    case DType::kInt64: return static_cast<double>(reinterpret_cast<const int64_t*>(base)[i]);
    case DType::kUInt8: return base[i];
    default: return base[i * DTypeSize(t)];
  }
}

bool IsFloat(DType t) {
  return t == DType::kFloat16 || t == DType::kFloat32 || t == DType::kFloat64;
}

const uint8_t* Bytes(const Tensor& t) { return static_cast<const uint8_t*>(t.raw_data()); }

class Worker {
 public:
  Worker(CollectiveGroup& group, Objects& objects)
      : g_(group), objects_(objects), store_(internal::ObjectsAccess::Store(objects)) {}

  // Puts a tensor of `shape` whose element i is value(i) (through the public
  // PutTensor) and returns it read back from the store.
  template <typename F>
  Tensor Put(const std::string& id, DType t, std::vector<int64_t> shape, F value) {
    Tensor in = Take(Tensor::Empty(t, std::move(shape)), "Tensor::Empty " + id);
    auto* bytes = static_cast<uint8_t*>(const_cast<void*>(in.raw_data()));
    for (int64_t i = 0; i < in.numel(); ++i) SetElement(t, bytes, i, value(i));
    Check(objects_.PutTensor(id, in), "PutTensor " + id);
    return Take(objects_.GetTensor(id, absl::Seconds(30)), "GetTensor " + id);
  }
  Tensor PutInput(const std::string& id, DType t, std::vector<int64_t> shape, int rank) {
    return Put(id, t, std::move(shape), [&](int64_t i) { return Input(rank, i); });
  }
  // Puts an object with the header `meta` (any layout, any byte order) straight through
  // the store client.
  void PutRaw(const std::string& id, const os::TensorMeta& meta) {
    std::vector<uint8_t> bytes(meta.data_size);
    const int64_t slots = meta.data_size / os::DTypeSize(meta.dtype);
    for (int64_t i = 0; i < slots; ++i) {
      SetElement(internal::FromStoreDType(meta.dtype), bytes.data(), i, Input(g_.rank(), i));
    }
    Check(store_.Put(id, bytes, Take(os::EncodeTensorHeader(meta), "header " + id)),
          "Put " + id);
  }

  // Checks the result (contiguous, offset 0, `shape`, the object `out_id` in this
  // node's arena, with that header stored) and that element i equals want(i).
  template <typename F>
  void Expect(const Tensor& out, DType t, const std::vector<int64_t>& shape, F want,
              const std::string& what) {
    if (out.dtype() != t || out.shape() != shape || !out.is_contiguous() ||
        out.storage_offset() != 0) {
      Die(absl::StrCat(what, ": header differs: ", out.Describe(), " strides [",
                       absl::StrJoin(out.strides(), ","), "] offset ", out.storage_offset()));
    }
    if (!out.in_store() || out.writable()) Die(what + ": the result is not a store object");
    // The result is the object in this node's shared arena, read in place.
    const uint8_t* base = store_.arena_base();
    if (Bytes(out) < base || Bytes(out) + out.nbytes() > base + store_.arena_capacity()) {
      Die(what + ": the result is not in this node's arena");
    }
    // The header stored with the object says the same.
    const Buffer& storage = TensorAccess::StorageOf(out);
    auto stored = Take(os::DecodeTensorHeader(storage.metadata(), storage.size()),
                       what + ": stored header");
    if (stored != os::ContiguousMeta(internal::ToStoreDType(t), shape)) {
      Die(what + ": the stored header differs from the returned one");
    }
    const int64_t n = out.numel();
    for (int64_t i = 0; i < n; ++i) {
      double got = GetElement(t, Bytes(out), i), w = want(i);
      double tol = IsFloat(t) ? 1e-3 * std::max(1.0, std::fabs(w)) : 0;
      if (std::fabs(got - w) > tol) {
        Die(absl::StrCat(what, ": element ", i, " is ", got, ", want ", w));
      }
    }
  }

  double Reduce(ReduceOp op, DType t, int64_t i, int ranks_offset_rows = 0) {
    const int n = g_.size();
    double acc = 0;
    for (int r = 0; r < n; ++r) {
      double v = Input(r, i + ranks_offset_rows);
      if (r == 0) acc = v;
      else if (op == ReduceOp::kMax) acc = std::max(acc, v);
      else if (op == ReduceOp::kMin) acc = std::min(acc, v);
      else acc += v;
    }
    if (op == ReduceOp::kAvg) acc = IsFloat(t) ? acc / n : std::trunc(acc / n);
    return acc;
  }

  void CheckDType(DType t) {
    const int rank = g_.rank(), n = g_.size();
    const std::string dt = DTypeName(t);
    const int64_t rows = 2 * n, cols = 3;
    const std::vector<int64_t> shape = {rows, cols};
    Tensor in = PutInput(absl::StrCat("in.", dt, ".r", rank), t, shape, rank);

    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
      std::string what = absl::StrCat("AllReduceTensor ", ReduceOpName(op), " ", dt);
      Tensor out = Take(AllReduceTensor(g_, objects_, in,
                                        absl::StrCat("ar.", ReduceOpName(op), ".", dt, ".r", rank),
                                        op),
                        what);
      Expect(out, t, shape, [&](int64_t i) { return Reduce(op, t, i); }, what);
    }

    {
      std::string what = "AllGatherTensor " + dt;
      Tensor out =
          Take(AllGatherTensor(g_, objects_, in, absl::StrCat("ag.", dt, ".r", rank)), what);
      const int64_t per = rows * cols;
      Expect(out, t, {n * rows, cols}, [&](int64_t i) { return Input(i / per, i % per); },
             what);
    }

    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      std::string what = absl::StrCat("ReduceScatterTensor ", ReduceOpName(op), " ", dt);
      Tensor out = Take(ReduceScatterTensor(g_, objects_, in,
                                            absl::StrCat("rs.", ReduceOpName(op), ".", dt, ".r",
                                                         rank),
                                            op),
                        what);
      const int64_t slice = rows / n * cols;
      Expect(out, t, {rows / n, cols},
             [&](int64_t i) { return Reduce(op, t, i, static_cast<int>(rank * slice)); }, what);
    }

    {
      const int root = n - 1;
      std::string what = "BroadcastTensor " + dt;
      Tensor out = Take(BroadcastTensor(g_, objects_, rank == root ? &in : nullptr,
                                        absl::StrCat("bc.", dt, ".r", rank), root),
                        what);
      Expect(out, t, shape, [&](int64_t i) { return Input(root, i); }, what);
    }

    if (n % 2 == 0) {
      // Pairs (0,1), (2,3): even sends first, then the odd rank answers.
      const int peer = rank ^ 1;
      std::string what = "SendTensor/RecvTensor " + dt;
      for (int round = 0; round < 2; ++round) {
        const bool sending = (rank % 2 == 0) == (round == 0);
        if (sending) {
          Check(SendTensor(g_, in, peer, 7), what);
        } else {
          Tensor out = Take(RecvTensor(g_, objects_,
                                       absl::StrCat("p2p.", dt, ".r", rank), peer, 7),
                            what);
          Expect(out, t, shape, [&](int64_t i) { return Input(peer, i); }, what);
        }
      }
    }
    Report(absl::StrCat("ok ", dt, ": allreduce sum/avg/max/min, allgather, reduce_scatter "
                        "sum/max, broadcast", n % 2 == 0 ? ", send/recv" : ""));
  }

  // Tensors of a few MiB: the shared-memory paths move them in several chunks.
  void CheckLarge() {
    const int rank = g_.rank(), n = g_.size();
    const DType t = DType::kFloat32;
    const std::vector<int64_t> shape = {32 * n, 8192};  // n MiB
    Tensor in = PutInput(absl::StrCat("in.large.r", rank), t, shape, rank);
    absl::Time t0 = absl::Now();
    Tensor sum = Take(AllReduceTensor(g_, objects_, in, absl::StrCat("ar.large.r", rank),
                                      ReduceOp::kSum),
                      "AllReduceTensor large");
    absl::Duration took = absl::Now() - t0;
    Expect(sum, t, shape, [&](int64_t i) { return Reduce(ReduceOp::kSum, t, i); },
           "AllReduceTensor large");
    Tensor all = Take(AllGatherTensor(g_, objects_, in, absl::StrCat("ag.large.r", rank)),
                      "AllGatherTensor large");
    const int64_t per = shape[0] * shape[1];
    Expect(all, t, {n * shape[0], shape[1]}, [&](int64_t i) { return Input(i / per, i % per); },
           "AllGatherTensor large");
    Tensor bc = Take(BroadcastTensor(g_, objects_, rank == 0 ? &in : nullptr,
                                     absl::StrCat("bc.large.r", rank), 0),
                     "BroadcastTensor large");
    Expect(bc, t, shape, [&](int64_t i) { return Input(0, i); }, "BroadcastTensor large");
    Report(absl::StrCat("ok ", n, " MiB float32: allreduce (", absl::FormatDuration(took),
                        "), allgather, broadcast"));
  }

  // Byte-moving operations take every dtype; reductions refuse the others.
  void CheckOtherDTypes() {
    const int rank = g_.rank(), n = g_.size();
    for (DType t : {DType::kBFloat16, DType::kBool, DType::kInt16}) {
      const std::string dt = DTypeName(t);
      Tensor in = PutInput(absl::StrCat("in.", dt, ".r", rank), t, {3, 2}, rank);
      Tensor out = Take(AllGatherTensor(g_, objects_, in, absl::StrCat("ag.", dt, ".r", rank)),
                        "AllGatherTensor " + dt);
      if (out.shape() != std::vector<int64_t>{3 * n, 2} || out.dtype() != t) {
        Die("AllGatherTensor " + dt + ": wrong header");
      }
      const size_t per = in.nbytes();
      for (int r = 0; r < n; ++r) {
        for (size_t b = 0; b < per; ++b) {
          uint8_t want = static_cast<uint8_t>(Input(r, b / DTypeSize(t)));
          if (Bytes(out)[r * per + b] != want) Die("AllGatherTensor " + dt + ": wrong byte");
        }
      }
      auto bad = AllReduceTensor(g_, objects_, in, absl::StrCat("ar.", dt, ".r", rank),
                                 ReduceOp::kSum);
      ExpectError(bad.status(), absl::StatusCode::kInvalidArgument,
                  {"dtype " + dt + " is not supported", "supported: float16, float32, float64, "
                   "int32, int64, uint8"},
                  "AllReduceTensor " + dt);
      ExpectAbsent(absl::StrCat("ar.", dt, ".r", rank));
    }
    // A tensor with no elements.
    Tensor empty = PutInput(absl::StrCat("in.empty.r", rank), DType::kFloat32, {0, 4}, rank);
    Tensor out = Take(AllReduceTensor(g_, objects_, empty, absl::StrCat("ar.empty.r", rank),
                                      ReduceOp::kSum),
                      "AllReduceTensor of an empty tensor");
    Expect(out, DType::kFloat32, {0, 4}, [](int64_t) { return 0.0; }, "empty");
    // A tensor of this process (not from the store) is an input like any other.
    Tensor own = Take(Tensor::FromVector<int64_t>({rank, 1, 2}, {3}), "FromVector");
    Tensor sum = Take(AllReduceTensor(g_, objects_, own, absl::StrCat("ar.own.r", rank),
                                      ReduceOp::kSum),
                      "AllReduceTensor of a tensor of this process");
    Expect(sum, DType::kInt64, {3},
           [&](int64_t i) { return i == 0 ? n * (n - 1) / 2.0 : static_cast<double>(i * n); },
           "AllReduceTensor of a tensor of this process");
    Report("ok bfloat16/bool/int16 allgather; reductions refuse them; empty tensor; "
           "a tensor of this process");
  }

  // Other ranks' results, by id: on this node in place (already here, no pull); on the
  // other node pulled through the agent. All ranks' allreduce results are equal.
  void CheckReadByOthers(const std::vector<uint64_t>& node_of) {
    const int rank = g_.rank(), n = g_.size();
    Check(g_.Barrier(), "Barrier");  // every rank has sealed its results
    const std::string mine_id = absl::StrCat("ar.sum.float32.r", rank);
    Tensor mine = Take(objects_.GetTensor(mine_id, absl::Seconds(5)), "own result");
    int local = 0, remote = 0;
    for (int r = 0; r < n; ++r) {
      if (r == rank) continue;
      const std::string id = absl::StrCat("ar.sum.float32.r", r);
      const bool same_node = node_of[r] == node_of[rank];
      bool here = Take(store_.Contains(id), "Contains " + id);
      if (same_node && !here) Die("rank " + std::to_string(r) + "'s result " + id +
                                  " is not in this node's store");
      Tensor other = Take(objects_.GetTensor(id, absl::Seconds(30)), "GetTensor " + id);
      if (other.dtype() != mine.dtype() || other.shape() != mine.shape() ||
          std::memcmp(Bytes(other), Bytes(mine), mine.nbytes()) != 0) {
        Die("rank " + std::to_string(r) + "'s allreduce result differs from this rank's");
      }
      (same_node ? local : remote)++;
    }
    Report(absl::StrCat("ok read other ranks' results by id: ", local, " on this node, ",
                        remote, " from the other node"));
  }

  void ExpectError(const absl::Status& s, absl::StatusCode code,
                   const std::vector<std::string>& parts, const std::string& what) {
    if (s.code() != code) {
      Die(absl::StrCat(what, ": want ", absl::StatusCodeToString(code), ", got ", s.ToString()));
    }
    for (const auto& p : parts) {
      if (!absl::StrContains(s.message(), p)) {
        Die(absl::StrCat(what, ": the message lacks '", p, "': ", s.ToString()));
      }
    }
  }

  void ExpectAbsent(const std::string& id) {
    if (Take(store_.Contains(id), "Contains " + id)) {
      Die("a failed operation left object " + id + " behind");
    }
  }

  void CheckErrors() {
    const int rank = g_.rank(), n = g_.size();
    const int64_t rows = 2 * n, cols = 3;
    const DType f32 = DType::kFloat32;
    auto id = [&](const std::string& p) { return absl::StrCat(p, ".r", rank); };
    // Inputs first; then nothing but failing operations until the second Stats.
    Tensor good = PutInput(id("e.good"), f32, {rows, cols}, rank);
    Tensor ag_in = PutInput(id("e.ag"), f32, {rank == 0 ? rows + 1 : rows, cols}, rank);
    os::TensorMeta transposed = os::ContiguousMeta(os::DType::kFloat32, {cols, rows});
    transposed.strides = {1, cols};
    PutRaw(id("e.t"), transposed);
    Tensor noncontig = Take(objects_.GetTensor(id("e.t"), absl::Seconds(30)), "GetTensor e.t");
    // A tensor in another byte order is refused when read (drover tensors are in host
    // order), so no collective ever sees one.
    os::TensorMeta big = os::ContiguousMeta(os::DType::kFloat32, {rows, cols});
    big.byte_order = os::HostByteOrder() == os::ByteOrder::kLittle ? os::ByteOrder::kBig
                                                                  : os::ByteOrder::kLittle;
    PutRaw(id("e.be"), big);
    ExpectError(objects_.GetTensor(id("e.be"), absl::Seconds(30)).status(),
                absl::StatusCode::kFailedPrecondition, {"byte order"},
                "GetTensor of a byte-swapped tensor");
    Tensor odd = PutInput(id("e.odd"), f32, {rows + 1, cols}, rank);
    Check(objects_.Put(id("e.taken"), std::string("x")), "Put e.taken");
    // Stats between barriers: no rank of this node is inside an operation meanwhile.
    Check(g_.Barrier(), "Barrier");
    auto before = Take(store_.Stats(), "Stats");
    Check(g_.Barrier(), "Barrier");

    // AllGather with rank 0's dim 0 different: every rank fails, naming both shapes.
    ExpectError(AllGatherTensor(g_, objects_, ag_in, id("e.ag.out")).status(),
                absl::StatusCode::kInvalidArgument,
                {absl::StrCat("rank 0 has float32[", rows + 1, ", 3]"),
                 absl::StrCat("has float32[", rows, ", 3]"), "same dtype and shape"},
                "AllGatherTensor of different shapes");
    ExpectAbsent(id("e.ag.out"));

    // Non-contiguous on every rank.
    ExpectError(AllReduceTensor(g_, objects_, noncontig, id("e.t.out"), ReduceOp::kSum).status(),
                absl::StatusCode::kInvalidArgument, {"is not contiguous"},
                "AllReduceTensor of a transposed tensor");
    ExpectAbsent(id("e.t.out"));

    // Non-contiguous on the last rank only: the others fail too, naming it.
    const bool culprit = rank == n - 1;
    ExpectError(AllReduceTensor(g_, objects_, culprit ? noncontig : good, id("e.t1.out"),
                                ReduceOp::kSum)
                    .status(),
                absl::StatusCode::kInvalidArgument,
                {culprit ? "is not contiguous" : absl::StrCat("rank ", n - 1, " failed: ")},
                "AllReduceTensor with one transposed input");
    ExpectAbsent(id("e.t1.out"));

    // ReduceScatter with dim 0 not divisible by the group size.
    if (n > 1) {
      ExpectError(ReduceScatterTensor(g_, objects_, odd, id("e.odd.out"), ReduceOp::kSum).status(),
                  absl::StatusCode::kInvalidArgument, {"not divisible by the group size"},
                  "ReduceScatterTensor of an odd dim 0");
      ExpectAbsent(id("e.odd.out"));
    }

    // Ranks disagreeing on the op.
    ExpectError(AllReduceTensor(g_, objects_, good, id("e.op.out"),
                                rank == 0 ? ReduceOp::kSum : ReduceOp::kMax)
                    .status(),
                absl::StatusCode::kInvalidArgument, {"every rank must pass the same op"},
                "AllReduceTensor with different ops");
    ExpectAbsent(id("e.op.out"));

    // Every rank uses the same output id: ranks on one node share the store.
    ExpectError(AllReduceTensor(g_, objects_, good, "e.shared.out", ReduceOp::kSum).status(),
                absl::StatusCode::kAlreadyExists,
                {"'e.shared.out' already exists in this node's store", "own output id"},
                "AllReduceTensor into one id per node");
    ExpectAbsent("e.shared.out");

    // Broadcast: a root outside the group, and the root's output id taken.
    ExpectError(BroadcastTensor(g_, objects_, &good, id("e.bc.out"), n).status(),
                absl::StatusCode::kInvalidArgument, {"is not a rank of the group"},
                "BroadcastTensor with a bad root");
    ExpectAbsent(id("e.bc.out"));
    ExpectError(BroadcastTensor(g_, objects_, rank == 0 ? &good : nullptr,
                                rank == 1 ? id("e.taken") : id("e.bc2.out"), 0)
                    .status(),
                absl::StatusCode::kAlreadyExists, {"already exists"},
                "BroadcastTensor into a taken id on rank 1");
    ExpectAbsent(id("e.bc2.out"));

    if (n % 2 == 0) {
      const int peer = rank ^ 1;
      // The sender's input is transposed: both sides fail, nothing is received.
      if (rank % 2 == 0) {
        ExpectError(SendTensor(g_, noncontig, peer), absl::StatusCode::kInvalidArgument,
                    {"is not contiguous"}, "SendTensor of a transposed tensor");
      } else {
        ExpectError(RecvTensor(g_, objects_, id("e.p2p.out"), peer).status(),
                    absl::StatusCode::kInvalidArgument,
                    {absl::StrCat("the sender, rank ", peer, ", failed"), "is not contiguous"},
                    "RecvTensor from a failed sender");
        ExpectAbsent(id("e.p2p.out"));
      }
      // The receiver's output id is taken: both sides fail.
      if (rank % 2 == 0) {
        ExpectError(SendTensor(g_, good, peer), absl::StatusCode::kAlreadyExists,
                    {absl::StrCat("the receiver, rank ", peer, ", failed")},
                    "SendTensor to a failed receiver");
      } else {
        ExpectError(RecvTensor(g_, objects_, id("e.taken"), peer).status(),
                    absl::StatusCode::kAlreadyExists, {"already exists"},
                    "RecvTensor into a taken id");
      }
    }

    Check(g_.Barrier(), "Barrier");
    auto after = Take(store_.Stats(), "Stats");
    Check(g_.Barrier(), "Barrier");
    if (after.objects != before.objects || after.used != before.used) {
      auto show = [](const os::StoreStats& s) {
        return absl::StrCat("objects ", s.objects, " sealed ", s.sealed, " referenced ",
                            s.referenced, " used ", s.used, " largest_free ", s.largest_free,
                            " evictions ", s.evictions, " spills ", s.spills, " clients ",
                            s.clients, " pending_gets ", s.pending_gets);
      };
      Die(absl::StrCat("failed operations changed the store: before: ", show(before),
                       "; after: ", show(after)));
    }

    // The group is still usable.
    Tensor out = Take(AllReduceTensor(g_, objects_, good, id("e.after"), ReduceOp::kSum),
                      "AllReduceTensor after the errors");
    Expect(out, f32, {rows, cols}, [&](int64_t i) { return Reduce(ReduceOp::kSum, f32, i); },
           "AllReduceTensor after the errors");
    Report(absl::StrCat("ok errors: byte order refused at read, mismatched shapes, transposed "
                        "(all ranks, one rank), indivisible dim 0, different ops, shared output "
                        "id, bad root, taken id",
                        n % 2 == 0 ? ", send/recv failures on either side" : "",
                        "; store unchanged (", after.objects, " objects); group usable after"));
  }

 private:
  CollectiveGroup& g_;
  Objects& objects_;
  os::Client& store_;  // this node's store, for checks the public API does not offer
};

int Main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (absl::StartsWith(a, "--out=")) {
      g_out_dir = a.substr(6);
    } else {
      Die("unknown argument " + a);
    }
  }
  const char* r = std::getenv("RANK");
  g_rank = r ? std::atoi(r) : -1;
  absl::Time start = absl::Now();
  auto objects = Take(Objects::FromEnvironment(), "Objects::FromEnvironment");
  auto group = Take(CollectiveGroup::FromEnvironment("tensors"), "CollectiveGroup");

  // Which ranks share this rank's node.
  const char* node = std::getenv("DROVER_NODE_ID");
  uint64_t mine = std::hash<std::string>()(node ? node : "");  // stable across processes
  std::vector<uint64_t> node_of(group->size());
  Check(group->AllGather(&mine, node_of.data(), 1, DType::kInt64), "AllGather");

  Worker w(*group, *objects);
  for (DType t : {DType::kFloat16, DType::kFloat32, DType::kFloat64, DType::kInt32,
                  DType::kInt64, DType::kUInt8}) {
    w.CheckDType(t);
  }
  w.CheckLarge();
  w.CheckOtherDTypes();
  w.CheckReadByOthers(node_of);
  w.CheckErrors();
  Check(group->Barrier(), "final Barrier");
  Report(absl::StrCat("all checks passed in ", absl::FormatDuration(absl::Now() - start)));
  WriteReport();
  return 0;
}

}  // namespace
}  // namespace drover

int main(int argc, char** argv) { return drover::Main(argc, argv); }
