// Fakes of the task runtime's collaborators (seams.h) for unit tests of the core:
// a scheduler that grants leases and keeps actor records as the test says, workers at
// the other end of real socketpairs that answer tasks as the test says, and agents.
//
// The fake workers speak the real wire format (TaskFrame over a FramedSocket), so the
// core's framing, pipelining and failure paths run as in production; only what lies
// outside the process (the scheduler, agents, worker processes) is faked.
#ifndef DROVER_SDK_RUNTIME_TESTING_FAKE_SEAMS_H_
#define DROVER_SDK_RUNTIME_TESTING_FAKE_SEAMS_H_

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "proto/lease.pb.h"
#include "proto/task.pb.h"
#include "common/framed_socket.h"
#include "sdk/runtime/connection_loop.h"
#include "sdk/runtime/seams.h"
#include "tests/util/test_util.h"

namespace drover::internal::testing {

// What a fake worker does with a task it was sent.
enum class Answer {
  kReply,  // replies at once (FakeWorker::Reply's value)
  kHold,   // keeps it until the test calls Release, Fail or the worker dies
  kDie,    // closes the connection (the worker "dies" with the task in flight)
};

// One worker process at the far end of a socketpair.
class FakeWorker {
 public:
  FakeWorker(std::string worker_id, std::string node_id, std::string lease_id,
             std::string actor_id, int fd, std::function<Answer(const proto::TaskSpec&)> policy);
  ~FakeWorker();

  const std::string worker_id;
  const std::string node_id;
  const std::string lease_id;
  const std::string actor_id;

  // The tasks it was sent, in arrival order.
  std::vector<proto::TaskSpec> Received() ABSL_LOCKS_EXCLUDED(mu_);
  // Cancel frames it was sent (their seqs).
  std::vector<uint64_t> Cancels() ABSL_LOCKS_EXCLUDED(mu_);
  // Tasks held now.
  size_t Held() ABSL_LOCKS_EXCLUDED(mu_);
  // Replies to the held task `seq` (any, if 0): OK with `value` after `run_us`.
  bool Release(uint64_t seq, const std::string& value, int64_t run_us = 1);
  // Replies with an error.
  bool Fail(uint64_t seq, absl::StatusCode code, const std::string& message);
  // Replies with a stored result (the value is in node `node`'s store).
  bool ReleaseStored(uint64_t seq, const std::string& object_id, const std::string& node);
  // Sends the "lease revoked" frame.
  void Revoke(const std::string& reason);
  // Closes its end (the worker died).
  void Die();
  bool dead() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits up to `timeout` until `n` tasks were received.
  bool WaitReceived(size_t n, absl::Duration timeout = absl::Seconds(5));
  bool WaitDead(absl::Duration timeout = absl::Seconds(5));

 private:
  void Serve();
  bool SendReply(uint64_t seq, const proto::TaskReply& reply) ABSL_LOCKS_EXCLUDED(mu_);

  const int fd_;
  std::unique_ptr<FramedSocket> sock_;
  std::function<testing::Answer(const proto::TaskSpec&)> policy_;
  absl::Mutex mu_;
  std::vector<proto::TaskSpec> received_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> cancels_ ABSL_GUARDED_BY(mu_);
  std::deque<uint64_t> held_ ABSL_GUARDED_BY(mu_);
  bool dead_ ABSL_GUARDED_BY(mu_) = false;
  absl::Mutex send_mu_;
  std::thread thread_;
};

// Connections to fake workers. Each Connect makes a new worker on the
// node it was asked for (named "worker-of-<lease>", or "actor-worker-<n>"), answering
// as `policy` says.
class FakeWorkerConnector : public WorkerConnector {
 public:
  absl::StatusOr<std::unique_ptr<FramedSocket>> Connect(const std::string& node_id,
                                                       const std::string& unix_path,
                                                       const std::string& tcp_address,
                                                       const std::string& lease_id,
                                                       const std::string& actor_id) override;

