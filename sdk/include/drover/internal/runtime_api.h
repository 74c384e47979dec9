// Internal to the SDK's templates: the type-erased calls that drover::Task, Put, Get,
// Wait and Actor (task.h) make into the runtime (sdk/runtime/). Users need not include
// this.
#ifndef DROVER_SDK_INCLUDE_DROVER_INTERNAL_RUNTIME_API_H_
#define DROVER_SDK_INCLUDE_DROVER_INTERNAL_RUNTIME_API_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "drover/internal/codec.h"
#include "drover/types.h"

namespace drover {

namespace internal {

// The owner's (or a borrower's) handle on one object; shared by every copy of an
// ObjectRef. Defined by the runtime.
class RefState;
// A handle on an actor; shared by every copy of an ActorHandle. Defined by the runtime.
class ActorState;

// Options of one task, actor creation or actor call, as the builders collect them.
struct CallOptions {
  // Without SetResources: 1 CPU. With it: exactly what was given (a task that sets
  // only GPUs takes no CPU from the books).
  Resources resources = {1, 0, 0, {}};  // 1 CPU
  // Retries of a task whose worker died (not of errors the task raised itself).
  int max_retries = 3;
  // The actor's restarts after its worker died.
  int max_restarts = 0;
  std::string name;
  // Node affinity: run there only (soft = false) or preferably.
  std::string node_id;
  bool soft_affinity = false;
  // Spread tasks of this shape over nodes instead of packing them.
  bool spread = false;
};

// One argument: a reference resolved before the call (ref != null), or a value.
struct TaskArgument {
  std::shared_ptr<RefState> ref;
  EncodedValue value;
  // Encoding failed: the call fails with this before anything is sent.
  absl::Status error;
};

// Submits a task of the function whose FunctionKey is `key`. Never fails itself: an
// error (not initialized, function not registered, bad argument) makes the returned
// reference fail when it is read.
std::shared_ptr<RefState> SubmitTask(const std::string& key, const CallOptions& options,
                                     std::vector<TaskArgument> args);
// Puts an encoded value; the reference is ready at once.
std::shared_ptr<RefState> PutValue(EncodedValue value);
std::shared_ptr<RefState> FailedRef(absl::Status status);

// Waits up to `timeout` for the object and returns its encoded bytes (zero copy where
// they sit in this node's store).
absl::StatusOr<ValueView> GetValue(const std::shared_ptr<RefState>& ref, absl::Duration timeout);
// The indices of up to `num_ready` ready (or failed) objects, in completion order,
// waiting up to `timeout` for that many.
std::vector<size_t> WaitRefs(const std::vector<std::shared_ptr<RefState>>& refs, int num_ready,
                             absl::Duration timeout);
absl::Status CancelRef(const std::shared_ptr<RefState>& ref, bool force);
const std::string& RefId(const RefState& ref);

// Actors.
std::shared_ptr<ActorState> CreateActor(const std::string& factory_key, const CallOptions& options,
                                        std::vector<TaskArgument> args);
std::shared_ptr<RefState> SubmitActorTask(const std::shared_ptr<ActorState>& actor,
                                          const std::string& method_key,
                                          const CallOptions& options,
                                          std::vector<TaskArgument> args);
absl::StatusOr<std::shared_ptr<ActorState>> LookupActor(const std::string& name,
                                                        absl::Duration timeout);
std::shared_ptr<ActorState> ActorFromId(const std::string& actor_id);
const std::string& ActorId(const ActorState& actor);
absl::Status KillActor(const std::shared_ptr<ActorState>& actor);
// Waits up to `timeout` for the actor to be created: OK when ALIVE, the cause when dead.
absl::Status WaitActorReady(const std::shared_ptr<ActorState>& actor, absl::Duration timeout);
// Waits up to `timeout` for the actor to be dead: why it died, or DEADLINE_EXCEEDED.
absl::Status WaitActorDead(const std::shared_ptr<ActorState>& actor, absl::Duration timeout);

}  // namespace internal
}  // namespace drover

#endif  // DROVER_SDK_INCLUDE_DROVER_INTERNAL_RUNTIME_API_H_
