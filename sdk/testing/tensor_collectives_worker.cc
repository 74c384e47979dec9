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
#include "collective/group.h"
#include "drover/objects.h"
#include "drover/tensor_collectives.h"
#include "object_store/tensor.h"

namespace drover {
namespace {

namespace os = object_store;
using collective::ReduceOp;

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

void SetElement(os::DType t, uint8_t* base, int64_t i, double v) {
  switch (t) {
    case os::DType::kFloat16: {
      uint16_t h = HalfFromSmallInt(static_cast<int>(v));
      std::memcpy(base + 2 * i, &h, 2);
      break;
    }
    case os::DType::kFloat32: reinterpret_cast<float*>(base)[i] = static_cast<float>(v); break;
    case os::DType::kFloat64: reinterpret_cast<double*>(base)[i] = v; break;
    case os::DType::kInt32: reinterpret_cast<int32_t*>(base)[i] = static_cast<int32_t>(v); break;
    case os::DType::kInt64: reinterpret_cast<int64_t*>(base)[i] = static_cast<int64_t>(v); break;
    case os::DType::kUInt8: base[i] = static_cast<uint8_t>(v); break;
    default: std::memset(base + i * os::DTypeSize(t), static_cast<int>(v), os::DTypeSize(t));
  }
}

double GetElement(os::DType t, const uint8_t* base, int64_t i) {
  switch (t) {
    case os::DType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, base + 2 * i, 2);
      return HalfToDouble(h);
    }
    case os::DType::kFloat32: return reinterpret_cast<const float*>(base)[i];
    case os::DType::kFloat64: return reinterpret_cast<const double*>(base)[i];
    case os::DType::kInt32: return reinterpret_cast<const int32_t*>(base)[i];
    case os::DType::kInt64: return static_cast<double>(reinterpret_cast<const int64_t*>(base)[i]);
    case os::DType::kUInt8: return base[i];
    default: return base[i * os::DTypeSize(t)];
  }
}

bool IsFloat(os::DType t) {
  return t == os::DType::kFloat16 || t == os::DType::kFloat32 || t == os::DType::kFloat64;
}

class Worker {
 public:
  Worker(collective::Group& group, Objects& objects) : g_(group), objects_(objects) {}

  // Puts a tensor of `meta` whose element i is value(i) and returns it read back.
  template <typename F>
  TensorRef Put(const std::string& id, const os::TensorMeta& meta, F value) {
    std::vector<uint8_t> bytes(meta.data_size);
    const int64_t slots = meta.data_size / os::DTypeSize(meta.dtype);
    for (int64_t i = 0; i < slots; ++i) SetElement(meta.dtype, bytes.data(), i, value(i));
    Check(objects_.PutTensor(id, meta, bytes), "PutTensor " + id);
    return Take(objects_.GetTensor(id, absl::Seconds(30)), "GetTensor " + id);
  }
  TensorRef PutInput(const std::string& id, os::DType t, std::vector<int64_t> shape, int rank) {
    return Put(id, os::ContiguousMeta(t, std::move(shape)),
               [&](int64_t i) { return Input(rank, i); });
  }

  // Checks the result's header (contiguous, offset 0, host order, `shape`) and that
  // element i equals want(i).
  template <typename F>
  void Expect(const TensorRef& out, os::DType t, const std::vector<int64_t>& shape, F want,
              const std::string& what) {
    os::TensorMeta m = os::ContiguousMeta(t, shape);
    if (out.meta != m) Die(absl::StrCat(what, ": header differs: shape [",
                                        absl::StrJoin(out.meta.shape, ","), "] dtype ",
                                        os::DTypeName(out.meta.dtype)));
    // The result is the object in this node's shared arena, read in place.
    const uint8_t* base = objects_.store().arena_base();
    if (out.ref.data().data() < base ||
        out.ref.data().data() + out.ref.data().size() > base + objects_.store().arena_capacity()) {
      Die(what + ": the result is not in this node's arena");
    }
    // The header stored with the object says the same.
    auto stored = Take(os::DecodeTensorHeader(out.ref.metadata_view(), out.ref.data().size()),
                       what + ": stored header");
    if (stored != m) Die(what + ": the stored header differs from the returned one");
    const int64_t n = os::NumElements(m);
    for (int64_t i = 0; i < n; ++i) {
      double got = GetElement(t, out.ref.data().data(), i), w = want(i);
      double tol = IsFloat(t) ? 1e-3 * std::max(1.0, std::fabs(w)) : 0;
      if (std::fabs(got - w) > tol) {
        Die(absl::StrCat(what, ": element ", i, " is ", got, ", want ", w));
      }
    }
  }

