// LeaseQueue: the lease requests that wait for room, in the scheduler (lease_manager.h).
//
// Requests are kept per class: the resource shape and a hard node affinity, which
// together decide whether a request fits anywhere (a soft hint only picks the node).
// Within a class they are served first come, first served; a grant pass
// (ForEachHead) offers each class's oldest request, the class with the oldest one
// first, and goes on with the next of that class while they are granted, to the next
// class when one is not (it is blocked until room frees): "FIFO within what fits", as
// the job queue does without claims. A pass costs the classes waiting plus the grants,
// not the requests waiting.
//
// Requests of a job can be taken out at once (the job ended), any one by its entry
// (its caller gave up), and a request whose start failed goes back to its place. The
// queue holds at most `cap` requests (Push refuses beyond with RESOURCE_EXHAUSTED).
//
// Memory: a queued request costs its entry (job and owner ids, its hint if it has one,
// a shared reference to its job's package) and list links; the shape, the package and
// the hard affinity are stored once per class or job. Pure: no lock, no clock, no I/O.
// Not thread-safe: used under LeaseManager's mutex.
#ifndef DROVER_SCHEDULER_LEASE_QUEUE_H_
#define DROVER_SCHEDULER_LEASE_QUEUE_H_

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/lease.pb.h"

namespace drover {

// OK if `shape` asks for no negative amount; else INVALID_ARGUMENT naming it.
absl::Status ValidateLeaseShape(const proto::Resources& shape);

class LeaseQueue {
 public:
  struct Class;
  struct Entry {
    const std::string* request_id = nullptr;  // the caller's key, which outlives the entry
    std::string job_id;
    std::string owner;
    std::unique_ptr<proto::PlacementHint> hint;  // null: none
    std::shared_ptr<const proto::PackageRef> package;
    uint64_t seq = 0;  // arrival order
    Class* cls = nullptr;
    std::list<Entry>::iterator self;
    std::list<Entry*>::iterator in_job;
  };
  struct Class {
    std::string key;
    proto::Resources shape;
    proto::PlacementHint hard;  // the hard node affinity, if any
    std::list<Entry> entries;   // arrival order
    // Why the head waits (cached by the caller; see reason_version).
    std::string reason;
    uint64_t reason_version = 0;
  };

  explicit LeaseQueue(size_t cap) : cap_(cap) {}
  LeaseQueue(const LeaseQueue&) = delete;
  LeaseQueue& operator=(const LeaseQueue&) = delete;

  // Queues `req` at the back of its class under `*request_id` (which must outlive the
  // entry). RESOURCE_EXHAUSTED when `cap` requests are queued.
  absl::StatusOr<Entry*> Push(const std::string* request_id, const proto::RequestLeaseRequest& req);
  // Puts back a request taken by ForEachHead, in its place by `seq` (a failed start).
  Entry* Requeue(const std::string* request_id, const std::string& job_id, const std::string& owner,
                 const proto::Resources& shape, const proto::PlacementHint& hint,
                 std::shared_ptr<const proto::PackageRef> package, uint64_t seq);
  void Remove(Entry* e);
  // Removes every queued request of `job_id`; returns their request ids.
  std::vector<std::string> RemoveJob(const std::string& job_id);

  // Offers each class's head, the class with the oldest head first. `offer(entry)`
  // answers kTaken (granted) or kDropped (refused for good, e.g. its job ended): the
  // entry is removed and the class's next is offered; or kBlocked (it does not fit
  // now): the class is passed over for the rest of the pass. `offer` must not change
  // the queue itself.
  enum class Offer { kTaken, kBlocked, kDropped };
  template <typename F>
  void ForEachHead(F offer) {
    // The heads by arrival; classes change as they are taken, so walk a snapshot.
    std::vector<Class*> order;
    order.reserve(heads_.size());
    for (const auto& [seq, cls] : heads_) order.push_back(cls);
    for (Class* cls : order) {
      for (;;) {
        Entry& head = cls->entries.front();
        if (offer(head) == Offer::kBlocked) break;
        const bool last = cls->entries.size() == 1;
        Remove(&head);  // the last one takes its class with it
        if (last) break;
      }
    }
  }

  // Whether `e` is at the front of its class.
  static bool IsHead(const Entry* e) { return &e->cls->entries.front() == e; }
  static proto::PlacementHint HintOf(const Entry& e);

  size_t size() const { return size_; }
  size_t classes() const { return classes_.size(); }
  size_t cap() const { return cap_; }

 private:
  Class* ClassFor(const proto::Resources& shape, const proto::PlacementHint& hint);
  std::shared_ptr<const proto::PackageRef> PackageFor(const std::string& job_id,
                                                      const proto::PackageRef& package);
  Entry* Insert(Class* cls, std::list<Entry>::iterator before, Entry e);
  void HeadChanged(Class* cls, uint64_t old_seq);

  const size_t cap_;
  size_t size_ = 0;
  uint64_t next_seq_ = 1;
  std::map<std::string, std::unique_ptr<Class>> classes_;  // by key
  std::set<std::pair<uint64_t, Class*>> heads_;            // (head seq, class)
  std::map<std::string, std::list<Entry*>> jobs_;          // queued entries per job
  // The last package seen per job (shared by its requests while equal).
  std::map<std::string, std::shared_ptr<const proto::PackageRef>> packages_;
};

}  // namespace drover

#endif  // DROVER_SCHEDULER_LEASE_QUEUE_H_
