#include "node_agent/object_reporter.h"

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "common/log.h"
#include "common/rpc.h"

namespace drover {
namespace {

// How long the thread waits for an event when nothing is pending (bounds how late a
// Resync or SetNodeId is acted on).
constexpr absl::Duration kIdleWait = absl::Milliseconds(200);
// Deadline of the goodbye removal at Stop.
constexpr absl::Duration kStopRemoveTimeout = absl::Seconds(1);

std::chrono::milliseconds ToChrono(absl::Duration d) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

}  // namespace

ObjectReporter::ObjectReporter(ObjectReporterOptions options)
    : options_(std::move(options)),
      stub_(proto::Scheduler::NewStub(MakeChannel(options_.scheduler_address))) {}

ObjectReporter::~ObjectReporter() { Stop(); }

void ObjectReporter::Start() {
  {
    absl::MutexLock lock(&mu_);
    started_ = true;
  }
  thread_ = std::thread([this] { Run(); });
}

void ObjectReporter::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (!started_ || stop_) return;
    stop_ = true;
    if (sub_ != nullptr) sub_->Interrupt();
  }
  if (thread_.joinable()) thread_.join();
}

bool ObjectReporter::Stopping() {
  absl::MutexLock lock(&mu_);
  return stop_;
}

void ObjectReporter::SetNodeId(const std::string& node_id) {
  absl::MutexLock lock(&mu_);
  node_id_ = node_id;
}

void ObjectReporter::Resync() {
  absl::MutexLock lock(&mu_);
  ++resyncs_;
  for (const auto& [id, size] : held_) {
    to_add_[id] = size;
    to_remove_.erase(id);
  }
  if (!held_.empty()) {
    first_pending_ = std::min(first_pending_, absl::Now());
    next_attempt_ = absl::InfinitePast();
  }
}

ObjectReporterStats ObjectReporter::stats() {
  absl::MutexLock lock(&mu_);
  ObjectReporterStats s = stats_;
  s.held = static_cast<int64_t>(held_.size());
  return s;
}

void ObjectReporter::Apply(const object_store::StoreEvent& e) {
  if (e.kind == object_store::StoreEvent::Kind::kSealed) {
    held_[e.id] = static_cast<int64_t>(e.data_size);
    to_add_[e.id] = static_cast<int64_t>(e.data_size);
    to_remove_.erase(e.id);
  } else {
    held_.erase(e.id);
    to_add_.erase(e.id);
    to_remove_.insert(e.id);
  }
  first_pending_ = std::min(first_pending_, absl::Now());
}

bool ObjectReporter::Flush(bool force) {
  while (true) {
    proto::AddObjectLocationsRequest add;
    proto::RemoveObjectLocationsRequest remove;
    uint64_t resyncs;
    {
      absl::MutexLock lock(&mu_);
      resyncs = resyncs_;
      size_t pending = to_add_.size() + to_remove_.size();
      if (pending == 0) {
        first_pending_ = absl::InfiniteFuture();
        return true;
      }
      if (node_id_.empty()) return true;
      absl::Time now = absl::Now();
      if (!force && now < next_attempt_) return true;
      if (!force && pending < static_cast<size_t>(options_.max_batch) &&
          now < first_pending_ + options_.batch_delay) {
        return true;
      }
      int room = options_.max_batch;
      remove.set_node_id(node_id_);
      for (auto it = to_remove_.begin(); it != to_remove_.end() && room > 0; ++it, --room) {
        remove.add_object_ids(*it);
      }
      add.set_node_id(node_id_);
      for (auto it = to_add_.begin(); it != to_add_.end() && room > 0; ++it, --room) {
        proto::ObjectEntry* e = add.add_objects();
        e->set_object_id(it->first);
        e->set_size(it->second);
      }
    }
    absl::Duration timeout = force ? kStopRemoveTimeout : options_.rpc_timeout;
    grpc::Status s;
    if (remove.object_ids_size() > 0) {
      grpc::ClientContext ctx;
      PrepareContext(&ctx, options_.token, ToChrono(timeout));
      proto::RemoveObjectLocationsReply reply;
      s = stub_->RemoveObjectLocations(&ctx, remove, &reply);
    }
    if (s.ok() && add.objects_size() > 0) {
      grpc::ClientContext ctx;
      PrepareContext(&ctx, options_.token, ToChrono(timeout));
      proto::AddObjectLocationsReply reply;
      s = stub_->AddObjectLocations(&ctx, add, &reply);
    }
    absl::MutexLock lock(&mu_);
    if (!s.ok()) {
      DROVER_LOG(WARNING) << "cannot update the object directory at "
                          << options_.scheduler_address << " (" << s.error_message()
                          << "); " << to_add_.size() + to_remove_.size()
                          << " change(s) kept for the next try";
      next_attempt_ = absl::Now() + options_.retry_interval;
      return false;
    }
    // Drop what was sent unless it changed meanwhile.
    for (const auto& id : remove.object_ids()) {
      if (to_remove_.erase(id) > 0) ++stats_.removed;
    }
    if (s.ok() && resyncs == resyncs_) {
      for (const auto& e : add.objects()) {
        auto it = to_add_.find(e.object_id());
        if (it != to_add_.end() && it->second == e.size()) {
          to_add_.erase(it);
          ++stats_.added;
        }
      }
    }
    if (force) return true;
  }
}