  double Reduce(ReduceOp op, os::DType t, int64_t i, int ranks_offset_rows = 0) {
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

  void CheckDType(os::DType t) {
    const int rank = g_.rank(), n = g_.size();
    const std::string dt = os::DTypeName(t);
    const int64_t rows = 2 * n, cols = 3;
    const std::vector<int64_t> shape = {rows, cols};
    TensorRef in = PutInput(absl::StrCat("in.", dt, ".r", rank), t, shape, rank);

    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
      std::string what = absl::StrCat("AllReduceTensor ", collective::ReduceOpName(op), " ", dt);
      TensorRef out = Take(AllReduceTensor(g_, objects_, in,
                                           absl::StrCat("ar.", collective::ReduceOpName(op), ".",
                                                        dt, ".r", rank),
                                           op),
                           what);
      Expect(out, t, shape, [&](int64_t i) { return Reduce(op, t, i); }, what);
    }

    {
      std::string what = "AllGatherTensor " + dt;
      TensorRef out =
          Take(AllGatherTensor(g_, objects_, in, absl::StrCat("ag.", dt, ".r", rank)), what);
      const int64_t per = rows * cols;
      Expect(out, t, {n * rows, cols}, [&](int64_t i) { return Input(i / per, i % per); },
             what);
    }

    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      std::string what =
          absl::StrCat("ReduceScatterTensor ", collective::ReduceOpName(op), " ", dt);
      TensorRef out = Take(ReduceScatterTensor(g_, objects_, in,
                                               absl::StrCat("rs.", collective::ReduceOpName(op),
                                                            ".", dt, ".r", rank),
                                               op),
                           what);
      const int64_t slice = rows / n * cols;
      Expect(out, t, {rows / n, cols},
             [&](int64_t i) { return Reduce(op, t, i, static_cast<int>(rank * slice)); }, what);
    }

