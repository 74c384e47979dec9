#include "drover/collective.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collective/group.h"
#include "common/status_macros.h"

namespace drover {
namespace {

namespace c = collective;

// The facade's enums are the implementation's, value for value.
#define DROVER_SAME_(facade, impl) \
  static_assert(static_cast<int>(facade) == static_cast<int>(impl))
DROVER_SAME_(ReduceOp::kSum, c::ReduceOp::kSum);
DROVER_SAME_(ReduceOp::kAvg, c::ReduceOp::kAvg);
DROVER_SAME_(ReduceOp::kMax, c::ReduceOp::kMax);
DROVER_SAME_(ReduceOp::kMin, c::ReduceOp::kMin);
#undef DROVER_SAME_

c::ReduceOp ToGroup(ReduceOp op) { return static_cast<c::ReduceOp>(op); }

// The group's element type of `dtype`, if the groups compute on it.
std::optional<c::DataType> GroupDataType(DType dtype) {
  switch (dtype) {
    case DType::kFloat16: return c::DataType::kFloat16;
    case DType::kFloat32: return c::DataType::kFloat32;
    case DType::kFloat64: return c::DataType::kFloat64;
    case DType::kInt32: return c::DataType::kInt32;
    case DType::kInt64: return c::DataType::kInt64;
    case DType::kUInt8: return c::DataType::kUint8;
    default: return std::nullopt;
  }
}

// How an operation that only moves bytes passes `count` elements of `dtype` to the
// group: as themselves where the group knows the type, else as bytes.
struct Moved {
  size_t count;
  c::DataType type;
};
Moved AsMoved(size_t count, DType dtype) {
  if (std::optional<c::DataType> t = GroupDataType(dtype)) return {count, *t};
  return {count * DTypeSize(dtype), c::DataType::kUint8};
}

}  // namespace

const char* ReduceOpName(ReduceOp op) { return c::ReduceOpName(ToGroup(op)); }

absl::Status CheckReduceDType(DType dtype) {
  if (GroupDataType(dtype).has_value()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "dtype ", DTypeName(dtype),
      " is not supported by reductions (supported: float16, float32, float64, int32, "
      "int64, uint8)"));
}

absl::StatusOr<CollectiveOptions> CollectiveOptions::FromEnvironment(const std::string& name) {
  return c::GroupOptionsFromEnvironment(name);
}

CollectiveGroup::CollectiveGroup(std::unique_ptr<c::Group> group) : group_(std::move(group)) {}

CollectiveGroup::~CollectiveGroup() = default;

absl::StatusOr<std::unique_ptr<CollectiveGroup>> CollectiveGroup::Create(
    const CollectiveOptions& options) {
  DROVER_ASSIGN_OR_RETURN(std::unique_ptr<c::Group> group,
                          c::NewGroup(options));
  return std::unique_ptr<CollectiveGroup>(new CollectiveGroup(std::move(group)));
}

absl::StatusOr<std::unique_ptr<CollectiveGroup>> CollectiveGroup::FromEnvironment(
    const std::string& name) {
  DROVER_ASSIGN_OR_RETURN(CollectiveOptions options, CollectiveOptions::FromEnvironment(name));
  return Create(options);
}

absl::Status CollectiveGroup::AllReduce(void* buf, size_t count, DType dtype, ReduceOp op) {
  DROVER_RETURN_IF_ERROR(CheckReduceDType(dtype));
  return group_->AllReduce(buf, count, *GroupDataType(dtype), ToGroup(op));
}

absl::Status CollectiveGroup::Broadcast(void* buf, size_t count, DType dtype, int root) {
  const Moved m = AsMoved(count, dtype);
  return group_->Broadcast(buf, m.count, m.type, root);
}

absl::Status CollectiveGroup::AllGather(const void* in, void* out, size_t count_per_rank,
                                        DType dtype) {
  const Moved m = AsMoved(count_per_rank, dtype);
  return group_->AllGather(in, out, m.count, m.type);
}

absl::Status CollectiveGroup::ReduceScatter(const void* in, void* out, size_t count_per_rank,
                                            DType dtype, ReduceOp op) {
  DROVER_RETURN_IF_ERROR(CheckReduceDType(dtype));
  return group_->ReduceScatter(in, out, count_per_rank, *GroupDataType(dtype), ToGroup(op));
}

absl::Status CollectiveGroup::Barrier() { return group_->Barrier(); }

absl::Status CollectiveGroup::Send(const void* buf, size_t bytes, int peer, uint32_t tag) {
  return group_->Send(buf, bytes, peer, tag);
}

absl::Status CollectiveGroup::Recv(void* buf, size_t bytes, int peer, uint32_t tag) {
  return group_->Recv(buf, bytes, peer, tag);
}

int CollectiveGroup::rank() const { return group_->rank(); }

int CollectiveGroup::size() const { return group_->size(); }

const std::string& CollectiveGroup::name() const { return group_->name(); }

}  // namespace drover
