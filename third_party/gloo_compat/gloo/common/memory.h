// Stand-in for gloo/common/memory.h, which Debian's libgloo-dev (0.0~git20220518)
// does not ship although gloo/transport/tcp/pair.h includes it.
//
// drover includes tcp/pair.h only to call tcp::Pair::signalExceptionExternal (an
// out-of-line member of libgloo) through a pointer to a pair libgloo created, when a
// group is aborted (collective/gloo_group.cc). Nothing here is ever constructed by our
// code: these declarations only let the header parse. Do not use them for anything else.
#ifndef DROVER_THIRD_PARTY_GLOO_COMPAT_GLOO_COMMON_MEMORY_H_
#define DROVER_THIRD_PARTY_GLOO_COMPAT_GLOO_COMMON_MEMORY_H_

namespace gloo {

template <typename T>
class NonOwningPtr {
 public:
  T* get() const { return ptr_; }
  T* operator->() const { return ptr_; }
  explicit operator bool() const { return ptr_ != nullptr; }

 private:
  T* ptr_ = nullptr;
};

template <typename T>
class ShareableNonOwningPtr {};

template <typename T>
class WeakNonOwningPtr {
 public:
  WeakNonOwningPtr() = default;
  explicit WeakNonOwningPtr(const ShareableNonOwningPtr<T>&) {}
  NonOwningPtr<T> lock() const { return NonOwningPtr<T>(); }
};

}  // namespace gloo

#endif  // DROVER_THIRD_PARTY_GLOO_COMPAT_GLOO_COMMON_MEMORY_H_