  // How new workers answer (default: reply "ok:<function>" at once).
  void SetPolicy(std::function<Answer(const proto::TaskSpec&)> policy) ABSL_LOCKS_EXCLUDED(mu_);
  // The next `n` Connect calls fail (UNAVAILABLE).
  void FailNext(int n) ABSL_LOCKS_EXCLUDED(mu_);
  // Workers connected so far, in order.
  std::vector<std::shared_ptr<FakeWorker>> Workers() ABSL_LOCKS_EXCLUDED(mu_);
  std::shared_ptr<FakeWorker> Worker(size_t i, absl::Duration timeout = absl::Seconds(5));
  // The worker whose id is `worker_id` (null if none).
  std::shared_ptr<FakeWorker> ById(const std::string& worker_id) ABSL_LOCKS_EXCLUDED(mu_);
  int connects() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Mutex mu_;
  std::function<Answer(const proto::TaskSpec&)> policy_ ABSL_GUARDED_BY(mu_);
  int fail_next_ ABSL_GUARDED_BY(mu_) = 0;
  int connects_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::shared_ptr<FakeWorker>> workers_ ABSL_GUARDED_BY(mu_);
};

// The scheduler: grants a lease per request (unless told otherwise) and keeps actor
// records.
class FakeScheduler : public LeaseClient, public ActorDirectory {
 public:
  // How lease requests are answered (default: granted, lease-1, lease-2, ... on node
  // "n1"). Runs without the fake's lock.
  using LeasePolicy =
      std::function<absl::Status(const proto::RequestLeaseRequest&, proto::RequestLeaseReply*)>;
  void SetLeasePolicy(LeasePolicy policy) ABSL_LOCKS_EXCLUDED(mu_);

  absl::Status RequestLease(const proto::RequestLeaseRequest& req,
                            proto::RequestLeaseReply* reply) override ABSL_LOCKS_EXCLUDED(mu_);
  void ReturnLease(const std::string& lease_id, const std::string& reason) override
      ABSL_LOCKS_EXCLUDED(mu_);
  void CancelAll() override ABSL_LOCKS_EXCLUDED(mu_);

  absl::Status CreateActor(const proto::CreateActorRequest& req,
                           proto::CreateActorReply* reply) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status GetActor(const proto::GetActorRequest& req, proto::GetActorReply* reply) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status KillActor(const proto::KillActorRequest& req, proto::KillActorReply* reply) override
      ABSL_LOCKS_EXCLUDED(mu_);

  // Lease requests seen, in order.
  std::vector<proto::RequestLeaseRequest> LeaseRequests() ABSL_LOCKS_EXCLUDED(mu_);
  bool WaitLeaseRequests(size_t n, absl::Duration timeout = absl::Seconds(5));
  // Leases handed back by ReturnLease: (lease id, reason).
  std::vector<std::pair<std::string, std::string>> Returned() ABSL_LOCKS_EXCLUDED(mu_);
  bool cancelled() ABSL_LOCKS_EXCLUDED(mu_);

