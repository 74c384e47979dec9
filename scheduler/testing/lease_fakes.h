// A fake of the scheduler's calls to agents' Workers service, for the lease manager's
// tests: every start succeeds (worker "worker-<lease id>") and is counted, revokes,
// kills and job stops are recorded; the rest succeed and do nothing. Thread-safe.
#ifndef DROVER_SCHEDULER_TESTING_LEASE_FAKES_H_
#define DROVER_SCHEDULER_TESTING_LEASE_FAKES_H_

#include <atomic>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
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
  absl::Status KillWorker(const std::string&, const proto::KillWorkerRequest& req) override {
    absl::MutexLock l(&mu_);
    killed_.push_back(req);
    return absl::OkStatus();
  }
  absl::Status RevokeLease(const std::string&, const proto::RevokeLeaseRequest& req) override {
    absl::MutexLock l(&mu_);
    revoked_.push_back(req);
    return absl::OkStatus();
  }
  absl::Status StopJob(const std::string& agent, const std::string& job_id) override {
    absl::MutexLock l(&mu_);
    stopped_.emplace_back(agent, job_id);
    return absl::OkStatus();
  }
  absl::Status DeleteObjects(const std::string&, const std::vector<std::string>&) override {
    return absl::OkStatus();
  }

  // The RevokeLease calls so far.
  std::vector<proto::RevokeLeaseRequest> revoked() {
    absl::MutexLock l(&mu_);
    return revoked_;
  }

  // The KillWorker calls so far.
  std::vector<proto::KillWorkerRequest> killed() {
    absl::MutexLock l(&mu_);
    return killed_;
  }

  // The StopJob calls so far: (agent, job).
  std::vector<std::pair<std::string, std::string>> stopped() {
    absl::MutexLock l(&mu_);
    return stopped_;
  }

  std::atomic<int> starts{0};

 private:
  std::vector<std::pair<std::string, std::string>> stopped_;
  std::vector<proto::KillWorkerRequest> killed_;
  absl::Mutex mu_;
  std::vector<proto::RevokeLeaseRequest> revoked_;
};

}  // namespace drover

#endif  // DROVER_SCHEDULER_TESTING_LEASE_FAKES_H_
