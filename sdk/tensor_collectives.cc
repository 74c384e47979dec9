#include "drover/tensor_collectives.h"

#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/status_code.h"
#include "common/status_macros.h"
#include "object_store/client.h"
#include "object_store/tensor.h"
#include "sdk/internal/objects_internal.h"
#include "sdk/internal/tensor_internal.h"

namespace drover {
namespace {

namespace os = object_store;
using internal::TensorAccess;
using Group = CollectiveGroup;

// Which function a rank is in (so ranks calling different functions notice).
enum class Fn : uint8_t { kAllReduce = 1, kBroadcast, kAllGather, kReduceScatter, kSend, kRecv };

const char* FnName(Fn fn) {
  switch (fn) {
    case Fn::kAllReduce: return "AllReduceTensor";
    case Fn::kBroadcast: return "BroadcastTensor";
    case Fn::kAllGather: return "AllGatherTensor";
    case Fn::kReduceScatter: return "ReduceScatterTensor";
    case Fn::kSend: return "SendTensor";
    case Fn::kRecv: return "RecvTensor";
  }
  return "?";
}

// What each rank tells the others before any data moves (see "Agreement" in the
// header). Plain bytes: every rank runs this same code.
struct Record {
  int32_t code = 0;  // StatusCodeToWire of this rank's own failure; kOk: fine
  int32_t root = -1;
  uint8_t fn = 0;
  uint8_t reduce = 0xff;  // ReduceOp, 0xff: none
  uint16_t meta_size = 0;
  uint32_t reserved = 0;
  char meta[os::TensorHeaderSize(os::kMaxTensorDims)] = {};  // canonical input header
  char message[1024 - 16 - os::TensorHeaderSize(os::kMaxTensorDims)] = {};  // truncated
};
static_assert(sizeof(Record) == 1024, "Record is exchanged as 1024 raw bytes");

// "float32[2, 5]"
std::string Describe(const os::TensorMeta& m) {
  return absl::StrCat(os::DTypeName(m.dtype), "[", absl::StrJoin(m.shape, ", "), "]");
}

absl::Status Annotate(Fn fn, const absl::Status& s) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(FnName(fn), ": ", s.message()));
}

absl::Status Invalid(Fn fn, const std::string& msg) {
  return absl::InvalidArgumentError(absl::StrCat(FnName(fn), ": ", msg));
}

// A checked input: its elements (contiguous) and their byte count.
struct Input {
  const uint8_t* data = nullptr;
  uint64_t bytes = 0;
  int64_t numel = 0;
};

absl::Status CheckInput(Fn fn, const Tensor& in, Input* out) {
  if (!in.is_contiguous()) {
    return Invalid(fn, absl::StrCat(
                           in.in_store() ? absl::StrCat("input tensor '", in.object_id(), "'")
                                         : std::string("the input tensor"),
                           " (", in.Describe(), ", strides [", absl::StrJoin(in.strides(), ", "),
                           "]) is not contiguous; collectives need a row-major tensor "
                           "(Tensor::Clone makes one)"));
  }
  out->numel = in.numel();
  out->bytes = in.nbytes();
  out->data = static_cast<const uint8_t*>(in.raw_data());
  return absl::OkStatus();
}

absl::Status NeedDim0(Fn fn, const Tensor& in) {
  if (in.ndim() == 0) {
    return Invalid(fn, absl::StrCat("the input is a scalar (", in.Describe(),
                                    "); it needs a dimension 0"));
  }
  return absl::OkStatus();
}

// The result's header: contiguous, offset 0, host order.
os::TensorMeta ResultMeta(DType dtype, std::vector<int64_t> shape) {
  return os::ContiguousMeta(internal::ToStoreDType(dtype), std::move(shape));
}

// The result object while it is written: aborted unless sealed.
class Output {
 public:
  explicit Output(os::Client& store) : store_(store) {}
  ~Output() {
    if (open_) store_.Abort(id_).IgnoreError();
  }
  Output(const Output&) = delete;
  Output& operator=(const Output&) = delete;

