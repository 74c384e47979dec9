// drover::Tensor as a msgpack extension: how tensors travel inside task arguments,
// results and Put values without going through the serializer element by element.
//
// Payload (msgpack): [1, mode, header, body]
//   header: the store's tensor header (object_store/tensor.h, DRTN v1): dtype, shape,
//           strides, storage offset, byte order and the size of its storage;
//   mode 0: body = the storage's bytes (small tensors, or no runtime);
//   mode 1: body = [object id, node id, size]: a store object holding the storage
//           (put while encoding, sealed in place from drover::AllocateInStore or a
//           task worker's draft, or one already in a store).
// Everything decoded is checked (DecodeTensorHeader validates the header against the
// bytes it will view), so a bad payload is an error, never an out-of-bounds view.
#include "absl/strings/str_cat.h"
#include "drover/internal/codec.h"
#include "object_store/tensor.h"
#include "sdk/internal/tensor_internal.h"
#include "sdk/runtime/store_draft.h"
#include "sdk/runtime/store_tensor.h"

namespace drover::internal {
namespace {

// Tensors whose storage is larger than this go into the store (when there is one).
constexpr size_t kTensorInlineLimit = 64 * 1024;
constexpr int kVersion = 1;

struct StringWriter {
  std::string* s;
  void write(const char* data, size_t n) { s->append(data, n); }
};

}  // namespace

std::string EncodeTensorExt(const Tensor& t) {
  const object_store::TensorMeta meta = TensorAccess::MetaOf(t);
  absl::StatusOr<std::string> header = object_store::EncodeTensorHeader(meta);
  if (!header.ok()) throw DecodeError(absl::StrCat("cannot encode a ", t.Describe(), " tensor: ", header.status().message()));
  const Buffer& storage = TensorAccess::StorageOf(t);
  CodecContext* ctx = CodecContext::Current();
  std::string out;
  StringWriter w{&out};
  msgpack::packer<StringWriter> pk(w);
  pk.pack_array(4);
  pk.pack(kVersion);
  auto pack_stored = [&](const StoredRef& r) {
    pk.pack(1);
    pk.pack_bin(static_cast<uint32_t>(header->size()));
    pk.pack_bin_body(header->data(), static_cast<uint32_t>(header->size()));
    pk.pack_array(3);
    pk.pack(r.object_id);
    pk.pack(r.node_id);
    pk.pack(r.size);
  };
  const StoreObjectStorage* owned = StoreObjectStorage::Of(storage);
  const auto* draft = dynamic_cast<const StoreDraft*>(TensorAccess::StorageObject(storage));
  if (ctx != nullptr && owned != nullptr) {
    // An object this process wrote (sealed here, in place: no copy) or owns: the value
    // takes it over (see store_tensor.h).
    absl::StatusOr<StoreObjectStorage::Sent> sent = owned->Send();
    if (!sent.ok()) {
      throw DecodeError(absl::StrCat("cannot seal the ", t.Describe(), " tensor in store object ",
                                     storage.object_id(), ": ", sent.status().message()));
    }
    if (sent->owned && ctx->collected != nullptr) ctx->collected->push_back(sent->where);
    if (ctx->keepalive != nullptr) ctx->keepalive->push_back(std::make_shared<const Tensor>(t));
    pack_stored(sent->where);
  } else if (ctx != nullptr && draft != nullptr && !draft->in_store() && SealDraftsScope::Active()) {
    // Made by this task in the store: sealed where it is, no copy. Whoever receives the
    // value owns the object (it is listed like one this encoding put).
    absl::StatusOr<StoredRef> r = draft->Seal();
    if (!r.ok()) throw DecodeError(std::string(r.status().message()));
    if (ctx->collected != nullptr) ctx->collected->push_back(*r);
    if (ctx->keepalive != nullptr) ctx->keepalive->push_back(std::make_shared<const Tensor>(t));
    pack_stored(*r);
  } else if (ctx != nullptr && t.in_store()) {
    // Already in this node's store: refer to it, and keep it pinned while the value is
    // in use (the reader pulls it by id).
    if (ctx->keepalive != nullptr) ctx->keepalive->push_back(std::make_shared<const Tensor>(t));
    pack_stored(StoredRef{t.object_id(), ctx->node_id(), storage.size()});
  } else if (ctx != nullptr && storage.size() > kTensorInlineLimit) {
    absl::StatusOr<StoredRef> r = ctx->Store(storage.view(), *header);
    if (!r.ok()) {
      throw DecodeError(absl::StrCat("cannot put a ", t.Describe(), " tensor into the store: ",
                                     r.status().message()));
    }
    if (ctx->collected != nullptr) ctx->collected->push_back(*r);
    pack_stored(*r);
  } else {
    pk.pack(0);
    pk.pack_bin(static_cast<uint32_t>(header->size()));
    pk.pack_bin_body(header->data(), static_cast<uint32_t>(header->size()));
    pk.pack_bin(static_cast<uint32_t>(storage.size()));
    pk.pack_bin_body(reinterpret_cast<const char*>(storage.data()), static_cast<uint32_t>(storage.size()));
  }
  return out;
}

Tensor DecodeTensorExt(const char* data, size_t size) {
  msgpack::object_handle h;
  if (absl::Status s = Unpack(absl::string_view(data, size), &h); !s.ok()) {
    throw DecodeError(absl::StrCat("a tensor value does not decode: ", s.message()));
  }
  const msgpack::object& o = h.get();
  if (o.type != msgpack::type::ARRAY || o.via.array.size != 4 ||
      o.via.array.ptr[0].type != msgpack::type::POSITIVE_INTEGER ||
      o.via.array.ptr[0].via.u64 != kVersion || o.via.array.ptr[2].type != msgpack::type::BIN) {
    throw DecodeError("a tensor value of an unknown layout (another drover version?)");
  }
  const msgpack::object& mode = o.via.array.ptr[1];
  const msgpack::object& hdr = o.via.array.ptr[2];
  const msgpack::object& body = o.via.array.ptr[3];
  absl::string_view header(hdr.via.bin.ptr, hdr.via.bin.size);
  Buffer storage;
  if (mode.type == msgpack::type::POSITIVE_INTEGER && mode.via.u64 == 0 &&
      body.type == msgpack::type::BIN) {
    const absl::string_view bytes(body.via.bin.ptr, body.via.bin.size);
    CodecContext* ctx = CodecContext::Current();
    storage = ctx != nullptr ? ctx->InlineBuffer(bytes) : Buffer::CopyOf(bytes);
  } else if (mode.type == msgpack::type::POSITIVE_INTEGER && mode.via.u64 == 1 &&
             body.type == msgpack::type::ARRAY && body.via.array.size == 3) {
    StoredRef r;
    try {
      r.object_id = body.via.array.ptr[0].as<std::string>();
      r.node_id = body.via.array.ptr[1].as<std::string>();
      r.size = body.via.array.ptr[2].as<uint64_t>();
    } catch (const std::exception&) {
      throw DecodeError("a tensor value names its store object badly");
    }
    CodecContext* ctx = CodecContext::Current();
    if (ctx == nullptr) {
      throw DecodeError(absl::StrCat("a tensor in store object ", r.object_id,
                                     " cannot be read: drover::Init was not called"));
    }
    absl::StatusOr<Buffer> b = ctx->LoadBuffer(r);
    if (!b.ok()) {
      throw DecodeError(absl::StrCat("the tensor in store object ", r.object_id, " (node ", r.node_id,
                                     ") is not available: ", b.status().message()));
    }
    storage = *std::move(b);
  } else {
    throw DecodeError("a tensor value of an unknown layout (another drover version?)");
  }
  absl::StatusOr<object_store::TensorMeta> meta = object_store::DecodeTensorHeader(header, storage.size());
  if (!meta.ok()) throw DecodeError(absl::StrCat("a tensor value's header is not valid: ", meta.status().message()));
  if (meta->byte_order != object_store::HostByteOrder()) {
    throw DecodeError("a tensor value is in another byte order than this machine's");
  }
  return TensorAccess::Make(*meta, std::move(storage));
}

}  // namespace drover::internal
