#include "sdk/runtime/context.h"

#include <map>

#include "absl/strings/str_cat.h"

namespace drover::internal {
namespace {

std::atomic<RuntimeContext*> current_context{nullptr};

}  // namespace

RuntimeContext* CurrentRuntimeContext() { return current_context.load(std::memory_order_acquire); }

void SetCurrentRuntimeContext(RuntimeContext* ctx) {
  current_context.store(ctx, std::memory_order_release);
}

std::string RuntimeContext::NewObjectId() {
  return absl::StrCat(job_id, ".", owner_tag, ".",
                      absl::Hex(next_id.fetch_add(1, std::memory_order_relaxed)));
}

void ResolveArguments(ObjectTable& objects, const std::shared_ptr<TaskRecord>& task,
                      std::function<void(absl::Status)> done) {
  for (size_t i = 0; i < task->args.size(); ++i) {
    if (!task->args[i].error.ok()) {
      done(absl::Status(task->args[i].error.code(),
                        absl::StrCat("argument ", i + 1, " of ", task->display, ": ",
                                     task->args[i].error.message())));
      return;
    }
  }
  struct Pending {
    std::atomic<int> left;
    std::function<void(absl::Status)> done;
  };
  std::vector<std::shared_ptr<RefState>> refs;
  std::vector<std::pair<size_t, std::weak_ptr<RefState>>> waits_on;
  for (size_t i = 0; i < task->args.size(); ++i) {
    if (!task->args[i].ref) continue;
    refs.push_back(task->args[i].ref);
    waits_on.emplace_back(i + 1, task->args[i].ref);
  }
  if (refs.empty()) {
    done(absl::OkStatus());
    return;
  }
  // So a Get of the result that times out says which argument it waits for, and why.
  if (task->result) objects.SetWaitsOn(task->result, task->display, std::move(waits_on));
  auto pending = std::make_shared<Pending>();
  pending->left = static_cast<int>(refs.size());
  pending->done = std::move(done);
  std::weak_ptr<TaskRecord> weak = task;
  for (const auto& ref : refs) {
    objects.WhenDone(ref, [&objects, pending, weak] {
      if (pending->left.fetch_sub(1) != 1) return;
      std::shared_ptr<TaskRecord> t = weak.lock();
      if (t == nullptr) return;
      for (size_t i = 0; i < t->args.size(); ++i) {
        if (!t->args[i].ref) continue;
        ObjectTable::Outcome o = objects.Read(t->args[i].ref);
        if (o.state == RefState::State::kFailed) {
          pending->done(absl::Status(
              o.error.code(), absl::StrCat("argument ", i + 1, " of ", t->display,
                                           " failed: ", o.error.message())));
          return;
        }
      }
      pending->done(absl::OkStatus());
    });
  }
}

namespace {

void AddStored(const StoredRef& r, google::protobuf::RepeatedPtrField<proto::StoredObject>* out) {
  proto::StoredObject* o = out->Add();
  o->set_object_id(r.object_id);
  o->set_node_id(r.node_id);
  o->set_size(r.size);
}

}  // namespace

absl::Status BuildTaskSpec(ObjectTable& objects, const TaskRecord& task, uint64_t seq, proto::TaskSpec* spec,
                           std::map<std::string, uint64_t>* bytes_per_node) {
  spec->set_seq(seq);
  spec->set_function(task.function);
  spec->set_return_id(task.return_id);
  if (task.display != task.function) spec->set_name(task.display);
  spec->set_attempt(task.attempt);
  for (const TaskArgument& a : task.args) {
    proto::TaskArg* arg = spec->add_args();
    if (!a.ref) {
      arg->set_value(a.value.bytes);
      for (const StoredRef& s : a.value.stored) {
        AddStored(s, spec->mutable_dependencies());
        if (bytes_per_node) (*bytes_per_node)[s.node_id] += s.size;
      }
      continue;
    }
    ObjectTable::Outcome o = objects.Read(a.ref);
    if (o.state != RefState::State::kReady) {
      return absl::FailedPreconditionError(
          absl::StrCat("an argument of ", task.display, " is not ready"));
    }
    if (o.value.stored) {
      proto::StoredObject* s = arg->mutable_stored();
      s->set_object_id(o.value.stored->object_id);
      s->set_node_id(o.value.stored->node_id);
      s->set_size(o.value.stored->size);
      if (bytes_per_node) (*bytes_per_node)[o.value.stored->node_id] += o.value.stored->size;
    } else if (o.value.inline_bytes) {
      arg->set_value(*o.value.inline_bytes);
    }
    for (const StoredRef& s : o.value.contained) {
      AddStored(s, spec->mutable_dependencies());
      if (bytes_per_node) (*bytes_per_node)[s.node_id] += s.size;
    }
  }
  return absl::OkStatus();
}

void ApplyReply(ObjectTable& objects, const std::shared_ptr<TaskRecord>& task, proto::TaskReply& reply, bool lineage) {
  std::shared_ptr<RefState> result = task->result;
  if (reply.code() != static_cast<int>(absl::StatusCode::kOk)) {
    // The worker's message already names the task and the node.
    objects.Fail(result,
                          absl::Status(static_cast<absl::StatusCode>(reply.code()), reply.message()));
    return;
  }
  ObjectValue v;
  if (reply.has_stored()) {
    v.stored = StoredRef{reply.stored().object_id(), reply.stored().node_id(), reply.stored().size()};
  } else {
    v.inline_bytes = std::make_shared<const std::string>(std::move(*reply.mutable_value()));
  }
  for (const proto::StoredObject& s : reply.contained()) {
    v.contained.push_back(StoredRef{s.object_id(), s.node_id(), s.size()});
  }
  if (lineage && (v.stored || !v.contained.empty())) {
    // The result keeps its task (and so the task's arguments) to make it again; the
    // task lets go of the result, so the two do not keep each other alive.
    objects.SetLineage(result, task);
    task->result.reset();
  }
  objects.Complete(result, std::move(v));
}

absl::Status TaskError(const TaskRecord& task, absl::StatusCode code, const std::string& what) {
  return absl::Status(code, absl::StrCat("task ", task.display, ": ", what));
}

}  // namespace drover::internal
