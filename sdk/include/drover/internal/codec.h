// Internal to the SDK's templates: how task arguments and results are encoded. Users
// need not include this; sdk/include/drover/task.h does.
//
// Values are msgpack (msgpack-c++, Debian's libmsgpack-cxx-dev). Any type msgpack can
// pack works as an argument or result: numbers, strings, std::vector, std::map,
// std::tuple, std::optional, and your own structs with MSGPACK_DEFINE(field, ...).
// Tensors (drover::Tensor) and references (drover::ObjectRef) get msgpack extensions
// of their own (the tensor's below, the reference's in task.h), so a tensor's bytes are
// never packed element by element: large ones go into the node's object store once and
// only their id travels.
#ifndef DROVER_SDK_INCLUDE_DROVER_INTERNAL_CODEC_H_
#define DROVER_SDK_INCLUDE_DROVER_INTERNAL_CODEC_H_

#ifndef MSGPACK_NO_BOOST
#define MSGPACK_NO_BOOST
#endif

#include <cstdint>
#include <memory>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include <msgpack.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "drover/tensor.h"

namespace drover::internal {

// A store object a value refers to (a tensor put into the store while encoding).
struct StoredRef {
  std::string object_id;
  std::string node_id;
  uint64_t size = 0;
};

// An encoded value: msgpack bytes, the store objects it put there (owned by the value:
// deleted when it is released), and what must stay pinned while the value is in use
// (tensors of this node's store that it refers to without a copy).
struct EncodedValue {
  std::string bytes;
  std::vector<StoredRef> stored;
  std::vector<std::shared_ptr<const void>> keepalive;
};

// Bytes of an encoded value to decode, kept alive by `keepalive` (an owned string or a
// pinned store object) for as long as anything decoded from it may point into it.
struct ValueView {
  absl::string_view bytes;
  std::shared_ptr<const void> keepalive;
};

// Thrown inside decoding (and caught by Decode / the worker's invoker) when a value does
// not have the type the receiving code declares.
class DecodeError : public std::exception {
 public:
  explicit DecodeError(std::string what) : what_(std::move(what)) {}
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  std::string what_;
};

// The readable name of a C++ type ("std::vector<float>", "Model").
std::string TypeName(const std::type_info& type);
// What a msgpack object holds, in words ("a string", "an integer", "an array of 3").
std::string DescribeMsgpack(const msgpack::object& obj);

// Hooks the runtime installs while it encodes or decodes, so that the adaptors of
// Tensor and ObjectRef can reach the object store. Null outside a runtime call.
class CodecContext {
 public:
  virtual ~CodecContext() = default;
  // Encoding: called for each value that must live in the store (a large tensor):
  // puts it and returns where it is.
  virtual absl::StatusOr<StoredRef> Store(absl::string_view data, absl::string_view metadata) = 0;
  // Decoding: the bytes of a store object (zero copy where it is in this node's store).
  virtual absl::StatusOr<ValueView> Load(const StoredRef& ref) = 0;
  // Decoding: the data of a store object as a Buffer pinning it (zero copy).
  virtual absl::StatusOr<Buffer> LoadBuffer(const StoredRef& ref) = 0;
  // Decoding: the storage of a tensor that travelled inline (a copy of `bytes`; a
  // context may put it into the store instead, see DataLoader's pin_memory).
  virtual Buffer InlineBuffer(absl::string_view bytes) { return Buffer::CopyOf(bytes); }
  // This node's id (tensors already in this node's store are referred to by id).
  virtual std::string node_id() = 0;
  // The context of this thread (set by ScopedCodecContext).
  static CodecContext* Current();
  // Encoding collects here the store objects it put, and what it must keep pinned.
  std::vector<StoredRef>* collected = nullptr;
  std::vector<std::shared_ptr<const void>>* keepalive = nullptr;
};

class ScopedCodecContext {
 public:
  explicit ScopedCodecContext(CodecContext* ctx);
  ~ScopedCodecContext();
  ScopedCodecContext(const ScopedCodecContext&) = delete;
  ScopedCodecContext& operator=(const ScopedCodecContext&) = delete;

