// The registry of remote functions (DROVER_REMOTE).
#include <cxxabi.h>
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
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

}  // namespace drover::internal
