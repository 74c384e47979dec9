// The in-memory StateStore: what `drover scheduler` uses without --redis. Records are
// kept serialized, exactly as the Redis store keeps them, so both back ends return
// copies that share nothing with the caller and behave the same on replacement.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "scheduler/state_store.h"

namespace drover {
namespace {

class MemoryStateStore final : public StateStore {
 public:
  explicit MemoryStateStore(bool keep_jobs) : keep_jobs_(keep_jobs) {}

  absl::Status PutJob(const proto::JobInfo& job) override {
    if (job.job_id().empty()) {
      return absl::InvalidArgumentError("cannot store a job with an empty job_id");
    }
    if (!keep_jobs_) return absl::OkStatus();
    std::string record = job.SerializeAsString();
    absl::MutexLock lock(&mu_);
    Stored& stored = jobs_[job.job_id()];
    if (!stored.record.empty() && stored.version > job.version()) return absl::OkStatus();
    stored.record = std::move(record);
    stored.version = job.version();
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<proto::JobInfo>> LoadJobs() override {
    std::vector<proto::JobInfo> jobs;
    absl::MutexLock lock(&mu_);
    jobs.reserve(jobs_.size());
    for (const auto& [id, stored] : jobs_) {
      // Only PutJob writes here, from a message that serialized, so this cannot fail.
      jobs.emplace_back().ParseFromString(stored.record);
    }
    return jobs;
  }

  absl::Status PutActor(const std::string& actor_id, int64_t version,
                        const std::string& record) override {
    if (actor_id.empty()) return absl::InvalidArgumentError("cannot store an actor with an empty id");
    if (!keep_jobs_) return absl::OkStatus();
    absl::MutexLock lock(&mu_);
    Stored& stored = actors_[actor_id];
    if (!stored.record.empty() && stored.version > version) return absl::OkStatus();
    stored.record = record;
    stored.version = version;
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<std::string>> LoadActors() override {
    std::vector<std::string> records;
    absl::MutexLock lock(&mu_);
    records.reserve(actors_.size());
    for (const auto& [id, stored] : actors_) records.push_back(stored.record);
    return records;
  }

  absl::StatusOr<int64_t> ReserveIds(const std::string& counter, int64_t count) override {
    if (count < 1) return absl::InvalidArgumentError("ReserveIds: count must be >= 1");
    absl::MutexLock lock(&mu_);
    return counters_[counter] += count;
  }

  std::string Describe() const override { return "memory"; }
  bool InMemory() const override { return true; }
  bool KeepsRecords() const override { return keep_jobs_; }

 private:
  const bool keep_jobs_;
  absl::Mutex mu_;
  struct Stored {
    std::string record;  // JobInfo.SerializeAsString(), or an actor's record
    int64_t version = 0;
  };
  absl::flat_hash_map<std::string, Stored> jobs_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Stored> actors_ ABSL_GUARDED_BY(mu_);
  // Counter name -> last value handed out (absent: 0).
  std::map<std::string, int64_t> counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<StateStore> NewMemoryStateStore(bool keep_jobs) {
  return std::make_unique<MemoryStateStore>(keep_jobs);
}

}  // namespace drover
