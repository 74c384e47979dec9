// The registry of remote functions (DROVER_REMOTE) and the codec's helpers.
#include <cxxabi.h>
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "drover/internal/codec.h"
#include "drover/internal/registry.h"

namespace drover::internal {
namespace {

struct Registry {
  std::mutex mu;
  std::unordered_map<std::string, FunctionInfo> by_key;
  std::unordered_map<std::string, const FunctionInfo*> by_name;
};

Registry& TheRegistry() {
  static Registry* r = new Registry();
  return *r;
}

thread_local CodecContext* current_context = nullptr;
thread_local bool sealing_drafts = false;

}  // namespace

void RegisterFunction(const std::string& key, FunctionInfo info) {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> l(r.mu);
  std::string name = info.name;
  auto [it, inserted] = r.by_key.emplace(key, std::move(info));
  if (!inserted) return;  // registered twice (the same macro in two translation units)
  auto [nit, fresh] = r.by_name.emplace(name, &it->second);
  if (!fresh && nit->second != &it->second) {
    // Two different functions under one name: calls by name would be ambiguous.
    std::fprintf(stderr,
                 "drover: two different functions are registered as '%s' (DROVER_REMOTE); "
                 "rename one of them\n",
                 name.c_str());
    std::abort();
  }
}

const FunctionInfo* FindFunctionByName(const std::string& name) {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> l(r.mu);
  auto it = r.by_name.find(name);
  return it == r.by_name.end() ? nullptr : it->second;
}

const FunctionInfo* FindFunctionByKey(const std::string& key) {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> l(r.mu);
  auto it = r.by_key.find(key);
  return it == r.by_key.end() ? nullptr : &it->second;
}

std::string DescribeUnregistered(const std::string& key) {
  if (key.size() == 1 + sizeof(void*) && key[0] == 'f') {
    void* addr = nullptr;
    std::memcpy(&addr, key.data() + 1, sizeof(addr));
    Dl_info info;
    if (::dladdr(addr, &info) != 0 && info.dli_sname != nullptr) {
      int status = 0;
      char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
      std::string name = status == 0 && demangled != nullptr ? demangled : info.dli_sname;
      std::free(demangled);
      return "function " + name;
    }
    return absl::StrCat("the function at ", absl::Hex(reinterpret_cast<uintptr_t>(addr)));
  }
  return key[0] == 'm' ? "a member function (method)" : "a function";
}

std::vector<std::string> SplitRemoteNames(const char* list) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(list, ',')) {
    part = absl::StripAsciiWhitespace(part);
    absl::ConsumePrefix(&part, "&");
    part = absl::StripAsciiWhitespace(part);
    absl::ConsumePrefix(&part, "::");
    out.emplace_back(part);
  }
  return out;
}

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
  // the elements: a 5-byte value claiming 2^32 elements asked for ~100 GiB (found by
  // //fuzz:task_values). Every element takes at least one byte (a map entry two), so
  // no count can exceed what the bytes could hold.
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

SealDraftsScope::SealDraftsScope() : previous_(sealing_drafts) { sealing_drafts = true; }
SealDraftsScope::~SealDraftsScope() { sealing_drafts = previous_; }
bool SealDraftsScope::Active() { return sealing_drafts; }

ScopedCodecContext::ScopedCodecContext(CodecContext* ctx) : previous_(current_context) {
  current_context = ctx;
}

ScopedCodecContext::~ScopedCodecContext() { current_context = previous_; }

}  // namespace drover::internal