 private:
  CodecContext* previous_;
};

// The runtime's codec context while a runtime is initialized, else null (values are
// then encoded inline). The runtime installs it at Init and removes it at Shutdown
// (SetRuntimeCodecContext), so the codec does not reach up into the runtime.
CodecContext* RuntimeCodecContext();
void SetRuntimeCodecContext(CodecContext* ctx);

// This thread's context (set by ScopedCodecContext), else the runtime's (large tensors
// go into this node's store), else null. Encode and Decode have no implicit context:
// code that stores or loads on behalf of the calling thread passes this one by name;
// code that encodes plain values (no tensors) passes null.
CodecContext* DefaultCodecContext();

// Encodes `value` with `ctx`: large tensors inside it are put into the store through
// `ctx` and listed in `stored`. With a null `ctx` everything is encoded inline.
template <typename T>
absl::StatusOr<EncodedValue> Encode(const T& value, CodecContext* ctx) {
  EncodedValue out;
  ScopedCodecContext scope(ctx);
  std::vector<StoredRef>* saved = nullptr;
  std::vector<std::shared_ptr<const void>>* saved_keep = nullptr;
  if (ctx != nullptr) {
    saved = ctx->collected;
    saved_keep = ctx->keepalive;
    ctx->collected = &out.stored;
    ctx->keepalive = &out.keepalive;
  }
  struct StringWriter {
    std::string* s;
    void write(const char* data, size_t n) { s->append(data, n); }
  } writer{&out.bytes};
  absl::Status status;
  try {
    msgpack::pack(writer, value);
  } catch (const DecodeError& e) {
    status = absl::InvalidArgumentError(e.what());
  } catch (const std::exception& e) {
    status = absl::InvalidArgumentError(
        std::string("cannot encode a value of type ") + TypeName(typeid(T)) + ": " + e.what());
  }
  if (ctx != nullptr) {
    ctx->collected = saved;
    ctx->keepalive = saved_keep;
  }
  if (!status.ok()) return status;
  return out;
}

// While one lives on this thread, tensors being encoded whose storage is an unsealed
// store object of this worker (a "draft", sdk/runtime/store_draft.h) are sealed in place
// rather than copied: set around the encoding of a task's result.
class SealDraftsScope {
 public:
  SealDraftsScope();
  ~SealDraftsScope();
  SealDraftsScope(const SealDraftsScope&) = delete;
  SealDraftsScope& operator=(const SealDraftsScope&) = delete;
  static bool Active();

 private:
  bool previous_;
};

// A tensor as a msgpack extension (type 'T'): its header, and its bytes inline (small
// tensors, or without a runtime) or the store object holding them. Throw DecodeError.
std::string EncodeTensorExt(const Tensor& t);
Tensor DecodeTensorExt(const char* data, size_t size);
inline constexpr int8_t kTensorExtType = 'T';

// Unpacks msgpack bytes into an object handle. Large strings and binaries point into
// `bytes` instead of being copied (keep `bytes` alive while the object is used).
absl::Status Unpack(absl::string_view bytes, msgpack::object_handle* out);

// Converts a msgpack object to T, or a DecodeError naming both types.
template <typename T>
T ConvertOrThrow(const msgpack::object& obj) {
  try {
    return obj.as<T>();
  } catch (const DecodeError&) {
    throw;
  } catch (const std::exception&) {
    throw DecodeError("expected " + TypeName(typeid(T)) + ", got " + DescribeMsgpack(obj));
  }
}

// Decodes a T from `view`, reading store objects it refers to through `ctx` (null:
// none can be read). INVALID_ARGUMENT (naming the types) if it holds another type.
template <typename T>
absl::StatusOr<T> Decode(const ValueView& view, CodecContext* ctx) {
  msgpack::object_handle handle;
  if (absl::Status s = Unpack(view.bytes, &handle); !s.ok()) return s;
  ScopedCodecContext scope(ctx);
  try {
    return ConvertOrThrow<T>(handle.get());
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(e.what());
  }
}

}  // namespace drover::internal

#endif  // DROVER_SDK_INCLUDE_DROVER_INTERNAL_CODEC_H_
