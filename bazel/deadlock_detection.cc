// Linked into every test binary (through @system//:gtest_main, bazel/system_libs.bzl):
// absl's lock-order checker aborts the test, naming both mutexes and their stacks, on
// the first acquisition that closes a cycle in the order locks were ever taken,
// including a thread taking a mutex it already holds. A lock-order inversion then fails
// the test that exercises it instead of hanging a daemon in production.
//
// Note: absl only checks in a build of the library without NDEBUG (Debian's is one,
// where the check is also on by default); elsewhere this call does nothing.
#include "absl/synchronization/mutex.h"

namespace drover {
namespace {

const bool kDeadlockDetection = [] {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kAbort);
  return true;
}();

}  // namespace
}  // namespace drover
