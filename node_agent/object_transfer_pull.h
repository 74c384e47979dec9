// ObjectPuller: the pulling half of object transfer (object_transfer.h). Makes an
// object present in this node's store: asks the scheduler's object directory which
// live nodes hold it, reads it from the first holder that has it (ReadObject; the data
// over raw TCP when the holder offers it, object_transfer_raw.h, else in ObjectChunks
// decoded by object_transfer_codec.h) straight into a secondary copy in the store,
// seals it and reports the copy to the directory. Concurrent Fetches of one id share
// one pull. A Fetch asked to wait for a holder first waits in the directory
// (GetObjectLocations with a wait, woken when a copy is reported) until some live node,
// this one included, holds the object; that wait is each caller's own, not shared.
//
// Ownership: borrows `local`, which must outlive it. Thread safety: thread-safe.
#ifndef DROVER_NODE_AGENT_OBJECT_TRANSFER_PULL_H_
#define DROVER_NODE_AGENT_OBJECT_TRANSFER_PULL_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "node_agent/local_objects.h"
#include "node_agent/object_transfer_options.h"
#include "proto/scheduler.grpc.pb.h"

namespace drover {

class ObjectPuller {
 public:
  struct FetchResult {
    int64_t size = 0;
    // Node the copy came from; this node's id if it was already here.
    std::string source_node;
  };
  // How far a running pull has come (GetFetchProgress).
  struct Progress {
    int64_t received_bytes = 0;  // of the current attempt
    int64_t total_bytes = 0;     // 0 until the holder said
    std::string source_node;     // the current attempt's holder
  };

  // `node`: this node's id in the scheduler, under which copies are reported (not
  // until it is set) and whose entry in the directory is skipped. It must outlive this.
  ObjectPuller(const ObjectTransferOptions& options, LocalObjects* local,
               const NodeIdentity* node);
  ObjectPuller(const ObjectPuller&) = delete;
  ObjectPuller& operator=(const ObjectPuller&) = delete;

  // See ObjectTransfer::Fetch.
  absl::StatusOr<FetchResult> Fetch(const std::string& id, absl::Time deadline,
                                    bool wait_for_holder = false);

  // The progress of the pull of `id` running now; nullopt if none runs.
  std::optional<Progress> PullProgress(const std::string& id);

  // Cancels running pulls (their Fetches return UNAVAILABLE) and refuses new ones.
  // Idempotent.
  void Shutdown();

  // The pulling counters (pulls_*, bytes_pulled, fetches_joined, raw_pulls); the
  // others stay 0.
  ObjectTransferStats stats();

 private:
  struct Pull {
    absl::Notification done;
    absl::StatusOr<FetchResult> result;  // written before `done` is notified
    // Progress, written by the pulling thread as bytes arrive and read by
    // PullProgress. The current attempt's bytes in the store, and the object's size.
    std::atomic<int64_t> received{0};
    std::atomic<int64_t> total{0};
    std::string source;  // the current attempt's holder; guarded by ObjectPuller::mu_
  };
  struct Holder {
    std::string node_id;
    std::string address;
  };
  // What one pull attempt from one holder came to.
  struct Attempt {
    int64_t size = 0;
    // Trying another holder is pointless (local store error, deadline, shutdown).
    bool fatal = false;
    // The holder's raw offer came but no raw connection could be made (nothing was
    // received over it): the same holder may be asked for chunks instead.
    bool raw_unreachable = false;
    // The pull's progress counters, kept current as bytes arrive.
    Pull* pull = nullptr;
  };

  absl::StatusOr<FetchResult> RunPull(const std::string& id, absl::Time deadline, Pull* pull);
  // One attempt from one holder, over raw TCP if possible, else over gRPC. On failure
  // the partial copy is aborted.
  absl::Status PullFrom(const Holder& holder, const std::string& id, absl::Time deadline,
                        Attempt* attempt);
  // One stream; `raw_ip` non-empty asks for a raw-TCP offer.
  absl::Status PullOnce(const Holder& holder, const std::string& id, absl::Time deadline,
                        const std::string& raw_ip, Attempt* attempt);
  // The live holders of `id` other than this node, as the directory lists them now.
  absl::StatusOr<std::vector<Holder>> FindHolders(const std::string& id, absl::Time deadline);
  // OK once `id` is here or the directory lists a live holder (this node included);
  // DEADLINE_EXCEEDED if none comes before `deadline`.
  absl::Status WaitForHolder(const std::string& id, absl::Time deadline);
  // GetObjectLocations, waiting up to `wait` (zero: answers at once) for a holder.
  absl::StatusOr<proto::GetObjectLocationsReply> AskDirectory(const std::string& id,
                                                              absl::Time deadline,
                                                              absl::Duration wait);
  void ReportCopy(const std::string& id, int64_t size);
  // The size of a sealed local copy of `id`.
  absl::StatusOr<int64_t> LocalSize(const std::string& id);
  // The channel to a peer (one per address, kept; tuned for bulk transfer).
  std::shared_ptr<grpc::Channel> PeerChannel(const std::string& address);
  // Registers a client context so that Shutdown can cancel it; false if shutting down.
  bool Track(grpc::ClientContext* ctx);
  void Untrack(grpc::ClientContext* ctx);

  const ObjectTransferOptions options_;
  LocalObjects* const local_;
  const NodeIdentity* const node_;
  std::unique_ptr<proto::Scheduler::Stub> scheduler_;

  std::atomic<bool> stop_{false};  // Shutdown was called (read without mu_)
  absl::Mutex mu_;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, std::shared_ptr<Pull>> pulls_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<grpc::Channel>> peers_ ABSL_GUARDED_BY(mu_);
  std::set<grpc::ClientContext*> active_ ABSL_GUARDED_BY(mu_);
  ObjectTransferStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace drover

#endif  // DROVER_NODE_AGENT_OBJECT_TRANSFER_PULL_H_
