// The in-memory StateStore: what `drover scheduler` uses without --redis. Records are
// kept serialized, exactly as the Redis store keeps them, so both back ends return
// copies that share nothing with the caller and behave the same on replacement.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "scheduler/state_store.h"

namespace drover {
namespace {

class MemoryStateStore final : public StateStore {
 public:
  absl::Status PutJob(const proto::JobInfo& job) override {
    if (job.job_id().empty()) {
      return absl::InvalidArgumentError("cannot store a job with an empty job_id");
    }
    std::string record = job.SerializeAsString();
    absl::MutexLock lock(&mu_);
    jobs_[job.job_id()] = std::move(record);
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<proto::JobInfo>> LoadJobs() override {
    std::vector<proto::JobInfo> jobs;
    absl::MutexLock lock(&mu_);
    jobs.reserve(jobs_.size());
    for (const auto& [id, record] : jobs_) {
      // Only PutJob writes here, from a message that serialized, so this cannot fail.
      jobs.emplace_back().ParseFromString(record);
    }
    return jobs;
  }

  absl::StatusOr<int64_t> NextId(const std::string& counter) override {
    absl::MutexLock lock(&mu_);
    return ++counters_[counter];
  }

  std::string Describe() const override { return "memory"; }

 private:
  absl::Mutex mu_;
  // job_id -> JobInfo.SerializeAsString().
  std::map<std::string, std::string> jobs_ ABSL_GUARDED_BY(mu_);
  // Counter name -> last value handed out (absent: 0).
  std::map<std::string, int64_t> counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<StateStore> NewMemoryStateStore() {
  return std::make_unique<MemoryStateStore>();
}

}  // namespace drover
