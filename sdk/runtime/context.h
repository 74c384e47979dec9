// What every part of the task runtime shares: who this process is, how to reach the
// scheduler and the stores, and the record of a task as its owner keeps it.
#ifndef DROVER_SDK_RUNTIME_CONTEXT_H_
#define DROVER_SDK_RUNTIME_CONTEXT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/tls.h"
#include "drover/internal/registry.h"
#include "drover/internal/runtime_api.h"
#include "proto/lease.grpc.pb.h"
#include "proto/task.pb.h"
#include "sdk/runtime/object_table.h"
#include "sdk/runtime/store_access.h"

namespace drover::internal {

struct RuntimeContext {
  std::string token;
  std::string job_id;
  // "<job>/<pid>@<node>": the owner as logs and the scheduler show it.
  std::string owner;
  // 8 hex characters unique to this process, the prefix of its object and task ids.
  std::string owner_tag;
  std::string node_id;
  // This node's address (workers on this node are reached by Unix socket).
  std::string node_ip;
  std::string scheduler_address;
  // How this process's connections are secured (also the process's transport).
  std::shared_ptr<const TransportSecurity> transport;
  std::unique_ptr<proto::Leases::Stub> leases;
  std::unique_ptr<StoreAccess> store;
  // The binary workers run (this one).
  proto::PackageRef package;

  std::atomic<uint64_t> next_id{1};
  // A fresh object id: "<job>.<owner_tag>.<n>" (fits the store's 64-byte ids). The job
  // prefix lets the scheduler delete every object of a job when it ends.
  std::string NewObjectId();
};

// The context of the initialized runtime, or null (before Init, after Shutdown). For
// the entry points of the public API (Queue::Create, Tensor stores, ...), which take no
// context; the cores (TaskSubmitter, ActorClient, ObjectTable) take what they need as
// arguments instead.
RuntimeContext* CurrentRuntimeContext();
// Set by drover::Init and cleared by drover::Shutdown (runtime.cc, the one place that
// wires the process's runtime); nothing else sets it.
void SetCurrentRuntimeContext(RuntimeContext* ctx);

// A task (or actor call, or actor creation) as its owner keeps it until it is done.
struct TaskRecord {
  // The registered function and the name shown in errors.
  std::string function;
  std::string display;
  CallOptions options;
  std::vector<TaskArgument> args;
  // The result. Strong until the task is done (so it completes even if the caller
  // dropped every ref), then dropped: the result keeps the task as its lineage.
  std::shared_ptr<RefState> result;
  std::string return_id;
  int attempt = 0;
  int retries_left = 0;
  // Set by Cancel; a cancelled task is never sent again.
  bool cancelled = false;
  // Encoded size of the arguments (bounds the bytes in flight per worker).
  size_t wire_bytes = 0;
};

// Calls `done` once every reference argument of `task` is done: OK, or the first
// argument's error (naming the argument). `done` runs on the completing thread.
// `objects` (the table the task's refs live in) outlives the wait.
void ResolveArguments(ObjectTable& objects, const std::shared_ptr<TaskRecord>& task,
                      std::function<void(absl::Status)> done);

// The wire form of a task whose arguments are resolved.
absl::Status BuildTaskSpec(ObjectTable& objects, const TaskRecord& task, uint64_t seq, proto::TaskSpec* spec,
                           std::map<std::string, uint64_t>* bytes_per_node = nullptr);

// What a TaskReply makes of the result object: its value, or an error naming the task
// and the node. With `lineage`, a result kept in a store remembers the task that made
// it, to make it again if the store's node is lost (see ObjectTable::SetLineage).
void ApplyReply(ObjectTable& objects, const std::shared_ptr<TaskRecord>& task, proto::TaskReply& reply, bool lineage);

// An error naming the task, for failures outside its code (a worker died, a node was
// lost, it was cancelled).
absl::Status TaskError(const TaskRecord& task, absl::StatusCode code, const std::string& what);

}  // namespace drover::internal

#endif  // DROVER_SDK_RUNTIME_CONTEXT_H_
