// Tensors in this node's shared memory (the object store's arena), for pipelines and
// for training on shared parameters.
//
//   // A batch written straight into the store: sending it copies nothing.
//   absl::StatusOr<drover::Tensor> batch = drover::AllocateInStore(drover::DType::kFloat32, {64, 784});
//   Fill(*batch->mutable_span<float>());
//   DROVER_RETURN_IF_ERROR(queue.Put(*batch));        // sealed in place, only its id travels
//
//   // Parameters that every worker on this node updates in place, without locks.
//   auto params = drover::SharedTensor::Create(drover::DType::kFloat32, {4096});
//   auto done = drover::Task(Train).SetNodeAffinity(params->node_id()).Remote(*params, 100);
//   absl::StatusOr<drover::Tensor> frozen = params->Snapshot();   // an immutable copy
//
// AllocateInStore: a writable tensor whose storage is a new object of this node's store.
// Sending it (drover::Put, a task's argument or result, a Queue item, a DataLoader
// result) seals the object where it was written instead of copying the bytes, and from
// then on the tensor is read-only (its writes fail with FAILED_PRECONDITION: Clone()).
// The value sent takes the object over: it is freed when that value is (for a Queue
// item: when the consumer's last copy of the tensor goes), never while a Tensor maps
// it. Unsent, it is freed with the tensor's last copy. Memory freed this way is reused
// by the next allocation of the same size, so a producer/consumer loop keeps writing
// the same (already mapped and touched) pages.
//
// SharedTensor: a mutable tensor (a mutable store object, docs/object_store.md) that
// lives on one node for its whole life. Any process of the job on that node that gets
// it (as a task or actor argument) maps the same pages and may read and write them
// concurrently with the others, without locks: Hogwild-style updates, as
// torch.multiprocessing's share_memory() tensors. Concurrent writes to one element race
// by design (the last one wins; float adds may lose updates): that is the algorithm's
// trade, not a bug. Snapshot() copies the current values into an ordinary (immutable
// once sent) tensor that can go anywhere.
//
// Lifetime: the process that created a SharedTensor owns it. When the owner's last copy
// of the handle goes (or Release), no process can attach to it any more, and its memory
// is freed once every process that attached has let go too (their copies destroyed, or
// Release): never while anyone maps it. The end of the job frees it in any case. A
// process on another node cannot attach: a task given it there fails (its argument
// does not decode), naming both nodes; run the task on its node
// (SetNodeAffinity(shared.node_id())), or send a Snapshot. Attaching after the owner
// let go fails the same way, saying so.
//
// Thread safety: a SharedTensor handle is a value; copies share one hold on the object
// (Release through any copy releases it for all). The elements are plain memory.
//
// Errors (absl canonical codes): FAILED_PRECONDITION without drover::Init or a store on
// this node, or for a handle used after Release;
// INVALID_ARGUMENT a bad dtype or shape, or a span of the wrong element type;
// RESOURCE_EXHAUSTED no room in the node's store (the message says what holds it).
#ifndef DROVER_SDK_INCLUDE_DROVER_SHARED_TENSOR_H_
#define DROVER_SDK_INCLUDE_DROVER_SHARED_TENSOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "drover/internal/codec.h"
#include "drover/tensor.h"

namespace drover {

// A writable, zero-filled, contiguous tensor in a new object of this node's store;
// sending it seals it in place (see above). Needs drover::Init and a store on this node
// (FAILED_PRECONDITION otherwise: use Tensor::Empty). A tensor with no elements has no
// object (it is an ordinary empty tensor).
absl::StatusOr<Tensor> AllocateInStore(DType dtype, std::vector<int64_t> shape);
// The same without the zero-fill (torch.empty's contract): its elements are whatever
// the reused store space held. For a tensor that will be written whole: a producer
// that allocates per item then writes each byte once, not twice (the zero-fill of a
// 64 MiB tensor costs as much as filling it).
absl::StatusOr<Tensor> AllocateInStoreUninitialized(DType dtype, std::vector<int64_t> shape);

// This node's object store as this process sees it: what the tensors of pipelines
// (queue items, loader results, shared tensors) hold. FAILED_PRECONDITION without
// drover::Init or a store on this node.
struct StoreUsage {
  uint64_t capacity = 0;  // bytes of the node's arena
  uint64_t used = 0;      // allocated now (objects, and space leased for puts)
  uint64_t objects = 0;   // objects in memory
};
absl::StatusOr<StoreUsage> NodeStoreUsage();

namespace internal {
class SharedTensorState;   // sdk/runtime/shared_tensor.cc
struct SharedTensorAccess;  // sdk/runtime/shared_tensor.cc: for drover's own code
}  // namespace internal

class SharedTensor {
 public:
  // An invalid handle (every accessor fails). Valid ones come from Create, or as a
  // task's argument.
  SharedTensor() = default;