    {
      const int root = n - 1;
      std::string what = "BroadcastTensor " + dt;
      TensorRef out = Take(BroadcastTensor(g_, objects_, rank == root ? &in : nullptr,
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
          TensorRef out = Take(RecvTensor(g_, objects_,
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
    const os::DType t = os::DType::kFloat32;
    const std::vector<int64_t> shape = {32 * n, 8192};  // n MiB
    TensorRef in = PutInput(absl::StrCat("in.large.r", rank), t, shape, rank);
    absl::Time t0 = absl::Now();
    TensorRef sum = Take(AllReduceTensor(g_, objects_, in, absl::StrCat("ar.large.r", rank),
                                         ReduceOp::kSum),
                         "AllReduceTensor large");
    absl::Duration took = absl::Now() - t0;
    Expect(sum, t, shape, [&](int64_t i) { return Reduce(ReduceOp::kSum, t, i); },
           "AllReduceTensor large");
    TensorRef all = Take(AllGatherTensor(g_, objects_, in, absl::StrCat("ag.large.r", rank)),
                         "AllGatherTensor large");
    const int64_t per = shape[0] * shape[1];
    Expect(all, t, {n * shape[0], shape[1]}, [&](int64_t i) { return Input(i / per, i % per); },
           "AllGatherTensor large");
    TensorRef bc = Take(BroadcastTensor(g_, objects_, rank == 0 ? &in : nullptr,
                                        absl::StrCat("bc.large.r", rank), 0),
                        "BroadcastTensor large");
    Expect(bc, t, shape, [&](int64_t i) { return Input(0, i); }, "BroadcastTensor large");
    Report(absl::StrCat("ok ", n, " MiB float32: allreduce (", absl::FormatDuration(took),
                        "), allgather, broadcast"));
  }

  // Byte-moving operations take every dtype; reductions refuse the others.
  void CheckOtherDTypes() {
    const int rank = g_.rank(), n = g_.size();
    for (os::DType t : {os::DType::kBFloat16, os::DType::kBool, os::DType::kInt16}) {
      const std::string dt = os::DTypeName(t);
      TensorRef in = PutInput(absl::StrCat("in.", dt, ".r", rank), t, {3, 2}, rank);
      TensorRef out = Take(AllGatherTensor(g_, objects_, in, absl::StrCat("ag.", dt, ".r", rank)),
                           "AllGatherTensor " + dt);
      if (out.meta.shape != std::vector<int64_t>{3 * n, 2} || out.meta.dtype != t) {
        Die("AllGatherTensor " + dt + ": wrong header");
      }
      const size_t per = in.ref.data().size();
      for (int r = 0; r < n; ++r) {
        for (size_t b = 0; b < per; ++b) {
          uint8_t want = static_cast<uint8_t>(Input(r, b / os::DTypeSize(t)));
          if (out.ref.data()[r * per + b] != want) Die("AllGatherTensor " + dt + ": wrong byte");
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
    TensorRef empty = PutInput(absl::StrCat("in.empty.r", rank), os::DType::kFloat32, {0, 4}, rank);
    TensorRef out = Take(AllReduceTensor(g_, objects_, empty, absl::StrCat("ar.empty.r", rank),
                                         ReduceOp::kSum),
                         "AllReduceTensor of an empty tensor");
    Expect(out, os::DType::kFloat32, {0, 4}, [](int64_t) { return 0.0; }, "empty");
    Report("ok bfloat16/bool/int16 allgather; reductions refuse them; empty tensor");
  }

  // Other ranks' results, by id: on this node in place (already here, no pull); on the
  // other node pulled through the agent. All ranks' allreduce results are equal.
  void CheckReadByOthers(const std::vector<uint64_t>& node_of) {
    const int rank = g_.rank(), n = g_.size();
    Check(g_.Barrier(), "Barrier");  // every rank has sealed its results
    const std::string mine_id = absl::StrCat("ar.sum.float32.r", rank);
    TensorRef mine = Take(objects_.GetTensor(mine_id, absl::Seconds(5)), "own result");
    int local = 0, remote = 0;
    for (int r = 0; r < n; ++r) {
      if (r == rank) continue;
      const std::string id = absl::StrCat("ar.sum.float32.r", r);
      const bool same_node = node_of[r] == node_of[rank];
      bool here = Take(objects_.store().Contains(id), "Contains " + id);
      if (same_node && !here) Die("rank " + std::to_string(r) + "'s result " + id +
                                  " is not in this node's store");
      TensorRef other = Take(objects_.GetTensor(id, absl::Seconds(30)), "GetTensor " + id);
      if (other.meta != mine.meta || other.ref.data().size() != mine.ref.data().size() ||
          std::memcmp(other.ref.data().data(), mine.ref.data().data(),
                      mine.ref.data().size()) != 0) {
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
    if (Take(objects_.store().Contains(id), "Contains " + id)) {
      Die("a failed operation left object " + id + " behind");
    }
  }

  void CheckErrors() {
    const int rank = g_.rank(), n = g_.size();
    const int64_t rows = 2 * n, cols = 3;
    const os::DType f32 = os::DType::kFloat32;
    auto id = [&](const std::string& p) { return absl::StrCat(p, ".r", rank); };
    // Inputs first; then nothing but failing operations until the second Stats.
    TensorRef good = PutInput(id("e.good"), f32, {rows, cols}, rank);
    TensorRef ag_in =
        PutInput(id("e.ag"), f32, {rank == 0 ? rows + 1 : rows, cols}, rank);
    os::TensorMeta transposed = os::ContiguousMeta(f32, {cols, rows});
    transposed.strides = {1, cols};
    TensorRef noncontig = Put(id("e.t"), transposed, [&](int64_t i) { return Input(rank, i); });
    os::TensorMeta big = os::ContiguousMeta(f32, {rows, cols});
    big.byte_order = os::HostByteOrder() == os::ByteOrder::kLittle ? os::ByteOrder::kBig
                                                                  : os::ByteOrder::kLittle;
    TensorRef swapped = Put(id("e.be"), big, [&](int64_t i) { return Input(rank, i); });
    TensorRef odd = PutInput(id("e.odd"), f32, {rows + 1, cols}, rank);
    Check(objects_.Put(id("e.taken"), std::string("x")), "Put e.taken");
    // Stats between barriers: no rank of this node is inside an operation meanwhile.
    Check(g_.Barrier(), "Barrier");
    auto before = Take(objects_.store().Stats(), "Stats");
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

    // Foreign byte order.
    ExpectError(AllReduceTensor(g_, objects_, swapped, id("e.be.out"), ReduceOp::kMax).status(),
                absl::StatusCode::kInvalidArgument, {"host byte order"},
                "AllReduceTensor of a byte-swapped tensor");
    ExpectAbsent(id("e.be.out"));

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
    auto after = Take(objects_.store().Stats(), "Stats");
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
    TensorRef out = Take(AllReduceTensor(g_, objects_, good, id("e.after"), ReduceOp::kSum),
                         "AllReduceTensor after the errors");
    Expect(out, f32, {rows, cols}, [&](int64_t i) { return Reduce(ReduceOp::kSum, f32, i); },
           "AllReduceTensor after the errors");
    Report(absl::StrCat("ok errors: mismatched shapes, transposed (all ranks, one rank), byte "
                        "order, indivisible dim 0, different ops, shared output id, bad root, "
                        "taken id", n % 2 == 0 ? ", send/recv failures on either side" : "",
                        "; store unchanged (", after.objects, " objects); group usable after"));
  }

 private:
  collective::Group& g_;
  Objects& objects_;
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
  auto options = Take(collective::GroupOptionsFromEnvironment("tensors"), "group options");
  auto group = Take(collective::NewGroup(options), "NewGroup");

  // Which ranks share this rank's node.
  const char* node = std::getenv("DROVER_NODE_ID");
  uint64_t mine = std::hash<std::string>()(node ? node : "");  // stable across processes
  std::vector<uint64_t> node_of(group->size());
  Check(group->AllGather(&mine, node_of.data(), 1, collective::DataType::kInt64), "AllGather");

  Worker w(*group, *objects);
  for (os::DType t : {os::DType::kFloat16, os::DType::kFloat32, os::DType::kFloat64,
                      os::DType::kInt32, os::DType::kInt64, os::DType::kUInt8}) {
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
