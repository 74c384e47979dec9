// drover/by_name.h: queues, objects and DataLoaders reached by name or id, with values
// as msgpack bytes instead of C++ types. For bindings to other languages (the Python
// module, python/) and tools: the typed API (drover::Queue<T>, drover::Put/Get,
// drover::DataLoader<Out>) is built for C++ programs, this one for code that packs and
// reads values itself. Nothing here needs a name from drover::internal.
//
// Values are msgpack with drover's extensions: a tensor, a shared tensor and a queue
// each travel as an extension (kTensorExtension, ...), so a large tensor's bytes go
// into the node's object store once and only its id travels. Encode packs a value
// (tensors included) into an EncodedValue; Decode turns a ReceivedValue (a queue item,
// an object's value, a loader result) back into its msgpack object and the drover
// objects its extensions stand for.
//
// Ownership: an EncodedValue owns the store objects its encoding put there (a large
// tensor) until it is sent; dropped unsent, it frees them. A ReceivedValue owns the
// store objects the sender handed over (a queue item's); Decode hands them to the
// tensors made from them (freed with the last of those), and a ReceivedValue dropped
// undecoded frees them.
//
// Threading: every call may block (a timeout bounds each) and may be made from any
// thread; handles are copyable and share their queue or object; values and loaders are
// move-only and used by one thread at a time.
// Errors: as drover::Queue, drover::Get and drover::DataLoader (drover/queue.h,
// drover/task.h, drover/data_loader.h); a call on an invalid (default-constructed or
// moved-from) handle is FAILED_PRECONDITION.
#ifndef DROVER_SDK_INCLUDE_DROVER_BY_NAME_H_
#define DROVER_SDK_INCLUDE_DROVER_BY_NAME_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "drover/data_loader.h"
#include "drover/internal/codec.h"
#include "drover/internal/pipeline_api.h"
#include "drover/queue.h"
#include "drover/shared_tensor.h"
#include "drover/task.h"  // the msgpack adaptor of Tensor (Packer::pack)
#include "drover/tensor.h"

namespace drover {
namespace internal {
class RefState;
struct ByNameAccess;  // by_name.cc
}  // namespace internal

namespace by_name {

// The msgpack extension types drover's values use (msgpack::object's via.ext.type()).
inline constexpr int8_t kTensorExtension = internal::kTensorExtType;
inline constexpr int8_t kSharedTensorExtension = internal::kSharedTensorExtType;
inline constexpr int8_t kQueueExtension = internal::kQueueExtType;

// What a Packer writes to: appends to a string.
class ByteWriter {
 public:
  explicit ByteWriter(std::string* out) : out_(out) {}
  void write(const char* data, size_t size) { out_->append(data, size); }

 private:
  std::string* out_;
};
using Packer = msgpack::packer<ByteWriter>;

// A value ready to send (Put it into a queue or the cluster): msgpack bytes and the
// store objects it put there. Move-only.
class EncodedValue {
 public:
  EncodedValue();
  // Frees the store objects of a value that was never sent.
  ~EncodedValue();
  EncodedValue(EncodedValue&& other) noexcept;
  EncodedValue& operator=(EncodedValue&& other) noexcept;
  EncodedValue(const EncodedValue&) = delete;
  EncodedValue& operator=(const EncodedValue&) = delete;

  // The msgpack bytes.
  const std::string& bytes() const { return value_.bytes; }

