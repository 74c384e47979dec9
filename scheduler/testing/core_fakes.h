// Test doubles for driving SchedulerCore without agents: a recording AgentClient and
// a StateStore wrapper that outlives a core (to restart the scheduler over the same
// state), and the simplest job. Thread-safe as the interfaces they implement require.
#ifndef DROVER_SCHEDULER_TESTING_CORE_FAKES_H_
#define DROVER_SCHEDULER_TESTING_CORE_FAKES_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "proto/common.pb.h"
#include "scheduler/agent_client.h"
#include "scheduler/state_store.h"

namespace drover::testing {

// Records every call; StartProcesses answers port 29500 for the master (or echoes the
// port it was given), and UNAVAILABLE for the address given to FailAddress. A start to
// the address given to Hold is recorded, then answered only after Release (an agent
// that answers late); release before the core stops (Stop waits for its calls).
class FakeAgents : public AgentClient {
 public:
  absl::StatusOr<int> StartProcesses(const std::string& address,
                                     const proto::StartProcessesRequest& req) override {
    absl::MutexLock lock(&mu_);
    starts_.push_back({address, req});
    while (held_ == address) released_.Wait(&mu_);
    if (fail_address_ == address) return absl::UnavailableError("connection refused");
    return req.master_port() == 0 ? 29500 : req.master_port();
  }
  absl::Status StopJob(const std::string& address, const proto::StopJobRequest& req) override {
    absl::MutexLock lock(&mu_);
    stops_.push_back({address, req});
    return absl::OkStatus();
  }
  size_t starts() {
    absl::MutexLock lock(&mu_);
    return starts_.size();
  }
  size_t stops() {
    absl::MutexLock lock(&mu_);
    return stops_.size();
  }
  std::vector<std::pair<std::string, proto::StopJobRequest>> stop_calls() {
    absl::MutexLock lock(&mu_);
    return stops_;
  }
  std::vector<std::pair<std::string, proto::StartProcessesRequest>> start_calls() {
    absl::MutexLock lock(&mu_);
    return starts_;
  }
  void FailAddress(const std::string& a) {
    absl::MutexLock lock(&mu_);
    fail_address_ = a;
  }
  void Hold(const std::string& a) {
    absl::MutexLock lock(&mu_);
    held_ = a;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    held_.clear();
    released_.SignalAll();
  }

 private:
  absl::Mutex mu_;
  std::vector<std::pair<std::string, proto::StartProcessesRequest>> starts_;
  std::vector<std::pair<std::string, proto::StopJobRequest>> stops_;
  std::string fail_address_;
  std::string held_;
  absl::CondVar released_;
};

// A store that outlives the core, to simulate a scheduler restart.
class SharedStore : public StateStore {
 public:
  explicit SharedStore(StateStore* s) : s_(s) {}
  absl::Status PutJob(const proto::JobInfo& j) override { return s_->PutJob(j); }
  absl::StatusOr<std::vector<proto::JobInfo>> LoadJobs() override { return s_->LoadJobs(); }
  absl::Status PutActor(const std::string& id, int64_t v, const std::string& r) override {
    return s_->PutActor(id, v, r);
  }
  absl::StatusOr<std::vector<std::string>> LoadActors() override { return s_->LoadActors(); }
  absl::StatusOr<int64_t> ReserveIds(const std::string& c, int64_t n) override {
    return s_->ReserveIds(c, n);
  }
  std::string Describe() const override { return "shared"; }

 private:
  StateStore* s_;
};

// A job of `nproc` processes of one CPU each running "train".
inline proto::JobSpec OneCpuJob(int nproc = 1) {
  proto::JobSpec spec;
  spec.add_command("train");
  spec.set_nproc(nproc);
  spec.mutable_per_process()->set_cpus(1);
  return spec;
}

}  // namespace drover::testing

#endif  // DROVER_SCHEDULER_TESTING_CORE_FAKES_H_
