// ObjectReporter: keeps the scheduler's object directory in step with this node's
// object store. It subscribes to the store's events (object_store/subscriber.h) and
// reports, in batches, sealed objects (AddObjectLocations) and removed ones
// (RemoveObjectLocations).
//
//  - The subscription starts with a snapshot of the store, so after (re)connecting the
//    reporter knows exactly what the store holds: objects it had reported that are no
//    longer there (the store was restarted, hence empty) are removed from the
//    directory, and everything present is (re-)added.
//  - Resync() re-adds everything the store holds: the agent calls it after every
//    registration (a restarted scheduler has an empty directory).
//  - Nothing is reported before SetNodeId. Failed calls are retried (the pending
//    changes are kept, newest state per object), at most once per retry interval.
//  - Stop removes this node's entries from the directory (best effort: the store is
//    about to go too) and joins the thread.
//
// Threading: one thread does all the work (subscribe, batch, call the scheduler);
// public methods are thread-safe and do not block on the network.
#ifndef DROVER_NODE_AGENT_OBJECT_REPORTER_H_
#define DROVER_NODE_AGENT_OBJECT_REPORTER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "object_store/subscriber.h"
#include "proto/scheduler.grpc.pb.h"

namespace drover {

struct ObjectReporterOptions {
  // The store's socket.
  std::string socket_path;
  // host:port of the scheduler, and the cluster token.
  std::string scheduler_address;
  std::string token;
  // Changes are sent at most this long after they happen (they are batched meanwhile)
  // or at once when a batch reaches max_batch objects.
  absl::Duration batch_delay = absl::Milliseconds(20);
  int max_batch = 1000;
  // Pause after a failed call or a failed subscription before trying again.
  absl::Duration retry_interval = absl::Milliseconds(500);
  // Deadline of each call to the scheduler.
  absl::Duration rpc_timeout = absl::Seconds(5);
};

// Counters for tests and logs.
struct ObjectReporterStats {
  int64_t subscriptions = 0;  // successful (re)subscriptions
  int64_t added = 0;          // entries sent in AddObjectLocations that succeeded
  int64_t removed = 0;        // entries sent in RemoveObjectLocations that succeeded
  int64_t held = 0;           // objects the store holds now, as far as events tell
};

class ObjectReporter {
 public:
  explicit ObjectReporter(ObjectReporterOptions options);
  // Calls Stop().
  ~ObjectReporter();
  ObjectReporter(const ObjectReporter&) = delete;
  ObjectReporter& operator=(const ObjectReporter&) = delete;

  // Starts the thread. REQUIRES: called once.
  void Start();
  // See the file comment. Idempotent.
  void Stop();

  void SetNodeId(const std::string& node_id);
  void Resync();
  ObjectReporterStats stats();

 private:
  void Run();
  // Applies one event to `held_` and the pending changes.
  void Apply(const object_store::StoreEvent& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends pending changes if due. Returns false if a call failed.
  bool Flush(bool force);
  bool Stopping();

  const ObjectReporterOptions options_;
  std::unique_ptr<proto::Scheduler::Stub> stub_;
  std::thread thread_;

  absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::string node_id_ ABSL_GUARDED_BY(mu_);
  // The current subscription, so Stop can interrupt a waiting Next.
  object_store::Subscriber* sub_ ABSL_GUARDED_BY(mu_) = nullptr;
  // What the store holds (id -> data size).
  std::map<std::string, int64_t> held_ ABSL_GUARDED_BY(mu_);
  // Changes not yet accepted by the scheduler; an id is in at most one of them.
  std::map<std::string, int64_t> to_add_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> to_remove_ ABSL_GUARDED_BY(mu_);
  // Counts Resync calls. An add answered after a Resync may have reached the directory
  // before the scheduler forgot this node (a restart, or the node declared dead and back):
  // its entries stay queued, so the resynced directory gets them again.
  uint64_t resyncs_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time first_pending_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  absl::Time next_attempt_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  ObjectReporterStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace drover

#endif  // DROVER_NODE_AGENT_OBJECT_REPORTER_H_
