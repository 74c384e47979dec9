// The drover SDK in one include: tasks and actors (drover/task.h), jobs and the cluster
// (Client), the object store (Objects), Buffers and Tensors, collective groups and
// collectives on tensors.
// Link //sdk:drover. Each header says what it is for, who owns what and its thread
// safety; every call that can fail returns absl::Status or absl::StatusOr.
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
