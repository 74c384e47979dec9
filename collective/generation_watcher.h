// GenerationWatcher: hears from the scheduler, within a round trip, that a process of
// this job generation failed (or that the generation ended), so collective groups can
// abort the operation in flight instead of waiting for a timeout.
//
// One watcher per (scheduler, job, generation, rank) in a process, shared by every group
// of that scope (Get()). It holds one long-poll WatchGeneration call (proto/
// scheduler.proto) on a thread of its own; the scheduler, knowing the rank watches, gives
// it a short notice period after a failure to exit on its own before SIGTERM.
//
// Thread safety: every method is thread-safe. Callbacks run on the watcher's thread.
#ifndef DROVER_COLLECTIVE_GENERATION_WATCHER_H_
#define DROVER_COLLECTIVE_GENERATION_WATCHER_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "collective/kv_store.h"
#include "grpcpp/client_context.h"
#include "proto/scheduler.grpc.pb.h"

namespace drover::collective {

class GenerationWatcher {
 public:
  // The process's watcher of `kv`'s scope for `rank`, started on first use.
  static std::shared_ptr<GenerationWatcher> Get(const KvClientOptions& kv, int rank);

  // Cancels the watch and joins the thread.
  ~GenerationWatcher();

  using Callback = std::function<void(const absl::Status& notice)>;
  // Calls `callback` once with the notice when it arrives (at once, on this thread, if
  // it already has). The notice is ABORTED with a message such as "rank 1 on node
  // node-2 (10.0.0.2) was killed by SIGKILL". Returns an id for Unsubscribe.
  int Subscribe(Callback callback);
  // After it returns, the callback is not running and will not be called.
  void Unsubscribe(int id);

  // The notice, if it arrived within `wait`.
  std::optional<absl::Status> Notice(absl::Duration wait = absl::ZeroDuration());

 private:
  GenerationWatcher(KvClientOptions kv, int rank);
  void Run();
  void Deliver(absl::Status notice);

  const KvClientOptions kv_;
  const int rank_;
  std::unique_ptr<proto::Scheduler::Stub> stub_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* call_ ABSL_GUARDED_BY(mu_) = nullptr;  // the call in flight
  std::optional<absl::Status> notice_ ABSL_GUARDED_BY(mu_);

  // Held while callbacks run, so Unsubscribe can wait for one in progress.
  absl::Mutex callbacks_mu_;
  std::map<int, Callback> callbacks_ ABSL_GUARDED_BY(callbacks_mu_);
  int next_id_ ABSL_GUARDED_BY(callbacks_mu_) = 0;

  std::thread thread_;
};

}  // namespace drover::collective

#endif  // DROVER_COLLECTIVE_GENERATION_WATCHER_H_
