#include "scheduler/lease_queue.h"

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/message_differencer.h"

namespace drover {

absl::Status ValidateLeaseShape(const proto::Resources& r) {
  if (r.cpus() < 0 || r.gpus() < 0 || r.memory_bytes() < 0) {
    return absl::InvalidArgumentError("resources must not be negative");
  }
  for (const auto& [k, v] : r.custom()) {
    if (v < 0) {
      return absl::InvalidArgumentError(absl::StrCat("custom resource '", k, "' must not be negative"));
    }
  }
  return absl::OkStatus();
}

proto::PlacementHint LeaseQueue::HintOf(const Entry& e) {
  proto::PlacementHint hint = e.hint != nullptr ? *e.hint : proto::PlacementHint();
  if (!e.cls->hard.node_id().empty()) hint = e.cls->hard;
  return hint;
}

LeaseQueue::Class* LeaseQueue::ClassFor(const proto::Resources& shape,
                                        const proto::PlacementHint& hint) {
  proto::PlacementHint hard;
  if (!hint.node_id().empty() && !hint.soft()) hard.set_node_id(hint.node_id());
  std::string key = absl::StrCat(shape.SerializeAsString(), "@", hard.node_id());
  auto it = classes_.find(key);
  if (it == classes_.end()) {
    auto cls = std::make_unique<Class>();
    cls->key = key;
    cls->shape = shape;
    cls->hard = std::move(hard);
    it = classes_.emplace(std::move(key), std::move(cls)).first;
  }
  return it->second.get();
}

std::shared_ptr<const proto::PackageRef> LeaseQueue::PackageFor(const std::string& job_id,
                                                                const proto::PackageRef& package) {
  std::shared_ptr<const proto::PackageRef>& p = packages_[job_id];
  if (p == nullptr || !google::protobuf::util::MessageDifferencer::Equals(*p, package)) {
    p = std::make_shared<const proto::PackageRef>(package);
  }
  return p;
}

LeaseQueue::Entry* LeaseQueue::Insert(Class* cls, std::list<Entry>::iterator before, Entry e) {
  const uint64_t old_head = cls->entries.empty() ? 0 : cls->entries.front().seq;
  auto it = cls->entries.insert(before, std::move(e));
  it->cls = cls;
  it->self = it;
  std::list<Entry*>& job = jobs_[it->job_id];
  it->in_job = job.insert(job.end(), &*it);
  ++size_;
  HeadChanged(cls, old_head);
  return &*it;
}

void LeaseQueue::HeadChanged(Class* cls, uint64_t old_seq) {
  const uint64_t now = cls->entries.empty() ? 0 : cls->entries.front().seq;
  if (now == old_seq) return;
  if (old_seq != 0) heads_.erase({old_seq, cls});
  if (now != 0) heads_.emplace(now, cls);
}

absl::StatusOr<LeaseQueue::Entry*> LeaseQueue::Push(const std::string* request_id,
                                                    const proto::RequestLeaseRequest& req) {
  if (size_ >= cap_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the scheduler's lease queue is full (", cap_, " requests wait; its limit, "
        "drover-scheduler --max-queued-leases): lease request ", *request_id,
        " was not queued; ask again later, or return leases this job holds idle"));
  }
  Class* cls = ClassFor(req.shape(), req.hint());
  Entry e;
  e.request_id = request_id;
  e.job_id = req.job_id();
  e.owner = req.owner();
  const proto::PlacementHint& hint = req.hint();
  if (!cls->hard.node_id().empty()) {
    // The class holds the affinity; a hard hint has nothing else that matters.
  } else if (hint.ByteSizeLong() > 0) {
    e.hint = std::make_unique<proto::PlacementHint>(hint);
  }
  e.package = PackageFor(req.job_id(), req.package());
  e.seq = next_seq_++;
  return Insert(cls, cls->entries.end(), std::move(e));
}

LeaseQueue::Entry* LeaseQueue::Requeue(const std::string* request_id, const std::string& job_id,
                                       const std::string& owner, const proto::Resources& shape,
                                       const proto::PlacementHint& hint,
                                       std::shared_ptr<const proto::PackageRef> package,
                                       uint64_t seq) {
  Class* cls = ClassFor(shape, hint);
  Entry e;
  e.request_id = request_id;
  e.job_id = job_id;
  e.owner = owner;
  if (cls->hard.node_id().empty() && hint.ByteSizeLong() > 0) {
    e.hint = std::make_unique<proto::PlacementHint>(hint);
  }
  e.package = std::move(package);
  e.seq = seq;
  auto before = cls->entries.begin();
  while (before != cls->entries.end() && before->seq < seq) ++before;
  return Insert(cls, before, std::move(e));
}

void LeaseQueue::Remove(Entry* e) {
  Class* cls = e->cls;
  const uint64_t old_head = cls->entries.front().seq;
  auto job = jobs_.find(e->job_id);
  job->second.erase(e->in_job);
  if (job->second.empty()) {
    jobs_.erase(job);
    packages_.erase(e->job_id);
  }
  cls->entries.erase(e->self);
  --size_;
  HeadChanged(cls, old_head);
  if (cls->entries.empty()) classes_.erase(classes_.find(cls->key));
}

std::vector<std::string> LeaseQueue::RemoveJob(const std::string& job_id) {
  std::vector<std::string> ids;
  auto job = jobs_.find(job_id);
  if (job == jobs_.end()) return ids;
  std::vector<Entry*> entries(job->second.begin(), job->second.end());
  for (Entry* e : entries) {
    ids.push_back(*e->request_id);
    Remove(e);
  }
  return ids;
}

}  // namespace drover
