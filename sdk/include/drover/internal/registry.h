// Internal to the SDK's templates: the registry of remote functions that DROVER_REMOTE
// fills, and the type-erased invokers a worker calls. Users need not include this.
//
// Every process of the user's binary registers the same functions under the same names
// at static initialization, so a caller sends a function's NAME and the worker (the
// same binary, checked by build id) finds it. The caller finds the name from the
// function's address (or a member function pointer's bytes) in its own process.
#ifndef DROVER_SDK_INCLUDE_DROVER_INTERNAL_REGISTRY_H_
#define DROVER_SDK_INCLUDE_DROVER_INTERNAL_REGISTRY_H_

#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "drover/internal/codec.h"

namespace drover::internal {

// The arguments of one call, unpacked.
class ArgList {
 public:
  virtual ~ArgList() = default;
  virtual size_t size() const = 0;
  virtual const msgpack::object& at(size_t i) const = 0;
};

// What an invoker produced: the encoded result, or an error. `user_error` marks errors
// raised by the user's code (an exception, a returned error status): those are not
// retried; other errors (arguments that do not decode) are the caller's.
struct InvokeResult {
  absl::Status status;
  bool user_error = false;
  EncodedValue value;
};

enum class FunctionKind { kFunction, kFactory, kMethod };

struct FunctionInfo {
  std::string name;
  FunctionKind kind = FunctionKind::kFunction;
  int arity = 0;
  // Functions and methods: calls the function with `args` (on `self`, for methods).
  std::function<InvokeResult(void* self, const ArgList& args)> invoke;
  // Factories: makes the object; `deleter` frees it.
  std::function<absl::StatusOr<void*>(const ArgList& args, bool* user_error)> create;
  void (*deleter)(void*) = nullptr;
  // The class a factory makes or a method belongs to.
  const std::type_info* cls = nullptr;
};

// The key of a function in its own process: its address, or a member function
// pointer's bytes.
template <typename F>
std::string FunctionKey(F f) {
  static_assert(std::is_trivially_copyable_v<F>, "not a function or member function pointer");
  std::string key(sizeof(F) + 1, '\0');
  key[0] = std::is_member_function_pointer_v<F> ? 'm' : 'f';
  std::memcpy(&key[1], &f, sizeof(F));
  return key;
}

void RegisterFunction(const std::string& key, FunctionInfo info);
// Null if not registered.
const FunctionInfo* FindFunctionByName(const std::string& name);
const FunctionInfo* FindFunctionByKey(const std::string& key);
// A description of an unregistered function for error messages: its symbol if the
// binary exports one, else its address.
std::string DescribeUnregistered(const std::string& key);
// Splits DROVER_REMOTE's stringized argument list into names ("&Model::Predict" ->
// "Model::Predict").
std::vector<std::string> SplitRemoteNames(const char* list);

// ---- invokers ----

template <typename T>
struct RemoteResult {
  using type = T;
};
template <typename T>
struct RemoteResult<absl::StatusOr<T>> {
  using type = T;
};
template <>
struct RemoteResult<absl::Status> {
  using type = void;
};

template <typename T>
void DecodeArgInto(const ArgList& args, size_t i, const std::string& fname,
                   std::optional<T>* out) {
  try {
    out->emplace(ConvertOrThrow<T>(args.at(i)));
  } catch (const std::exception& e) {
    throw DecodeError("argument " + std::to_string(i + 1) + " of " + fname + ": " + e.what());
  }
}

// Turns what the user's function returned into an InvokeResult.
template <typename R>
InvokeResult MakeResult(R&& r) {
  InvokeResult out;
  SealDraftsScope result_encoding;  // a large tensor made by the task is sealed, not copied
  using D = std::decay_t<R>;
  if constexpr (std::is_same_v<D, absl::Status>) {
    if (!r.ok()) {
      out.status = r;
      out.user_error = true;
      return out;
    }
    auto enc = Encode(msgpack::type::nil_t(), /*ctx=*/nullptr);
    out.value = std::move(*enc);
  } else {
    if constexpr (!std::is_same_v<typename RemoteResult<D>::type, D>) {  // StatusOr
      if (!r.ok()) {
        out.status = r.status();
        out.user_error = true;
        return out;
      }
      auto enc = Encode(*r, DefaultCodecContext());
      if (!enc.ok()) {
        out.status = enc.status();
        out.user_error = true;
      } else {
        out.value = std::move(*enc);
      }
    } else {
      auto enc = Encode(r, DefaultCodecContext());
      if (!enc.ok()) {
        out.status = enc.status();
        out.user_error = true;
      } else {
        out.value = std::move(*enc);
      }
    }
  }
  return out;
}

// Decodes the arguments as P... and calls `call` with them. P... is given explicitly.
template <typename... P, typename Fn, size_t... I>
InvokeResult InvokeWithArgs(Fn&& call, const ArgList& args, const std::string& fname,
                            std::index_sequence<I...>) {
  InvokeResult out;
  if (args.size() != sizeof...(P)) {
    out.status = absl::InvalidArgumentError(fname + " takes " + std::to_string(sizeof...(P)) +
                                            " arguments, got " + std::to_string(args.size()));
    return out;
  }
  std::tuple<std::optional<std::decay_t<P>>...> vals;
  try {
    (DecodeArgInto<std::decay_t<P>>(args, I, fname, &std::get<I>(vals)), ...);
  } catch (const std::exception& e) {
    out.status = absl::InvalidArgumentError(e.what());
    return out;
  }
  using R = decltype(call(static_cast<P&&>(*std::get<I>(vals))...));
  if constexpr (std::is_void_v<R>) {
    call(static_cast<P&&>(*std::get<I>(vals))...);
    return MakeResult(absl::OkStatus());
  } else {
    return MakeResult(call(static_cast<P&&>(*std::get<I>(vals))...));
  }
}

template <typename R, typename... P>
void Register(const std::string& name, R (*f)(P...)) {
  FunctionInfo info;
  info.name = name;
  info.arity = sizeof...(P);
  if constexpr (std::is_pointer_v<R> && std::is_class_v<std::remove_pointer_t<R>>) {
    using T = std::remove_pointer_t<R>;
    info.kind = FunctionKind::kFactory;
    info.cls = &typeid(T);
    info.deleter = [](void* p) { delete static_cast<T*>(p); };
    info.create = [f, name](const ArgList& args, bool* user_error) -> absl::StatusOr<void*> {
      T* made = nullptr;
      InvokeResult r = InvokeWithArgs<P...>(
          [&](auto&&... a) -> absl::Status {
            made = f(std::forward<decltype(a)>(a)...);
            return absl::OkStatus();
          },
          args, name, std::index_sequence_for<P...>());
      if (!r.status.ok()) {
        *user_error = r.user_error;
        return r.status;
      }
      if (made == nullptr) {
        *user_error = true;
        return absl::FailedPreconditionError(name + " returned null");
      }
      return static_cast<void*>(made);
    };
  } else {
    info.invoke = [f, name](void*, const ArgList& args) {
      return InvokeWithArgs<P...>(
          [f](auto&&... a) -> decltype(auto) { return f(std::forward<decltype(a)>(a)...); }, args,
          name, std::index_sequence_for<P...>());
    };
  }
  RegisterFunction(FunctionKey(f), std::move(info));
}

template <typename T, typename M, typename R, typename... P>
void RegisterMethod(const std::string& name, M m) {
  FunctionInfo info;
  info.name = name;
  info.kind = FunctionKind::kMethod;
  info.arity = sizeof...(P);
  info.cls = &typeid(T);
  info.invoke = [m, name](void* self, const ArgList& args) {
    T* obj = static_cast<T*>(self);
    return InvokeWithArgs<P...>(
        [obj, m](auto&&... a) -> decltype(auto) { return (obj->*m)(std::forward<decltype(a)>(a)...); },
        args, name, std::index_sequence_for<P...>());
  };
  RegisterFunction(FunctionKey(m), std::move(info));
}

template <typename R, typename T, typename... P>
void Register(const std::string& name, R (T::*m)(P...)) {
  RegisterMethod<T, decltype(m), R, P...>(name, m);
}
template <typename R, typename T, typename... P>
void Register(const std::string& name, R (T::*m)(P...) const) {
  RegisterMethod<T, decltype(m), R, P...>(name, m);
}

template <typename... Fs>
bool RegisterAll(const char* names, Fs... fs) {
  std::vector<std::string> split = SplitRemoteNames(names);
  size_t i = 0;
  (Register(split.at(i++), fs), ...);
  return true;
}

}  // namespace drover::internal

#define DROVER_REMOTE_CONCAT_INNER_(a, b) a##b
#define DROVER_REMOTE_CONCAT_(a, b) DROVER_REMOTE_CONCAT_INNER_(a, b)

// Registers remote functions, actor factories and actor methods, at namespace scope:
//   DROVER_REMOTE(Normalize, Sum, MakeModel, &Model::Predict);
// A function is found in every process of the binary by the name written here.
#define DROVER_REMOTE(...)                                                         \
  [[maybe_unused]] static const bool DROVER_REMOTE_CONCAT_(drover_remote_, __LINE__) = \
      ::drover::internal::RegisterAll(#__VA_ARGS__, __VA_ARGS__)

#endif  // DROVER_SDK_INCLUDE_DROVER_INTERNAL_REGISTRY_H_