  absl::Status Create(Fn fn, const std::string& id, const os::TensorMeta& meta) {
    absl::StatusOr<std::string> header = os::EncodeTensorHeader(meta);
    if (!header.ok()) return Annotate(fn, header.status());
    absl::StatusOr<os::MutableObject> o = store_.Create(id, meta.data_size, *header);
    if (!o.ok()) {
      if (o.status().code() == absl::StatusCode::kAlreadyExists) {
        return absl::AlreadyExistsError(absl::StrCat(
            FnName(fn), ": the output object '", id,
            "' already exists in this node's store (ranks on one node share the store: "
            "give each rank its own output id, e.g. with the rank in it)"));
      }
      return absl::Status(o.status().code(),
                          absl::StrCat(FnName(fn), ": creating the output object '", id,
                                       "' (", meta.data_size, " bytes): ", o.status().message()));
    }
    id_ = id;
    meta_ = meta;
    data_ = o->data.data();
    open_ = true;
    return absl::OkStatus();
  }

  uint8_t* data() const { return data_; }

  absl::StatusOr<Tensor> Seal(Fn fn) {
    absl::Status s = store_.Seal(id_);
    if (!s.ok()) return Annotate(fn, s);  // stays open: the destructor aborts it
    open_ = false;
    absl::StatusOr<os::ObjectRef> ref = store_.Get(id_, absl::Seconds(10));
    if (!ref.ok()) {
      return absl::Status(ref.status().code(),
                          absl::StrCat(FnName(fn), ": reading back the sealed output '", id_,
                                       "': ", ref.status().message()));
    }
    return TensorAccess::Make(meta_, TensorAccess::FromObject(std::move(*ref)));
  }

 private:
  os::Client& store_;
  std::string id_;
  os::TensorMeta meta_;
  uint8_t* data_ = nullptr;
  bool open_ = false;
};

Record MakeRecord(Fn fn, int reduce, int root, const absl::Status& local) {
  Record r;
  r.fn = static_cast<uint8_t>(fn);
  r.reduce = static_cast<uint8_t>(reduce);
  r.root = root;
  r.code = StatusCodeToWire(local.code());
  if (!local.ok()) {
    const size_t n = std::min(local.message().size(), sizeof(r.message) - 1);
    std::memcpy(r.message, local.message().data(), n);
  }
  return r;
}

// Stores the canonical header of `in` (contiguous, offset 0) in the record.
void SetMeta(Record* r, const Tensor& in) {
  absl::StatusOr<std::string> h = os::EncodeTensorHeader(ResultMeta(in.dtype(), in.shape()));
  if (!h.ok() || h->size() > sizeof(r->meta)) return;  // cannot happen for a valid tensor
  std::memcpy(r->meta, h->data(), h->size());
  r->meta_size = static_cast<uint16_t>(h->size());
}

std::string MetaText(const Record& r) {
  absl::StatusOr<os::TensorMeta> m =
      os::DecodeTensorHeader(absl::string_view(r.meta, r.meta_size));
  return m.ok() ? Describe(*m) : "(no tensor)";
}

// The failure a peer reported in `rec` (OK if none), as "<fn>: <who> failed: <message>".
absl::Status PeerFailure(Fn fn, const Record& rec, const std::string& who) {
  const absl::StatusCode code = StatusCodeFromWire(rec.code);
  if (code == absl::StatusCode::kOk) return absl::OkStatus();
  return absl::Status(code, absl::StrCat(FnName(fn), ": ", who, " failed: ",
                                         std::string(rec.message,
                                                     strnlen(rec.message, sizeof(rec.message)))));
}

