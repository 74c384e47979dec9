#include "drover/by_name.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "drover/internal/runtime_api.h"
#include "sdk/internal/runtime_internal.h"
#include "sdk/internal/tensor_internal.h"

namespace drover {
namespace internal {

// The by-name types' internal state, for this file only.
struct ByNameAccess {
  static EncodedValue& Of(by_name::EncodedValue& v) { return v.value_; }
  static OwnedValue& Of(by_name::ReceivedValue& v) { return v.value_; }
  static by_name::ReceivedValue Received(OwnedValue value) {
    by_name::ReceivedValue out;
    out.value_ = std::move(value);
    return out;
  }
  static std::shared_ptr<const void>& Keepalive(by_name::DecodedValue& v) { return v.keepalive_; }
  static msgpack::object_handle& Handle(by_name::DecodedValue& v) { return v.handle_; }
  static std::shared_ptr<LoaderCore>& Core(by_name::AnyLoader& l) { return l.core_; }
  static const std::shared_ptr<LoaderCore>& Core(const by_name::AnyLoader& l) { return l.core_; }
};

}  // namespace internal

namespace by_name {
namespace {

using internal::ByNameAccess;

absl::Status Invalid(const char* what) {
  return absl::FailedPreconditionError(
      absl::StrCat("an invalid (default-constructed or moved-from) ", what));
}

// Objects a value stored or owns and will not hand on: tensors that handed theirs over
// own them again, the others are deleted.
void Release(std::vector<internal::StoredRef>& objects) {
  if (!objects.empty()) internal::ReturnOrDeleteStored(objects);
  objects.clear();
}

// The drover objects of a value's extensions, depth first (throws DecodeError).
void CollectExtensions(const msgpack::object& o, std::vector<DecodedValue::Extension>& out) {
  switch (o.type) {
    case msgpack::type::ARRAY:
      for (uint32_t i = 0; i < o.via.array.size; ++i) CollectExtensions(o.via.array.ptr[i], out);
      break;
    case msgpack::type::MAP:
      for (uint32_t i = 0; i < o.via.map.size; ++i) {
        CollectExtensions(o.via.map.ptr[i].key, out);
        CollectExtensions(o.via.map.ptr[i].val, out);
      }
      break;
    case msgpack::type::EXT:
      switch (o.via.ext.type()) {
        case kTensorExtension:
          out.emplace_back(internal::DecodeTensorExt(o.via.ext.data(), o.via.ext.size));
          break;
        case kSharedTensorExtension:
          out.emplace_back(internal::DecodeSharedTensor(o.via.ext.data(), o.via.ext.size));
          break;
        case kQueueExtension:
          out.emplace_back(AnyQueue::FromExtension(o.via.ext.data(), o.via.ext.size));
          break;
        default:
          throw internal::DecodeError(absl::StrCat("a value of msgpack extension type ", int{o.via.ext.type()},
                                                   ", which cannot be read by name (tensors, shared tensors "
                                                   "and queues can)"));
      }
      break;
    default:
      break;
  }
}

// True if `bytes` is exactly one msgpack value.
bool IsOneValue(const std::string& bytes) {
  if (bytes.empty()) return false;
  try {
    size_t offset = 0;
    msgpack::object_handle h = msgpack::unpack(bytes.data(), bytes.size(), offset);
    return offset == bytes.size();
  } catch (const std::exception&) {
    return false;
  }
}

absl::StatusOr<AnyLoader> StartByName(internal::LoaderInputs inputs, const std::string& function,
                                       const std::string& factory, const LoaderOptions& options) {
  absl::StatusOr<std::shared_ptr<internal::LoaderCore>> core =
      internal::StartLoaderByName(std::move(inputs), function, factory, options);
  if (!core.ok()) return core.status();
  AnyLoader out;
  ByNameAccess::Core(out) = *std::move(core);
  return out;
}

}  // namespace

// ---- values ----

EncodedValue::EncodedValue() = default;
EncodedValue::~EncodedValue() { Release(value_.stored); }
EncodedValue::EncodedValue(EncodedValue&& other) noexcept : value_(std::move(other.value_)) {
  other.value_.stored.clear();
}
EncodedValue& EncodedValue::operator=(EncodedValue&& other) noexcept {
  if (this != &other) {
    Release(value_.stored);
    value_ = std::move(other.value_);
    other.value_.stored.clear();
  }
  return *this;
}

absl::StatusOr<EncodedValue> Encode(const std::function<absl::Status(Packer&)>& write) {
  EncodedValue out;
  internal::EncodedValue& v = ByNameAccess::Of(out);
  internal::CodecContext* ctx = internal::DefaultCodecContext();
  internal::ScopedCodecContext scope(ctx);
  // As internal::Encode does: the context collects what the value puts into the store.
  // Restored however `write` ends (it may throw); `out` frees what was stored if the
  // value is not returned.
  struct Collect {
    internal::CodecContext* ctx;
    std::vector<internal::StoredRef>* saved = nullptr;
    std::vector<std::shared_ptr<const void>>* saved_keep = nullptr;
    ~Collect() {
      if (ctx == nullptr) return;
      ctx->collected = saved;
      ctx->keepalive = saved_keep;
    }
  } collect{ctx};
  if (ctx != nullptr) {
    collect.saved = ctx->collected;
    collect.saved_keep = ctx->keepalive;
    ctx->collected = &v.stored;
    ctx->keepalive = &v.keepalive;
  }
  ByteWriter writer(&v.bytes);
  Packer packer(writer);
  absl::Status status;
  try {
    status = write(packer);
  } catch (const internal::DecodeError& e) {  // a tensor that cannot be encoded or stored
    status = absl::InvalidArgumentError(e.what());
  }
  if (!status.ok()) return status;
  return out;
}

ReceivedValue::ReceivedValue() = default;
ReceivedValue::~ReceivedValue() {
  // An owning context frees, when it goes, the objects no tensor took.
  if (!value_.owned.empty()) internal::NewOwningContext(std::move(value_.owned), false).reset();
}
ReceivedValue::ReceivedValue(ReceivedValue&& other) noexcept : value_(std::move(other.value_)) {
  other.value_.owned.clear();
}
ReceivedValue& ReceivedValue::operator=(ReceivedValue&& other) noexcept {
  if (this != &other) {
    ReceivedValue dropped(std::move(*this));
    value_ = std::move(other.value_);
    other.value_.owned.clear();
  }
  return *this;
}

ReceivedValue ReceivedValue::FromBytes(std::string bytes) {
  auto owned = std::make_shared<const std::string>(std::move(bytes));
  ReceivedValue out;
  out.value_.view = internal::ValueView{*owned, owned};
  return out;
}

DecodedValue::DecodedValue() = default;
DecodedValue::~DecodedValue() = default;
DecodedValue::DecodedValue(DecodedValue&&) noexcept = default;
DecodedValue& DecodedValue::operator=(DecodedValue&&) noexcept = default;

absl::StatusOr<DecodedValue> Decode(ReceivedValue value) {
  internal::OwnedValue& v = ByNameAccess::Of(value);
  DecodedValue out;
  ByNameAccess::Keepalive(out) = v.view.keepalive;
  if (absl::Status s = internal::Unpack(v.view.bytes, &ByNameAccess::Handle(out)); !s.ok()) return s;
  // The value's objects go to the context: the tensors decoded take theirs, the others
  // are freed when it goes (also when decoding fails).
  std::unique_ptr<internal::CodecContext> owning;
  if (!v.owned.empty() || v.pin) {
    owning = internal::NewOwningContext(std::move(v.owned), v.pin);
    v.owned.clear();
  }
  internal::ScopedCodecContext scope(owning != nullptr ? owning.get() : internal::DefaultCodecContext());
  try {
    CollectExtensions(out.object(), out.extensions());
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(e.what());
  }
  return out;
}

// ---- queues ----

absl::StatusOr<AnyQueue> AnyQueue::Create(const QueueOptions& options) {
  absl::StatusOr<std::shared_ptr<internal::QueueClient>> c = internal::CreateQueue(options);
  if (!c.ok()) return c.status();
  return AnyQueue(*std::move(c));
}

absl::StatusOr<AnyQueue> AnyQueue::Open(const std::string& name, absl::Duration timeout) {
  absl::StatusOr<std::shared_ptr<internal::QueueClient>> c = internal::OpenQueue(name, timeout);
  if (!c.ok()) return c.status();
  return AnyQueue(*std::move(c));
}

AnyQueue AnyQueue::FromExtension(const char* data, size_t size) {
  return AnyQueue(internal::DecodeQueue(data, size));
}

absl::Status AnyQueue::Put(EncodedValue value, absl::Duration timeout) const {
  if (!client_) return Invalid("queue");
  // QueuePut owns the objects from here: it gives them back if the item is not queued.
  internal::EncodedValue v = std::move(ByNameAccess::Of(value));
  ByNameAccess::Of(value).stored.clear();
  return internal::QueuePut(*client_, std::move(v), timeout);
}

absl::StatusOr<std::vector<ReceivedValue>> AnyQueue::Get(absl::Duration timeout,
                                                         int max_items) const {
  if (!client_) return Invalid("queue");
  absl::StatusOr<std::vector<internal::OwnedValue>> items = internal::QueueGet(*client_, timeout, max_items);
  if (!items.ok()) return items.status();
  std::vector<ReceivedValue> out;
  out.reserve(items->size());
  for (internal::OwnedValue& v : *items) out.push_back(ByNameAccess::Received(std::move(v)));
  return out;
}

absl::Status AnyQueue::Close() const {
  return client_ ? internal::QueueClose(*client_) : Invalid("queue");
}

absl::StatusOr<QueueInfo> AnyQueue::Info() const {
  if (!client_) return Invalid("queue");
  return internal::QueueStats(*client_);
}

absl::Status AnyQueue::Destroy() const {
  return client_ ? internal::QueueDestroy(*client_) : Invalid("queue");
}

std::string AnyQueue::name() const { return client_ ? internal::QueueName(*client_) : ""; }
std::string AnyQueue::id() const { return client_ ? internal::QueueId(*client_) : ""; }

// ---- objects ----

AnyRef AnyRef::Put(EncodedValue value) {
  internal::EncodedValue v = std::move(ByNameAccess::Of(value));
  ByNameAccess::Of(value).stored.clear();  // the object table owns them now
  return AnyRef(internal::PutValue(std::move(v)));
}

absl::StatusOr<ReceivedValue> AnyRef::Get(absl::Duration timeout) const {
  if (!state_) return Invalid("object reference");
  absl::StatusOr<internal::ValueView> view = internal::GetValue(state_, timeout);
  if (!view.ok()) return view.status();
  internal::OwnedValue v;  // owns nothing: the reference keeps the objects
  v.view = *std::move(view);
  return ByNameAccess::Received(std::move(v));
}

std::string AnyRef::id() const { return state_ ? internal::RefId(*state_) : ""; }

absl::StatusOr<TensorById> GetTensor(const std::string& object_id, absl::Duration timeout) {
  absl::StatusOr<object_store::ObjectRef> ref = internal::GetObject(object_id, timeout);
  if (!ref.ok()) return ref.status();
  TensorById out;
  out.is_mutable = ref->is_mutable();
  absl::StatusOr<Tensor> t = internal::TensorAccess::TensorFromObject(*std::move(ref));
  if (!t.ok()) return t.status();
  out.tensor = *std::move(t);
  return out;
}

absl::StatusOr<const void*> ReadOnlyAddress(const void* data) {
  object_store::Client* store = internal::LocalStore();
  if (store == nullptr) return data;
  const uint8_t* base = store->arena_base();
  const uint64_t capacity = store->arena_capacity();
  const auto* p = static_cast<const uint8_t*>(data);
  if (p < base || p >= base + capacity) return data;
  static absl::Mutex mu;
  // Read-only mappings by the read-write mapping's base: one per store connection,
  // never unmapped (views made from them may outlive the runtime).
  static auto* aliases = new std::map<const uint8_t*, const uint8_t*>();
  absl::MutexLock l(&mu);
  const uint8_t*& alias = (*aliases)[base];
  if (alias == nullptr) {
    void* m = ::mmap(nullptr, capacity, PROT_READ, MAP_SHARED, store->arena_fd(), 0);
    if (m == MAP_FAILED) {
      aliases->erase(base);
      return absl::ResourceExhaustedError(absl::StrCat("cannot map the object store's arena (", capacity,
                                                       " bytes) read-only: ", std::strerror(errno)));
    }
    alias = static_cast<const uint8_t*>(m);
  }
  return alias + (p - base);
}

// ---- loaders ----

AnyLoader::AnyLoader() = default;
AnyLoader::~AnyLoader() = default;
AnyLoader::AnyLoader(AnyLoader&&) noexcept = default;
AnyLoader& AnyLoader::operator=(AnyLoader&&) noexcept = default;

absl::StatusOr<AnyLoader> AnyLoader::Start(std::shared_ptr<const std::vector<std::string>> inputs,
                                           const std::string& function, const std::string& factory,
                                           const LoaderOptions& options) {
  if (inputs == nullptr) return absl::InvalidArgumentError("loader '" + options.name + "': no inputs (null)");
  for (size_t i = 0; i < inputs->size(); ++i) {
    if (!IsOneValue((*inputs)[i])) {
      return absl::InvalidArgumentError(absl::StrCat("loader '", options.name, "': input ", i,
                                                     " is not exactly one msgpack value (",
                                                     (*inputs)[i].size(), " bytes)"));
    }
  }
  const int64_t n = static_cast<int64_t>(inputs->size());
  const int64_t batch = std::max<int64_t>(0, options.batch_size);
  internal::LoaderInputs in;
  in.count = batch > 0 ? (n + batch - 1) / batch : n;
  in.items = n;
  in.batched = batch > 0;
  in.batch_size = batch;
  // Inputs are encoded already: a position's argument is the input itself, or an array
  // header followed by the batch's inputs. They hold no tensors, so no store is involved.
  in.encode = [inputs, batch](int64_t position) -> absl::StatusOr<internal::EncodedValue> {
    internal::EncodedValue out;
    if (batch == 0) {
      out.bytes = (*inputs)[static_cast<size_t>(position)];
      return out;
    }
    const size_t first = static_cast<size_t>(position * batch);
    const size_t last = std::min(inputs->size(), first + static_cast<size_t>(batch));
    ByteWriter writer(&out.bytes);
    Packer(writer).pack_array(static_cast<uint32_t>(last - first));
    for (size_t i = first; i < last; ++i) out.bytes += (*inputs)[i];
    return out;
  };
  return StartByName(std::move(in), function, factory, options);
}

absl::StatusOr<AnyLoader> AnyLoader::Start(IndexRange range, const std::string& function,
                                           const std::string& factory, const LoaderOptions& options) {
  internal::LoaderInputs in = options.batch_size > 0 ? internal::MakeRangeInputs<std::vector<int64_t>>(range, options.batch_size)
                                                     : internal::MakeRangeInputs<int64_t>(range, 0);
  return StartByName(std::move(in), function, factory, options);
}

absl::StatusOr<LoaderItem<DecodedValue>> AnyLoader::Next() {
  if (!core_) return Invalid("loader");
  absl::StatusOr<internal::LoaderResult> r = internal::LoaderNext(*core_);
  if (!r.ok()) return r.status();
  absl::StatusOr<DecodedValue> value = Decode(ByNameAccess::Received(std::move(r->value)));
  if (!value.ok()) return internal::LoaderDecodeError(*core_, r->position, value.status());
  LoaderItem<DecodedValue> out;
  out.position = r->position;
  out.value = *std::move(value);
  return out;
}

std::vector<SkippedItem> AnyLoader::skipped() const {
  return core_ ? internal::LoaderSkipped(*core_) : std::vector<SkippedItem>{};
}

LoaderProgress AnyLoader::progress() const {
  return core_ ? internal::LoaderProgressOf(*core_) : LoaderProgress{};
}

}  // namespace by_name
}  // namespace drover
