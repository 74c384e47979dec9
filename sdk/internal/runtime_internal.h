// The task runtime's parts for code inside drover (benchmarks, tests): not for users.
#ifndef DROVER_SDK_INTERNAL_RUNTIME_INTERNAL_H_
#define DROVER_SDK_INTERNAL_RUNTIME_INTERNAL_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "drover/internal/codec.h"
#include "object_store/client.h"

namespace drover::internal {

// This process's connection to its node's object store, or null (no runtime, or no
// store on this node). Valid until drover::Shutdown.
object_store::Client* LocalStore();
// A fresh object id of this process ("<job>.<owner>.<n>").
std::string NewObjectId();
// Object `id` of this cluster, pinned in this node's store (pulled here first if it is
// on another node), waiting up to `timeout` for it to appear. FAILED_PRECONDITION
// without drover::Init; NOT_FOUND at once, not after the timeout, for an id the runtime
// made ("<job>.<owner>.<n>") whose job this cluster never ran (an object of another
// cluster) or that has ended (its objects were freed); DEADLINE_EXCEEDED naming the
// object otherwise. For the Python module's get_tensor.
absl::StatusOr<object_store::ObjectRef> GetObject(const std::string& id, absl::Duration timeout);

// Objects an encoded value stored (EncodedValue::stored) that will not be sent after all:
// tensors that handed theirs over own them again, the others are deleted. For the
// Python module's puts that fail while encoding.
void ReturnOrDeleteStored(const std::vector<StoredRef>& objects);

}  // namespace drover::internal

#endif  // DROVER_SDK_INTERNAL_RUNTIME_INTERNAL_H_
