// The codec's functions that are not templates (drover/internal/codec.h): type names
// for errors, bounded unpacking, and the thread's codec context.
#include <cxxabi.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "drover/internal/codec.h"

namespace drover::internal {
namespace {

thread_local CodecContext* current_context = nullptr;
thread_local bool sealing_drafts = false;
std::atomic<CodecContext*> runtime_context{nullptr};

}  // namespace

std::string TypeName(const std::type_info& type) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(type.name(), nullptr, nullptr, &status);
  std::string name = status == 0 && demangled != nullptr ? demangled : type.name();
  std::free(demangled);
  // The standard library's inline namespace and default arguments say nothing useful.
  for (const char* noise : {"std::__cxx11::", ", std::allocator<char> ", ", std::char_traits<char>"}) {
    for (size_t at; (at = name.find(noise)) != std::string::npos;) {
      name.erase(at, std::strlen(noise));
      if (std::strcmp(noise, "std::__cxx11::") == 0) name.insert(at, "std::");
    }
  }
  return name;
}

std::string DescribeMsgpack(const msgpack::object& obj) {
  switch (obj.type) {
    case msgpack::type::NIL:
      return "nothing (nil)";
    case msgpack::type::BOOLEAN:
      return "a bool";
    case msgpack::type::POSITIVE_INTEGER:
    case msgpack::type::NEGATIVE_INTEGER:
      return "an integer";
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
      return "a floating-point number";
    case msgpack::type::STR:
      return "a string";
    case msgpack::type::BIN:
      return "binary data";
    case msgpack::type::ARRAY:
      return absl::StrCat("an array of ", obj.via.array.size);
    case msgpack::type::MAP:
      return absl::StrCat("a map of ", obj.via.map.size);
    case msgpack::type::EXT:
      return obj.via.ext.type() == 'T' ? "a tensor" : obj.via.ext.type() == 'R' ? "an object reference" : "an extension value";
  }
  return "an unknown value";
}

absl::Status Unpack(absl::string_view bytes, msgpack::object_handle* out) {
  // msgpack-c allocates an array's or map's elements when it reads the count, before
  // the elements: a 5-byte value claiming 2^32 elements would ask for ~100 GiB. Every
  // element takes at least one byte (a map entry two), so no count can exceed what
  // the bytes could hold.
  const size_t n = bytes.size();
  const msgpack::unpack_limit limit(/*array=*/n, /*map=*/n / 2, /*str=*/n, /*bin=*/n,
                                    /*ext=*/n);
  try {
    // Strings and binaries above 256 bytes point into `bytes` (the caller keeps them).
    *out = msgpack::unpack(
        bytes.data(), bytes.size(),
        [](msgpack::type::object_type, std::size_t n, void*) { return n > 256; }, nullptr,
        limit);
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("a value does not decode (", e.what(),
                                            "): it was not written by this program's drover"));
  }
  return absl::OkStatus();
}

CodecContext* CodecContext::Current() { return current_context; }

CodecContext* RuntimeCodecContext() { return runtime_context.load(std::memory_order_acquire); }

void SetRuntimeCodecContext(CodecContext* ctx) {
  runtime_context.store(ctx, std::memory_order_release);
}

CodecContext* DefaultCodecContext() {
  return current_context != nullptr ? current_context : RuntimeCodecContext();
}

SealDraftsScope::SealDraftsScope() : previous_(sealing_drafts) { sealing_drafts = true; }
SealDraftsScope::~SealDraftsScope() { sealing_drafts = previous_; }
bool SealDraftsScope::Active() { return sealing_drafts; }

ScopedCodecContext::ScopedCodecContext(CodecContext* ctx) : previous_(current_context) {
  current_context = ctx;
}

ScopedCodecContext::~ScopedCodecContext() { current_context = previous_; }

}  // namespace drover::internal