// The first failure among `all` (in rank order) as this rank's error, or OK.
absl::Status FirstFailure(Fn fn, const std::vector<Record>& all) {
  for (size_t r = 0; r < all.size(); ++r) {
    DROVER_RETURN_IF_ERROR(PeerFailure(fn, all[r], absl::StrCat("rank ", r)));
  }
  return absl::OkStatus();
}

// Exchanges every rank's record (one AllGather). Returns this rank's own failure, else
// the first other rank's failure, else INVALID_ARGUMENT if the ranks called different
// functions, ops or roots, or (same_meta) passed different dtypes or shapes.
absl::Status Agree(Group& group, Fn fn, const Record& mine, const absl::Status& local,
                   bool same_meta, std::vector<Record>* all) {
  all->assign(group.size(), Record());
  absl::Status s = group.AllGather(&mine, all->data(), sizeof(Record), DType::kUInt8);
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat(FnName(fn), ": exchanging arguments with the "
                                               "other ranks: ", s.message()));
  }
  if (!local.ok()) return local;
  if (absl::Status f = FirstFailure(fn, *all); !f.ok()) return f;
  const Record& first = (*all)[0];
  for (size_t r = 1; r < all->size(); ++r) {
    const Record& other = (*all)[r];
    if (other.fn != first.fn) {
      return Invalid(fn, absl::StrCat("rank 0 called ", FnName(static_cast<Fn>(first.fn)),
                                      " and rank ", r, " ", FnName(static_cast<Fn>(other.fn)),
                                      "; every rank must make the same calls"));
    }
    if (other.reduce != first.reduce) {
      return Invalid(fn, absl::StrCat(
                             "rank 0 passes op ",
                             ReduceOpName(static_cast<ReduceOp>(first.reduce)),
                             " and rank ", r, " op ",
                             ReduceOpName(static_cast<ReduceOp>(other.reduce)),
                             "; every rank must pass the same op"));
    }
    if (other.root != first.root) {
      return Invalid(fn, absl::StrCat("rank 0 passes root ", first.root, " and rank ", r,
                                      " root ", other.root,
                                      "; every rank must pass the same root"));
    }
    if (same_meta && (other.meta_size != first.meta_size ||
                      std::memcmp(other.meta, first.meta, first.meta_size) != 0)) {
      return Invalid(fn, absl::StrCat("rank 0 has ", MetaText(first), " and rank ", r, " has ",
                                      MetaText(other),
                                      "; every rank's input must have the same dtype and "
                                      "shape"));
    }
  }
  return absl::OkStatus();
}

// A Group failure while data moves: the group is broken; the Output aborts the result.
absl::Status GroupFailed(Fn fn, const absl::Status& s) { return Annotate(fn, s); }

// The common shape of AllReduce, AllGather and ReduceScatter: check the input, create
// the output of `out_meta(in)`, agree, then `run` moves the data.
template <typename MakeMeta, typename Run>
absl::StatusOr<Tensor> Collective(Group& group, Objects& objects, Fn fn, int reduce,
                                  bool reduction, const Tensor& in, const std::string& out_id,
                                  MakeMeta make_meta, Run run) {
  Output out(internal::ObjectsAccess::Store(objects));
  Input x;
  bool input_ok = false;
  absl::Status local = [&]() -> absl::Status {
    DROVER_RETURN_IF_ERROR(CheckInput(fn, in, &x));
    if (reduction) {
      absl::Status d = CheckReduceDType(in.dtype());
      if (!d.ok()) return Annotate(fn, d);
    }
    input_ok = true;
    DROVER_ASSIGN_OR_RETURN(os::TensorMeta meta, make_meta(in, x));
    return out.Create(fn, out_id, meta);
  }();
  Record mine = MakeRecord(fn, reduce, -1, local);
  if (input_ok) SetMeta(&mine, in);
  std::vector<Record> all;
  DROVER_RETURN_IF_ERROR(Agree(group, fn, mine, local, /*same_meta=*/true, &all));
  if (x.numel > 0) {
    absl::Status s = run(x, out.data());
    if (!s.ok()) return GroupFailed(fn, s);
  }
  return out.Seal(fn);
}

}  // namespace

