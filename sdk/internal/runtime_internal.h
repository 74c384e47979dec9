// The task runtime's parts for code inside drover (benchmarks, tests): not for users.
#ifndef DROVER_SDK_INTERNAL_RUNTIME_INTERNAL_H_
#define DROVER_SDK_INTERNAL_RUNTIME_INTERNAL_H_

#include <string>

#include "object_store/client.h"

namespace drover::internal {

// This process's connection to its node's object store, or null (no runtime, or no
// store on this node). Valid until drover::Shutdown.
object_store::Client* LocalStore();
// A fresh object id of this process ("<job>.<owner>.<n>").
std::string NewObjectId();

}  // namespace drover::internal

#endif  // DROVER_SDK_INTERNAL_RUNTIME_INTERNAL_H_
