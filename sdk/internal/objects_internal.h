// What code inside drover (sdk/tensor_collectives.cc, the task layer, tests) may reach
// of a drover::Objects beyond its public API: this node's store client (Create/Seal
// without a copy, Contains, Stats, ...) and Get returning the store's own reference.
// Not part of the public SDK.
//
// Ownership: the Objects keeps the client; references to it are valid while the
// Objects lives. Thread safety: as Objects and object_store::Client (thread-safe).
#ifndef DROVER_SDK_INTERNAL_OBJECTS_INTERNAL_H_
#define DROVER_SDK_INTERNAL_OBJECTS_INTERNAL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/progress_line.h"
#include "object_store/client.h"
#include "sdk/internal/pull_progress.h"

namespace drover {

class Objects;

namespace internal {

struct ObjectsAccess {
  // This node's store client.
  static object_store::Client& Store(Objects& objects);
  // Objects::Get (this node, else pulled by the agent, waiting up to `timeout`),
  // returning the pinned reference itself.
  static absl::StatusOr<object_store::ObjectRef> Get(Objects& objects, const std::string& id,
                                                     absl::Duration timeout);
  // Long pulls' bars go to `line` (null: none), timed by `clock`, instead of to a
  // terminal on stderr. For tests. REQUIRES: no Get is running.
  static void ShowPullProgress(Objects& objects, std::unique_ptr<ProgressLine> line,
                               Clock* clock, PullProgressOptions options);
};

}  // namespace internal
}  // namespace drover

#endif  // DROVER_SDK_INTERNAL_OBJECTS_INTERNAL_H_