 private:
  friend struct internal::ByNameAccess;
  internal::EncodedValue value_;
};

// Encodes the one msgpack value that `write` packs. A drover::Tensor packed with
// `packer.pack(tensor)` travels inline when small; a large one is put into this node's
// store once (a tensor already there, e.g. from AllocateInStoreUninitialized, is sealed
// in place rather than copied) and only its id travels, as drover::Put does. Without a
// runtime (no drover::Init) everything travels inline.
// `write` returns an error status to give up: that status is returned. INVALID_ARGUMENT
// when a tensor cannot be encoded or stored (naming it). An exception thrown by `write`
// propagates. In every failure the objects stored so far are freed.
absl::StatusOr<EncodedValue> Encode(const std::function<absl::Status(Packer&)>& write);

// A value received (a queue item, an object's value, a loader result), to Decode.
// Move-only; owns the store objects the sender handed over until decoded.
class ReceivedValue {
 public:
  ReceivedValue();
  // Frees the objects it owns if it was never decoded.
  ~ReceivedValue();
  ReceivedValue(ReceivedValue&& other) noexcept;
  ReceivedValue& operator=(ReceivedValue&& other) noexcept;
  ReceivedValue(const ReceivedValue&) = delete;
  ReceivedValue& operator=(const ReceivedValue&) = delete;

  // A value from bytes the caller holds (e.g. an EncodedValue's bytes kept elsewhere);
  // it owns no store objects.
  static ReceivedValue FromBytes(std::string bytes);

  // The msgpack bytes (valid while this value lives).
  absl::string_view bytes() const { return value_.view.bytes; }

 private:
  friend struct internal::ByNameAccess;
  internal::OwnedValue value_;
};

// A queue whose items are encoded values (any type a producer sent).
class AnyQueue {
 public:
  AnyQueue() = default;

  // As Queue<T>::Create: a new queue hosted by a process of this job.
  static absl::StatusOr<AnyQueue> Create(const QueueOptions& options);
  // As Queue<T>::Open: the queue created with `name`, waiting up to `timeout`.
  static absl::StatusOr<AnyQueue> Open(const std::string& name, absl::Duration timeout);
  // The queue a value's queue extension (kQueueExtension) names.
  static AnyQueue FromExtension(const char* data, size_t size);

  absl::Status Put(EncodedValue value, absl::Duration timeout) const;
  // Up to `max_items` (at least one, waiting up to `timeout` for it). OUT_OF_RANGE
  // once the queue is closed and drained.
  absl::StatusOr<std::vector<ReceivedValue>> Get(absl::Duration timeout, int max_items) const;
  absl::Status Close() const;
  absl::StatusOr<QueueInfo> Info() const;
  absl::Status Destroy() const;

  bool valid() const { return client_ != nullptr; }
  std::string name() const;
  std::string id() const;

 private:
  explicit AnyQueue(std::shared_ptr<internal::QueueClient> client) : client_(std::move(client)) {}
  std::shared_ptr<internal::QueueClient> client_;
};

// A value put into the cluster (as drover::Put does); it lives while a copy of the
// handle does in this process.
class AnyRef {
 public:
  AnyRef() = default;
  // Never fails itself: a failure comes back from Get.
  static AnyRef Put(EncodedValue value);

  // Waits up to `timeout` for the value. It owns nothing (the handle keeps its
  // objects): decode it while the handle lives.
  absl::StatusOr<ReceivedValue> Get(absl::Duration timeout) const;

  bool valid() const { return state_ != nullptr; }
  // "<job>.<owner>.<n>"; "" for an invalid handle.
  std::string id() const;

 private:
  explicit AnyRef(std::shared_ptr<internal::RefState> state) : state_(std::move(state)) {}
  std::shared_ptr<internal::RefState> state_;
};

// A decoded value: its msgpack object, and the drover objects its extensions stand for.
// Move-only.
class DecodedValue {
 public:
  using Extension = std::variant<Tensor, SharedTensor, AnyQueue>;

  DecodedValue();
  ~DecodedValue();
  DecodedValue(DecodedValue&&) noexcept;
  DecodedValue& operator=(DecodedValue&&) noexcept;

  // The value. Strings and binaries may point into the received bytes, which this
  // keeps: read it while this lives. Its extensions are read through extensions().
  const msgpack::object& object() const { return handle_.get(); }
  // One per extension of object(), in the order a depth-first walk meets them (an
  // array's elements in order; a map's key before its value): tensors (read-only if
  // sealed store objects: Tensor::writable), shared tensors (writable in place) and
  // queues. Take them (std::move) as the walk goes.
  std::vector<Extension>& extensions() { return extensions_; }

