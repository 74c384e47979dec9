// A fake of the scheduler's calls to agents' Workers service, for the lease manager's
// tests: every start succeeds (worker "worker-<lease id>") and is counted; the rest
// succeed and do nothing. Thread-safe.
#ifndef DROVER_SCHEDULER_TESTING_LEASE_FAKES_H_
#define DROVER_SCHEDULER_TESTING_LEASE_FAKES_H_

#include <atomic>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "scheduler/lease_manager.h"

namespace drover {

class FakeWorkers : public WorkerClient {
 public:
  absl::StatusOr<proto::StartWorkerReply> StartWorker(const std::string&,
                                                      const proto::StartWorkerRequest& req) override {
    ++starts;
    proto::StartWorkerReply reply;
    reply.set_worker_id(absl::StrCat("worker-", req.lease_id()));
    return reply;
  }
  absl::Status KillWorker(const std::string&, const proto::KillWorkerRequest&) override {
    return absl::OkStatus();
  }
  absl::Status StopJob(const std::string&, const std::string&) override { return absl::OkStatus(); }
  absl::Status DeleteObjects(const std::string&, const std::vector<std::string>&) override {
    return absl::OkStatus();
  }

  std::atomic<int> starts{0};
};

}  // namespace drover

#endif  // DROVER_SCHEDULER_TESTING_LEASE_FAKES_H_
