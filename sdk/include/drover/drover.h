// The drover SDK in one include: tasks and actors (drover/task.h), jobs and the cluster
// (Client), the object store (Objects), Buffers and Tensors, collective groups and
// collectives on tensors.
// Link //sdk:drover. Each header says what it is for, who owns what and its thread
// safety.
//
// Errors: a call that can fail returns absl::Status or absl::StatusOr, with one
// deliberate difference: the calls that return a future at once (drover::Put,
// TaskCaller/ActorTaskCaller::Remote, ActorCreator::Remote) never fail themselves.
// Their errors (a value that does not encode or that the store refuses, a function not
// registered with DROVER_REMOTE, no drover::Init, then the task's own failure) travel
// in the future: drover::Get of the ObjectRef returns them (for an actor:
// ActorHandle::WaitReady and its calls' Get). Errors never reach the caller as
// exceptions (only std::bad_alloc, as from the standard library).
//
// Language: the headers are C++17 (checked with -std=c++17 -pedantic-errors by
// //sdk:public_headers_cxx17_test). They need exceptions enabled (no -fno-exceptions):
// msgpack and the adaptors here throw internally; drover catches them and returns a
// Status. A remote function may throw: its exception's text becomes the task's error.
#ifndef DROVER_SDK_INCLUDE_DROVER_DROVER_H_
#define DROVER_SDK_INCLUDE_DROVER_DROVER_H_

#include "drover/client.h"              // IWYU pragma: export
#include "drover/collective.h"          // IWYU pragma: export
#include "drover/data_loader.h"         // IWYU pragma: export
#include "drover/json.h"                // IWYU pragma: export
#include "drover/objects.h"             // IWYU pragma: export
#include "drover/queue.h"               // IWYU pragma: export
#include "drover/shared_tensor.h"       // IWYU pragma: export
#include "drover/task.h"                // IWYU pragma: export
#include "drover/tensor.h"              // IWYU pragma: export
#include "drover/tensor_collectives.h"  // IWYU pragma: export
#include "drover/types.h"               // IWYU pragma: export

#endif  // DROVER_SDK_INCLUDE_DROVER_DROVER_H_