absl::StatusOr<Tensor> AllReduceTensor(Group& group, Objects& objects, const Tensor& in,
                                       const std::string& out_id, ReduceOp op) {
  return Collective(
      group, objects, Fn::kAllReduce, static_cast<int>(op), /*reduction=*/true, in, out_id,
      [](const Tensor& t, const Input&) -> absl::StatusOr<os::TensorMeta> {
        return ResultMeta(t.dtype(), t.shape());
      },
      [&](const Input& x, uint8_t* out) {
        // The one copy: input -> result object; then reduce in place there.
        std::memcpy(out, x.data, x.bytes);
        return group.AllReduce(out, static_cast<size_t>(x.numel), in.dtype(), op);
      });
}

absl::StatusOr<Tensor> AllGatherTensor(Group& group, Objects& objects, const Tensor& in,
                                       const std::string& out_id) {
  const int n = group.size();
  return Collective(
      group, objects, Fn::kAllGather, 0xff, /*reduction=*/false, in, out_id,
      [&](const Tensor& t, const Input& x) -> absl::StatusOr<os::TensorMeta> {
        DROVER_RETURN_IF_ERROR(NeedDim0(Fn::kAllGather, t));
        if (x.bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / n) {
          return Invalid(Fn::kAllGather, absl::StrCat(t.Describe(), " times ", n,
                                                      " ranks is too large"));
        }
        std::vector<int64_t> shape = t.shape();
        shape[0] *= n;
        return ResultMeta(t.dtype(), std::move(shape));
      },
      [&](const Input& x, uint8_t* out) {
        return group.AllGather(x.data, out, x.bytes, DType::kUInt8);
      });
}

absl::StatusOr<Tensor> ReduceScatterTensor(Group& group, Objects& objects, const Tensor& in,
                                           const std::string& out_id, ReduceOp op) {
  const int n = group.size();
  return Collective(
      group, objects, Fn::kReduceScatter, static_cast<int>(op), /*reduction=*/true, in, out_id,
      [&](const Tensor& t, const Input&) -> absl::StatusOr<os::TensorMeta> {
        DROVER_RETURN_IF_ERROR(NeedDim0(Fn::kReduceScatter, t));
        if (t.shape()[0] % n != 0) {
          return Invalid(Fn::kReduceScatter,
                         absl::StrCat("dimension 0 of the input (", t.Describe(),
                                      ") is not divisible by the group size ", n));
        }
        std::vector<int64_t> shape = t.shape();
        shape[0] /= n;
        return ResultMeta(t.dtype(), std::move(shape));
      },
      [&](const Input& x, uint8_t* out) {
        return group.ReduceScatter(x.data, out, static_cast<size_t>(x.numel / n), in.dtype(),
                                   op);
      });
}