void ObjectReporter::Run() {
  bool logged = false;
  while (!Stopping()) {
    std::vector<object_store::StoreEvent> snapshot;
    absl::StatusOr<std::unique_ptr<object_store::Subscriber>> sub =
        object_store::Subscriber::Connect(options_.socket_path, &snapshot);
    if (!sub.ok()) {
      if (!logged) {
        DROVER_LOG(WARNING) << "cannot subscribe to the object store's events: "
                            << sub.status().message() << "; retrying";
        logged = true;
      }
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stop_), options_.retry_interval);
      continue;
    }
    logged = false;
    {
      absl::MutexLock lock(&mu_);
      if (stop_) break;
      sub_ = sub->get();
      ++stats_.subscriptions;
      // Reconcile with what the store holds now.
      std::map<std::string, int64_t> now;
      for (const auto& e : snapshot) now[e.id] = static_cast<int64_t>(e.data_size);
      for (const auto& [id, size] : held_) {
        if (now.count(id) == 0) {
          to_add_.erase(id);
          to_remove_.insert(id);
        }
      }
      for (const auto& [id, size] : now) {
        to_add_[id] = size;
        to_remove_.erase(id);
      }
      held_ = std::move(now);
      if (!to_add_.empty() || !to_remove_.empty()) {
        first_pending_ = std::min(first_pending_, absl::Now());
      }
    }
    while (true) {
      Flush(false);
      absl::Duration wait = kIdleWait;
      {
        absl::MutexLock lock(&mu_);
        // Nothing can be sent before registration: do not spin meanwhile.
        if (!node_id_.empty() && (!to_add_.empty() || !to_remove_.empty())) {
          absl::Time due = std::max(first_pending_ + options_.batch_delay, next_attempt_);
          wait = std::clamp(due - absl::Now(), absl::ZeroDuration(), kIdleWait);
        }
      }
      absl::StatusOr<object_store::StoreEvent> e = (*sub)->Next(wait);
      if (e.ok()) {
        absl::MutexLock lock(&mu_);
        Apply(*e);
        continue;
      }
      if (e.status().code() == absl::StatusCode::kDeadlineExceeded) continue;
      if (e.status().code() != absl::StatusCode::kCancelled) {
        DROVER_LOG(WARNING) << "object store event stream ended (" << e.status().message()
                            << "); subscribing again";
      }
      break;
    }
    {
      absl::MutexLock lock(&mu_);
      sub_ = nullptr;
    }
  }
  // The store goes down with the agent: take this node out of the directory.
  {
    absl::MutexLock lock(&mu_);
    to_add_.clear();
    for (const auto& [id, size] : held_) to_remove_.insert(id);
  }
  Flush(/*force=*/true);
}

}  // namespace drover
