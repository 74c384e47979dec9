#include "node_agent/store_local_objects.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_macros.h"

namespace drover {

StoreLocalObjects::StoreLocalObjects(std::string socket_path)
    : socket_path_(std::move(socket_path)) {}

StoreLocalObjects::~StoreLocalObjects() {
  std::multimap<std::string, object_store::ObjectRef> pins;
  std::map<std::string, std::shared_ptr<object_store::Client>> creating;
  {
    absl::MutexLock lock(&mu_);
    pins.swap(pins_);
    creating.swap(creating_);
  }
  // Released and aborted outside the lock (both talk to the store).
  pins.clear();
  for (auto& [id, client] : creating) (void)client->Abort(id);
}

absl::StatusOr<std::shared_ptr<object_store::Client>> StoreLocalObjects::GetClient(
    absl::Duration connect_timeout) {
  {
    absl::MutexLock lock(&mu_);
    if (client_ != nullptr) return client_;
  }
  // Connected without mu_ (no lock is held across a socket call). No waiting for a
  // store that is down: the heartbeat and metrics ask through here and must not stall;
  // the caller retries later anyway.
  const object_store::ClientOptions options{.reconnect_wait = absl::ZeroDuration()};
  absl::StatusOr<std::unique_ptr<object_store::Client>> c =
      object_store::Client::Connect(socket_path_, options, connect_timeout);
  if (!c.ok()) return c.status();
  std::shared_ptr<object_store::Client> fresh = std::move(*c);
  absl::MutexLock lock(&mu_);
  if (client_ == nullptr) client_ = std::move(fresh);  // else another caller's won
  return client_;
}

void StoreLocalObjects::MaybeDrop(const std::shared_ptr<object_store::Client>& client,
                                  const absl::Status& s) {
  if (s.code() != absl::StatusCode::kUnavailable) return;
  absl::MutexLock lock(&mu_);
  if (client_ == client) client_.reset();
}

bool StoreLocalObjects::Contains(const std::string& id) {
  auto client = GetClient();
  if (!client.ok()) return false;
  absl::StatusOr<bool> has = (*client)->Contains(id);
  if (!has.ok()) MaybeDrop(*client, has.status());
  return has.ok() && *has;
}

absl::StatusOr<ReadView> StoreLocalObjects::Acquire(const std::string& id) {
  auto client = GetClient();
  if (!client.ok()) return client.status();
  absl::StatusOr<object_store::ObjectRef> ref = (*client)->Get(id, absl::ZeroDuration());
  if (!ref.ok()) {
    MaybeDrop(*client, ref.status());
    // A DEADLINE_EXCEEDED of a zero-timeout Get means "not (yet) sealed here".
    if (ref.status().code() == absl::StatusCode::kDeadlineExceeded) {
      return absl::NotFoundError(ref.status().message());
    }
    return ref.status();
  }
  if (ref->is_mutable()) {
    // A SharedTensor: written in place by its holders on this node; a copy elsewhere
    // would be a torn, stale snapshot.
    return absl::FailedPreconditionError(absl::StrCat(
        "object ", id, " is mutable (a SharedTensor): it lives on its node only and is "
        "never copied to another; take a snapshot (SharedTensor::Snapshot) to move its data"));
  }
  ReadView view;
  view.data = ref->data().data();
  view.size = static_cast<int64_t>(ref->data().size());
  view.metadata = std::string(ref->metadata_view());
  absl::MutexLock lock(&mu_);
  pins_.emplace(id, std::move(*ref));
  return view;
}

void StoreLocalObjects::Release(const std::string& id) {
  object_store::ObjectRef ref;
  {
    absl::MutexLock lock(&mu_);
    auto it = pins_.find(id);
    if (it == pins_.end()) return;
    ref = std::move(it->second);
    pins_.erase(it);
  }
  // ~ObjectRef releases, outside the lock.
}

absl::StatusOr<WriteView> StoreLocalObjects::CreateSecondary(const std::string& id,
                                                             int64_t size,
                                                             const std::string& metadata) {
  if (size < 0) return absl::InvalidArgumentError(absl::StrCat("negative size ", size));
  auto client = GetClient();
  if (!client.ok()) return client.status();
  // A pulled copy is secondary: evicted (the primary lives elsewhere), never spilled.
  absl::StatusOr<object_store::MutableObject> m =
      (*client)->Create(id, static_cast<uint64_t>(size), metadata, /*secondary=*/true);
  if (!m.ok()) {
    MaybeDrop(*client, m.status());
    return m.status();
  }
  absl::MutexLock lock(&mu_);
  creating_[id] = *client;
  return WriteView{m->data.data(), static_cast<int64_t>(m->data.size())};
}

absl::Status StoreLocalObjects::Seal(const std::string& id) {
  std::shared_ptr<object_store::Client> client;
  {
    absl::MutexLock lock(&mu_);
    auto it = creating_.find(id);
    if (it == creating_.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("object ", id, " is not being created by this agent"));
    }
    client = std::move(it->second);
    creating_.erase(it);
  }
  absl::Status s = client->Seal(id);
  MaybeDrop(client, s);
  return s;
}

void StoreLocalObjects::Abort(const std::string& id) {
  std::shared_ptr<object_store::Client> client;
  {
    absl::MutexLock lock(&mu_);
    auto it = creating_.find(id);
    if (it == creating_.end()) return;
    client = std::move(it->second);
    creating_.erase(it);
  }
  absl::Status s = client->Abort(id);
  MaybeDrop(client, s);
}

absl::StatusOr<object_store::StoreStats> StoreLocalObjects::Stats(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  DROVER_ASSIGN_OR_RETURN(std::shared_ptr<object_store::Client> client, GetClient(timeout));
  absl::StatusOr<object_store::StoreStats> stats = client->Stats(deadline - absl::Now());
  MaybeDrop(client, stats.status());
  return stats;
}

}  // namespace drover