absl::StatusOr<Tensor> BroadcastTensor(Group& group, Objects& objects, const Tensor* in,
                                       const std::string& out_id, int root) {
  const Fn fn = Fn::kBroadcast;
  Output out(internal::ObjectsAccess::Store(objects));
  Input x;
  const bool is_root = root == group.rank();
  bool input_ok = false;
  // Round 1: the root checks its input and creates its output; everyone learns the
  // root's header.
  absl::Status local = [&]() -> absl::Status {
    if (root < 0 || root >= group.size()) {
      return Invalid(fn, absl::StrCat("root ", root, " is not a rank of the group (size ",
                                      group.size(), ")"));
    }
    if (!is_root) return absl::OkStatus();
    if (in == nullptr) return Invalid(fn, "the root must pass its tensor (in is null)");
    DROVER_RETURN_IF_ERROR(CheckInput(fn, *in, &x));
    input_ok = true;
    return out.Create(fn, out_id, ResultMeta(in->dtype(), in->shape()));
  }();
  Record mine = MakeRecord(fn, 0xff, root, local);
  if (input_ok) SetMeta(&mine, *in);
  std::vector<Record> all;
  DROVER_RETURN_IF_ERROR(Agree(group, fn, mine, local, /*same_meta=*/false, &all));
  // Round 2: the other ranks create their outputs from the root's header.
  os::TensorMeta meta;
  absl::Status created = [&]() -> absl::Status {
    absl::StatusOr<os::TensorMeta> m = os::DecodeTensorHeader(
        absl::string_view(all[root].meta, all[root].meta_size));
    if (!m.ok()) {
      return Annotate(fn, absl::Status(m.status().code(),
                                       absl::StrCat("the root's header: ", m.status().message())));
    }
    meta = *m;
    return is_root ? absl::OkStatus() : out.Create(fn, out_id, meta);
  }();
  DROVER_RETURN_IF_ERROR(Agree(group, fn, MakeRecord(fn, 0xff, root, created), created,
                               /*same_meta=*/false, &all));
  const uint64_t bytes = meta.data_size;
  if (bytes > 0) {
    if (is_root) std::memcpy(out.data(), x.data, bytes);
    absl::Status s = group.Broadcast(out.data(), bytes, DType::kUInt8, root);
    if (!s.ok()) return GroupFailed(fn, s);
  }
  return out.Seal(fn);
}

absl::Status SendTensor(Group& group, const Tensor& in, int peer, uint32_t tag) {
  const Fn fn = Fn::kSend;
  Input x;
  absl::Status local = CheckInput(fn, in, &x);
  Record mine = MakeRecord(fn, 0xff, -1, local);
  if (local.ok()) SetMeta(&mine, in);
  absl::Status s = group.Send(&mine, sizeof(mine), peer, tag);
  if (!s.ok()) return Annotate(fn, s);
  if (!local.ok()) return local;  // the receiver learned it from the record
  Record ack;
  s = group.Recv(&ack, sizeof(ack), peer, tag);
  if (!s.ok()) return Annotate(fn, s);
  DROVER_RETURN_IF_ERROR(PeerFailure(fn, ack, absl::StrCat("the receiver, rank ", peer, ",")));
  if (x.bytes > 0) {
    s = group.Send(x.data, x.bytes, peer, tag);
    if (!s.ok()) return Annotate(fn, s);
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> RecvTensor(Group& group, Objects& objects, const std::string& out_id,
                                  int peer, uint32_t tag) {
  const Fn fn = Fn::kRecv;
  Record rec;
  absl::Status s = group.Recv(&rec, sizeof(rec), peer, tag);
  if (!s.ok()) return Annotate(fn, s);
  DROVER_RETURN_IF_ERROR(PeerFailure(fn, rec, absl::StrCat("the sender, rank ", peer, ",")));
  Output out(internal::ObjectsAccess::Store(objects));
  os::TensorMeta meta;
  absl::Status local = [&]() -> absl::Status {
    if (rec.fn != static_cast<uint8_t>(Fn::kSend)) {
      return Invalid(fn, absl::StrCat("rank ", peer, " did not call SendTensor"));
    }
    absl::StatusOr<os::TensorMeta> m =
        os::DecodeTensorHeader(absl::string_view(rec.meta, rec.meta_size));
    if (!m.ok()) return Annotate(fn, m.status());
    meta = *m;
    return out.Create(fn, out_id, meta);
  }();
  Record ack = MakeRecord(fn, 0xff, -1, local);
  s = group.Send(&ack, sizeof(ack), peer, tag);
  if (!s.ok()) return Annotate(fn, s);
  if (!local.ok()) return local;
  if (meta.data_size > 0) {
    s = group.Recv(out.data(), meta.data_size, peer, tag);
    if (!s.ok()) return GroupFailed(fn, s);
  }
  return out.Seal(fn);
}

}  // namespace drover