  // A zero-filled tensor of `shape` in this node's store, owned by this process.
  static absl::StatusOr<SharedTensor> Create(DType dtype, std::vector<int64_t> shape);

  bool valid() const { return state_ != nullptr; }
  // The store object ("" for an invalid handle) and the node it lives on.
  std::string id() const;
  std::string node_id() const;
  DType dtype() const;
  std::vector<int64_t> shape() const;
  int64_t numel() const;
  size_t nbytes() const;

  // The elements, writable in place (row-major). Valid until Release or until the last
  // copy of this handle goes. INVALID_ARGUMENT if T is not the dtype's type;
  // FAILED_PRECONDITION after Release.
  template <typename T>
  absl::StatusOr<absl::Span<T>> span() const {
    absl::StatusOr<void*> p = Data(DTypeOf<T>::value);
    if (!p.ok()) return p.status();
    return absl::MakeSpan(static_cast<T*>(*p), static_cast<size_t>(numel()));
  }

  // The elements' bytes, writable in place, untyped: for code that views them by
  // dtype() and shape() itself (the Python module's torch views). Valid as span().
  // FAILED_PRECONDITION after Release or for an invalid handle.
  absl::StatusOr<void*> raw_data() const;

  // A copy of the current values in a new store tensor (AllocateInStore), sealed: an
  // immutable object that can be sent anywhere. Concurrent writers may be half-way
  // through: a Hogwild snapshot is as consistent as the workers' own reads.
  absl::StatusOr<Tensor> Snapshot() const;

  // Lets go of the object now (see Lifetime). FAILED_PRECONDITION if already released.
  absl::Status Release();

 private:
  friend struct internal::SharedTensorAccess;
  explicit SharedTensor(std::shared_ptr<internal::SharedTensorState> state)
      : state_(std::move(state)) {}
  absl::StatusOr<void*> Data(DType want) const;
  std::shared_ptr<internal::SharedTensorState> state_;
};

namespace internal {
// How a SharedTensor travels in a task argument (its id and node) and is attached on
// the receiving side. Throw DecodeError when it cannot be.
std::string EncodeSharedTensor(const SharedTensor& t);
SharedTensor DecodeSharedTensor(const char* data, size_t size);
inline constexpr int8_t kSharedTensorExtType = 'S';
}  // namespace internal

}  // namespace drover

namespace msgpack {
MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS) {
namespace adaptor {

template <>
struct pack<drover::SharedTensor> {
  template <typename Stream>
  packer<Stream>& operator()(packer<Stream>& o, const drover::SharedTensor& t) const {
    const std::string ext = drover::internal::EncodeSharedTensor(t);
    o.pack_ext(ext.size(), drover::internal::kSharedTensorExtType);
    o.pack_ext_body(ext.data(), static_cast<uint32_t>(ext.size()));
    return o;
  }
};

template <>
struct convert<drover::SharedTensor> {
  const msgpack::object& operator()(const msgpack::object& o, drover::SharedTensor& t) const {
    if (o.type != msgpack::type::EXT || o.via.ext.type() != drover::internal::kSharedTensorExtType) {
      throw drover::internal::DecodeError("expected a SharedTensor, got " +
                                          drover::internal::DescribeMsgpack(o));
    }
    t = drover::internal::DecodeSharedTensor(o.via.ext.data(), o.via.ext.size);
    return o;
  }
};

}  // namespace adaptor
}  // MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS)
}  // namespace msgpack

#endif  // DROVER_SDK_INCLUDE_DROVER_SHARED_TENSOR_H_
