#include "sdk/runtime/store_access.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/rpc.h"
#include "common/status.h"

namespace drover::internal {
namespace {

// How long a read of an object made on this node waits for it to be sealed.
constexpr absl::Duration kLocalSealWait = absl::Seconds(2);

std::chrono::milliseconds Until(absl::Time deadline) {
  absl::Duration d = deadline - absl::Now();
  if (d < absl::Milliseconds(1)) d = absl::Milliseconds(1);
  if (d > absl::Hours(24)) d = absl::Hours(24);
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

}  // namespace

StoreAccess::StoreAccess(std::unique_ptr<object_store::Client> store, std::string node_id,
                         std::string agent_address, std::string token)
    : store_(std::move(store)),
      node_id_(std::move(node_id)),
      agent_address_(std::move(agent_address)),
      token_(std::move(token)) {
  if (!agent_address_.empty()) {
    transfer_ = proto::ObjectTransfer::NewStub(MakeChannel(agent_address_));
    NoteAgent(node_id_, agent_address_);
  }
}

absl::StatusOr<StoredRef> StoreAccess::Put(const std::string& id, absl::string_view data,
                                           absl::string_view metadata) {
  if (store_ == nullptr) {
    return absl::FailedPreconditionError(
        "this node has no object store: a value this large cannot be stored (start the agent "
        "with its object store)");
  }
  DROVER_RETURN_IF_ERROR(store_->Put(id, data, metadata));
  return StoredRef{id, node_id_, data.size()};
}

absl::StatusOr<object_store::ObjectRef> StoreAccess::GetRef(const std::string& object_id,
                                                            const std::string& node_id,
                                                            absl::Time deadline) {
  if (store_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read object ", object_id, ": this node has no object store"));
  }
  // Made here: its seal may still be on its way (a put returns before the store has
  // processed the overlapped seal), so wait for it in the store, briefly.
  const absl::Duration local_wait =
      node_id == node_id_ ? std::min(kLocalSealWait, deadline - absl::Now()) : absl::ZeroDuration();
  absl::StatusOr<object_store::ObjectRef> ref =
      store_->Get(object_id, std::max(local_wait, absl::ZeroDuration()));
  if (ref.ok() || (ref.status().code() != absl::StatusCode::kNotFound &&
                   ref.status().code() != absl::StatusCode::kDeadlineExceeded)) {
    return ref;
  }
  if (transfer_ == nullptr) return ref.status();
  // Not here: this node's agent pulls it from a node that has it, waiting for the
  // directory to list one if it was just made (its holder reports it in a moment).
  grpc::ClientContext ctx;
  PrepareContext(&ctx, token_, Until(deadline) + kServerAnswerGrace);
  proto::FetchObjectRequest req;
  req.set_object_id(object_id);
  req.set_timeout_ms(std::max<int64_t>(1, Until(deadline).count()));
  req.set_wait_for_holder(true);
  proto::FetchObjectReply reply;
  absl::Status s = FromGrpcStatus(transfer_->FetchObject(&ctx, req, &reply));
  if (!s.ok()) return s;
  return store_->Get(object_id, absl::Seconds(5));
}

bool StoreAccess::LostInRestart(const StoredRef& ref, absl::Time made, std::string* why) const {
  if (store_ == nullptr || ref.node_id != node_id_) return false;
  const absl::Time lost_at = store_->store_lost_at();
  if (lost_at == absl::InfinitePast() || lost_at <= made) return false;
  *why = absl::StrCat("it was lost when the object store of node ", node_id_, " restarted at ",
                      absl::FormatTime("%Y-%m-%d %H:%M:%E3S %Z", lost_at, absl::LocalTimeZone()),
                      " (when this process found it gone and connected to the restarted store)");
  return true;
}

absl::StatusOr<ValueView> StoreAccess::Load(const StoredRef& ref, absl::Time deadline) {
  DROVER_ASSIGN_OR_RETURN(object_store::ObjectRef r, GetRef(ref.object_id, ref.node_id, deadline));
  auto holder = std::make_shared<object_store::ObjectRef>(std::move(r));
  absl::string_view data(reinterpret_cast<const char*>(holder->data().data()), holder->data().size());
  return ValueView{data, holder};
}

void StoreAccess::Delete(const std::vector<StoredRef>& objects) {
  std::map<std::string, std::vector<std::string>> remote;
  for (const StoredRef& r : objects) {
    if (r.node_id == node_id_ && store_ != nullptr) {
      store_->Delete(r.object_id).IgnoreError();  // gone already is fine
    } else {
      remote[r.node_id].push_back(r.object_id);
    }
  }
  for (auto& [node, ids] : remote) {
    proto::Workers::Stub* stub = WorkersOf(node);
    if (stub == nullptr && resolver_) {
      NoteAgent(node, resolver_(node));
      stub = WorkersOf(node);
    }
    if (stub == nullptr) continue;  // unknown node: its copies go with its job
    auto req = std::make_shared<proto::DeleteObjectsRequest>();
    for (auto& id : ids) req->add_object_ids(std::move(id));
    auto ctx = std::make_shared<grpc::ClientContext>();
    PrepareContext(ctx.get(), token_, std::chrono::milliseconds(5000));
    auto reply = std::make_shared<proto::DeleteObjectsReply>();
    stub->async()->DeleteObjects(ctx.get(), req.get(), reply.get(),
                                 [ctx, req, reply](grpc::Status) {});
  }
}

void StoreAccess::NoteAgent(const std::string& node_id, const std::string& address) {
  if (node_id.empty() || address.empty()) return;
  absl::MutexLock l(&mu_);
  agents_[node_id] = address;
}

proto::Workers::Stub* StoreAccess::WorkersOf(const std::string& node_id) {
  std::string address;
  {
    absl::MutexLock l(&mu_);
    auto it = agents_.find(node_id);
    if (it == agents_.end()) return nullptr;
    address = it->second;
  }
  return WorkersAt(address);
}

proto::Workers::Stub* StoreAccess::WorkersAt(const std::string& agent_address) {
  absl::MutexLock l(&mu_);
  auto& stub = workers_[agent_address];
  if (stub == nullptr) stub = proto::Workers::NewStub(MakeChannel(agent_address));
  return stub.get();
}

}  // namespace drover::internal