 private:
  friend struct internal::ByNameAccess;
  std::shared_ptr<const void> keepalive_;  // the bytes handle_ may point into
  msgpack::object_handle handle_;
  std::vector<Extension> extensions_;
};

// Decodes `value`: tensors are pulled from other nodes, shared tensors attached,
// queues found (this may block), and the store objects the value owned go to the
// tensors made from them (the others are freed). DATA_LOSS for bytes that are not
// msgpack; INVALID_ARGUMENT for an extension of another type (e.g. an ObjectRef's: a
// task's future cannot be read by name) or a tensor that does not decode.
absl::StatusOr<DecodedValue> Decode(ReceivedValue value);

// A tensor object by id (put by any process of the cluster, e.g. Objects::PutTensor),
// pulled to this node first if it is elsewhere.
struct TensorById {
  Tensor tensor;
  // A SharedTensor's object (writable in place); a sealed object is read-only.
  bool is_mutable = false;
};
absl::StatusOr<TensorById> GetTensor(const std::string& object_id, absl::Duration timeout);

// Where `data`, a pointer into this process's (read-write) mapping of its node's store
// arena, is in a second, read-only mapping of the same pages (made on first use, kept
// for the life of the process): for bindings whose arrays cannot be made read-only
// (torch 1.13 has no read-only tensors), so that a write to a sealed object faults
// instead of changing it under its readers. `data` itself when it is not in the arena
// (or there is no store). RESOURCE_EXHAUSTED if the mapping cannot be made.
absl::StatusOr<const void*> ReadOnlyAddress(const void* data);

// A DataLoader (drover/data_loader.h) whose function, and factory, are named as
// DROVER_REMOTE registered them in the workers' program (InitOptions::worker_program,
// which need not be this process's binary): the names are resolved in the workers,
// whose start fails naming a function their program does not have. Its inputs are
// msgpack bytes, its results DecodedValues. A loader is one pass over its inputs; its
// workers stop when it goes. Move-only.
class AnyLoader {
 public:
  AnyLoader();
  ~AnyLoader();
  AnyLoader(AnyLoader&&) noexcept;
  AnyLoader& operator=(AnyLoader&&) noexcept;

  // `inputs`: each one msgpack value, the function's argument (an array for several:
  // what a tuple or a MSGPACK_DEFINE struct reads); with options.batch_size > 0 the
  // function takes an array of up to batch_size of them. `factory`: "" for a plain
  // function, else a factory whose object's `function` method the workers call.
  // INVALID_ARGUMENT naming an input that is not exactly one msgpack value; otherwise
  // as DataLoader<Out>::Create.
  static absl::StatusOr<AnyLoader> Start(std::shared_ptr<const std::vector<std::string>> inputs,
                                         const std::string& function, const std::string& factory,
                                         const LoaderOptions& options);
  // The inputs are the integers of `range` (with batch_size > 0, arrays of them).
  static absl::StatusOr<AnyLoader> Start(IndexRange range, const std::string& function,
                                         const std::string& factory, const LoaderOptions& options);

  // The next result, decoded as Decode does (waits for it). OUT_OF_RANGE once every
  // item was delivered or skipped; an item's error (OnError::kStop) and a result that
  // does not decode name the item, as DataLoader<Out>::Next.
  absl::StatusOr<LoaderItem<DecodedValue>> Next();
  // As DataLoader<Out>::skipped() and progress(); empty for an invalid loader.
  std::vector<SkippedItem> skipped() const;
  LoaderProgress progress() const;

  bool valid() const { return core_ != nullptr; }

 private:
  friend struct internal::ByNameAccess;
  std::shared_ptr<internal::LoaderCore> core_;
};

}  // namespace by_name
}  // namespace drover

#endif  // DROVER_SDK_INCLUDE_DROVER_BY_NAME_H_