  // Actors: CreateActor records the actor ALIVE at "actor:<id>" on node n1 unless
  // `create_error` is set (then CreateActor fails with it, `times` times; -1: always).
  void SetCreateError(absl::Status s, int times = -1) ABSL_LOCKS_EXCLUDED(mu_);
  // Replaces an actor's record (its version is bumped) and wakes GetActor waiters.
  void SetActor(proto::ActorInfo info) ABSL_LOCKS_EXCLUDED(mu_);
  std::optional<proto::ActorInfo> Actor(const std::string& id) ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<proto::CreateActorRequest> Creations() ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<proto::KillActorRequest> Kills() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Mutex mu_;
  LeasePolicy policy_ ABSL_GUARDED_BY(mu_);
  int next_lease_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<proto::RequestLeaseRequest> requests_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<std::string, std::string>> returned_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status create_error_ ABSL_GUARDED_BY(mu_);
  int create_error_times_ ABSL_GUARDED_BY(mu_) = -1;
  std::map<std::string, proto::ActorInfo> actors_ ABSL_GUARDED_BY(mu_);
  std::vector<proto::CreateActorRequest> creations_ ABSL_GUARDED_BY(mu_);
  std::vector<proto::KillActorRequest> kills_ ABSL_GUARDED_BY(mu_);
  absl::CondVar changed_;  // an actor record changed
};

// Agents: say how a worker ended (as the test sets) and kill workers of a connector.
class FakeAgents : public WorkerAgents {
 public:
  explicit FakeAgents(FakeWorkerConnector* workers) : workers_(workers) {}
  std::string DescribeExit(const std::string& agent_address, const std::string& worker_id,
                           absl::Duration wait) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status KillWorker(const std::string& agent_address, const std::string& worker_id,
                          const std::string& reason) override ABSL_LOCKS_EXCLUDED(mu_);
  void NoteAgent(const std::string& node_id, const std::string& agent_address) override
      ABSL_LOCKS_EXCLUDED(mu_);

  void SetExitText(std::string text) ABSL_LOCKS_EXCLUDED(mu_);
  // KillWorker calls: (worker id, reason).
  std::vector<std::pair<std::string, std::string>> Kills() ABSL_LOCKS_EXCLUDED(mu_);
  std::map<std::string, std::string> Noted() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  FakeWorkerConnector* const workers_;
  absl::Mutex mu_;
  std::string exit_text_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<std::string, std::string>> kills_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> noted_ ABSL_GUARDED_BY(mu_);
};

// Workers that run no thread and never answer: the far ends of socketpairs, held open
// until the connector goes. For counting the threads of the process under test.
class SilentWorkerConnector : public WorkerConnector {
 public:
  ~SilentWorkerConnector() override;
  absl::StatusOr<std::unique_ptr<FramedSocket>> Connect(const std::string& node_id,
                                                       const std::string& unix_path,
                                                       const std::string& tcp_address,
                                                       const std::string& lease_id,
                                                       const std::string& actor_id) override
      ABSL_LOCKS_EXCLUDED(mu_);
  int connects() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Mutex mu_;
  std::vector<int> far_ends_ ABSL_GUARDED_BY(mu_);
};

// The threads of this process now (/proc/self/task).
int ThreadCount();

// An owner for a core under test: job "job1", owner `owner`, tag `tag`, package hash
// "pkg-hash", and object ids "job1.<tag>.<n>" counted in `*ids` (which must outlive the
// identity's use).
OwnerIdentity TestIdentity(std::atomic<int>* ids, const std::string& tag = "abcd1234",
                           const std::string& owner = "job1/42@n1");

// A test actor in this process's function registry (registered on the first call): a
// factory "MakeCounter" and a method "Counter::Add", under these keys.
inline constexpr char kTestActorFactory[] = "test-actor-factory";
inline constexpr char kTestActorMethod[] = "test-actor-method";
void RegisterTestActor();

// Holds a ConnectionLoop's thread, for tests of what happens while it is busy: a peer
// the loop watches sends one frame, whose handler waits until LetGo. Declare it before
// the loop (the loop stops, and forgets its socket, first), and call LetGo before the
// loop stops (a cleanup declared after the loop), or its Stop waits for ever.
class LoopHolder {
 public:
  LoopHolder();
  // Makes `loop` watch the near end and sends the frame; true once the loop's thread
  // is in the handler, within `timeout`.
  bool Hold(ConnectionLoop& loop, absl::Duration timeout);
  // Idempotent.
  void LetGo();

 private:
  std::unique_ptr<FramedSocket> near_, far_;
  absl::Notification held_, let_go_;
};

using ::drover::testing::WaitFor;

}  // namespace drover::internal::testing

#endif  // DROVER_SDK_RUNTIME_TESTING_FAKE_SEAMS_H_
