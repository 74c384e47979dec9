#include "sdk/runtime/testing/fake_seams.h"

#include <dirent.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <typeinfo>

#include "absl/strings/str_cat.h"
#include "drover/internal/registry.h"
#include "absl/time/clock.h"

namespace drover::internal::testing {

// --- SilentWorkerConnector ---

SilentWorkerConnector::~SilentWorkerConnector() {
  absl::MutexLock l(&mu_);
  for (int fd : far_ends_) ::close(fd);
}

absl::StatusOr<std::unique_ptr<FramedSocket>> SilentWorkerConnector::Connect(
    const std::string& node_id, const std::string& unix_path, const std::string& tcp_address,
    const std::string& lease_id, const std::string& actor_id) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return absl::InternalError("socketpair failed");
  }
  absl::MutexLock l(&mu_);
  far_ends_.push_back(fds[1]);
  return std::make_unique<FramedSocket>(fds[0]);
}

int SilentWorkerConnector::connects() {
  absl::MutexLock l(&mu_);
  return static_cast<int>(far_ends_.size());
}

OwnerIdentity TestIdentity(std::atomic<int>* ids, const std::string& tag,
                           const std::string& owner) {
  OwnerIdentity id;
  id.job_id = "job1";
  id.owner = owner;
  id.owner_tag = tag;
  id.package.set_hash("pkg-hash");
  id.new_id = [ids, prefix = absl::StrCat("job1.", tag, ".")] {
    return absl::StrCat(prefix, ++*ids);
  };
  return id;
}

void RegisterTestActor() {
  static const bool done = [] {
    struct Counter {};
    FunctionInfo factory;
    factory.name = "MakeCounter";
    factory.kind = FunctionKind::kFactory;
    factory.cls = &typeid(Counter);
    RegisterFunction(kTestActorFactory, factory);
    FunctionInfo method;
    method.name = "Counter::Add";
    method.kind = FunctionKind::kMethod;
    RegisterFunction(kTestActorMethod, method);
    return true;
  }();
  (void)done;
}

LoopHolder::LoopHolder() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) std::abort();
  near_ = std::make_unique<FramedSocket>(fds[0]);
  far_ = std::make_unique<FramedSocket>(fds[1]);
}

bool LoopHolder::Hold(ConnectionLoop& loop, absl::Duration timeout) {
  absl::Status watched = loop.Watch(
      near_.get(), "the blocking peer",
      [this](std::string_view) {
        held_.Notify();
        let_go_.WaitForNotification();
      },
      [](const absl::Status&) {});
  if (!watched.ok()) return false;
  proto::TaskFrame frame;
  frame.mutable_cancel()->set_seq(1);
  if (!far_->Send(frame).ok()) return false;
  return held_.WaitForNotificationWithTimeout(timeout);
}

void LoopHolder::LetGo() {
  if (!let_go_.HasBeenNotified()) let_go_.Notify();
}

int ThreadCount() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
  }
  return n;
}

// --- FakeWorker ---

FakeWorker::FakeWorker(std::string worker_id, std::string node_id, std::string lease_id,
                       std::string actor_id, int fd,
                       std::function<testing::Answer(const proto::TaskSpec&)> policy)
    : worker_id(std::move(worker_id)),
      node_id(std::move(node_id)),
      lease_id(std::move(lease_id)),
      actor_id(std::move(actor_id)),
      fd_(fd),
      sock_(std::make_unique<FramedSocket>(fd)),
      policy_(std::move(policy)) {
  thread_ = std::thread([this] { Serve(); });
}

FakeWorker::~FakeWorker() {
  Die();
  if (thread_.joinable()) thread_.join();
}

void FakeWorker::Serve() {
  for (;;) {
    proto::TaskFrame frame;
    if (!sock_->Read(&frame).ok()) break;
    if (frame.has_cancel()) {
      bool held = false;
      {
        absl::MutexLock l(&mu_);
        cancels_.push_back(frame.cancel().seq());
        held = std::find(held_.begin(), held_.end(), frame.cancel().seq()) != held_.end();
      }
      // As a real worker: a held (running) task that is cancelled ends CANCELLED.
      if (held) Fail(frame.cancel().seq(), absl::StatusCode::kCancelled, "task cancelled");
      continue;
    }
    if (!frame.has_push()) continue;
    const proto::TaskSpec spec = frame.push();
    testing::Answer a = policy_ ? policy_(spec) : testing::Answer::kReply;
    {
      absl::MutexLock l(&mu_);
      received_.push_back(spec);
      if (a == testing::Answer::kHold) held_.push_back(spec.seq());
    }
    if (a == testing::Answer::kReply) {
      proto::TaskReply r;
      r.set_seq(spec.seq());
      r.set_value(absl::StrCat("ok:", spec.function()));
      r.set_run_us(1);
      SendReply(spec.seq(), r);
    } else if (a == testing::Answer::kDie) {
      Die();
      break;
    }
  }
  absl::MutexLock l(&mu_);
  dead_ = true;
}

bool FakeWorker::SendReply(uint64_t seq, const proto::TaskReply& reply) {
  {
    absl::MutexLock l(&mu_);
    if (dead_) return false;
    auto it = std::find(held_.begin(), held_.end(), seq);
    if (it != held_.end()) held_.erase(it);
  }
  proto::TaskFrame f;
  *f.mutable_reply() = reply;
  absl::MutexLock l(&send_mu_);
  return sock_->Send(f).ok();
}

namespace {

uint64_t Pick(std::deque<uint64_t>& held, uint64_t seq) { return seq != 0 ? seq : held.front(); }

}  // namespace

bool FakeWorker::Release(uint64_t seq, const std::string& value, int64_t run_us) {
  {
    absl::MutexLock l(&mu_);
    if (held_.empty()) return false;
    seq = Pick(held_, seq);
  }
  proto::TaskReply r;
  r.set_seq(seq);
  r.set_value(value);
  r.set_run_us(run_us);
  return SendReply(seq, r);
}

bool FakeWorker::Fail(uint64_t seq, absl::StatusCode code, const std::string& message) {
  {
    absl::MutexLock l(&mu_);
    if (held_.empty()) return false;
    seq = Pick(held_, seq);
  }
  proto::TaskReply r;
  r.set_seq(seq);
  r.set_code(static_cast<int>(code));
  r.set_message(message);
  return SendReply(seq, r);
}

bool FakeWorker::ReleaseStored(uint64_t seq, const std::string& object_id, const std::string& node) {
  {
    absl::MutexLock l(&mu_);
    if (held_.empty()) return false;
    seq = Pick(held_, seq);
  }
  proto::TaskReply r;
  r.set_seq(seq);
  r.mutable_stored()->set_object_id(object_id);
  r.mutable_stored()->set_node_id(node);
  r.mutable_stored()->set_size(1 << 20);
  r.set_run_us(1);
  return SendReply(seq, r);
}

void FakeWorker::Revoke(const std::string& reason) {
  proto::TaskFrame f;
  f.mutable_revoked()->set_reason(reason);
  absl::MutexLock l(&send_mu_);
  sock_->Send(f).IgnoreError();
}

void FakeWorker::Die() {
  ::shutdown(fd_, SHUT_RDWR);
}

bool FakeWorker::dead() {
  absl::MutexLock l(&mu_);
  return dead_;
}

std::vector<proto::TaskSpec> FakeWorker::Received() {
  absl::MutexLock l(&mu_);
  return received_;
}

std::vector<uint64_t> FakeWorker::Cancels() {
  absl::MutexLock l(&mu_);
  return cancels_;
}

size_t FakeWorker::Held() {
  absl::MutexLock l(&mu_);
  return held_.size();
}

bool FakeWorker::WaitReceived(size_t n, absl::Duration timeout) {
  return WaitFor([&] { return Received().size() >= n; }, timeout);
}

bool FakeWorker::WaitDead(absl::Duration timeout) {
  return WaitFor([&] { return dead(); }, timeout);
}

// --- FakeWorkerConnector ---

absl::StatusOr<std::unique_ptr<FramedSocket>> FakeWorkerConnector::Connect(
    const std::string& node_id, const std::string& unix_path, const std::string& tcp_address,
    const std::string& lease_id, const std::string& actor_id) {
  std::function<testing::Answer(const proto::TaskSpec&)> policy;
  std::string worker_id;
  {
    absl::MutexLock l(&mu_);
    ++connects_;
    if (fail_next_ > 0) {
      --fail_next_;
      return absl::UnavailableError(absl::StrCat("connection refused (", unix_path, ")"));
    }
    policy = policy_;
    // Named as the fake scheduler names a lease's worker.
    worker_id = lease_id.empty() ? absl::StrCat("actor-worker-", workers_.size() + 1)
                                 : absl::StrCat("worker-of-", lease_id);
  }
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return absl::InternalError("socketpair failed");
  }
  auto w = std::make_shared<FakeWorker>(worker_id, node_id, lease_id, actor_id, fds[1],
                                        std::move(policy));
  {
    absl::MutexLock l(&mu_);
    workers_.push_back(w);
  }
  return std::make_unique<FramedSocket>(fds[0]);
}

void FakeWorkerConnector::SetPolicy(std::function<testing::Answer(const proto::TaskSpec&)> policy) {
  absl::MutexLock l(&mu_);
  policy_ = std::move(policy);
}

void FakeWorkerConnector::FailNext(int n) {
  absl::MutexLock l(&mu_);
  fail_next_ = n;
}

std::vector<std::shared_ptr<FakeWorker>> FakeWorkerConnector::Workers() {
  absl::MutexLock l(&mu_);
  return workers_;
}

std::shared_ptr<FakeWorker> FakeWorkerConnector::Worker(size_t i, absl::Duration timeout) {
  std::shared_ptr<FakeWorker> w;
  WaitFor(
      [&] {
        absl::MutexLock l(&mu_);
        if (workers_.size() > i) w = workers_[i];
        return w != nullptr;
      },
      timeout);
  return w;
}

std::shared_ptr<FakeWorker> FakeWorkerConnector::ById(const std::string& worker_id) {
  absl::MutexLock l(&mu_);
  for (const auto& w : workers_) {
    if (w->worker_id == worker_id) return w;
  }
  return nullptr;
}

int FakeWorkerConnector::connects() {
  absl::MutexLock l(&mu_);
  return connects_;
}

// --- FakeScheduler ---

void FakeScheduler::SetLeasePolicy(LeasePolicy policy) {
  absl::MutexLock l(&mu_);
  policy_ = std::move(policy);
}

absl::Status FakeScheduler::RequestLease(const proto::RequestLeaseRequest& req,
                                         proto::RequestLeaseReply* reply) {
  LeasePolicy policy;
  int n = 0;
  {
    absl::MutexLock l(&mu_);
    requests_.push_back(req);
    if (cancelled_) return absl::CancelledError("cancelled");
    policy = policy_;
    n = next_lease_++;
  }
  if (policy) return policy(req, reply);
  reply->set_granted(true);
  reply->set_lease_id(absl::StrCat("lease-", n));
  reply->set_worker_id(absl::StrCat("worker-of-lease-", n));
  reply->set_node_id("n1");
  reply->set_agent_address("agent-n1:1");
  reply->set_unix_path(absl::StrCat("/fake/lease-", n));
  return absl::OkStatus();
}

void FakeScheduler::ReturnLease(const std::string& lease_id, const std::string& reason) {
  absl::MutexLock l(&mu_);
  returned_.emplace_back(lease_id, reason);
}

void FakeScheduler::CancelAll() {
  absl::MutexLock l(&mu_);
  cancelled_ = true;
}

std::vector<proto::RequestLeaseRequest> FakeScheduler::LeaseRequests() {
  absl::MutexLock l(&mu_);
  return requests_;
}

bool FakeScheduler::WaitLeaseRequests(size_t n, absl::Duration timeout) {
  return WaitFor([&] { return LeaseRequests().size() >= n; }, timeout);
}

std::vector<std::pair<std::string, std::string>> FakeScheduler::Returned() {
  absl::MutexLock l(&mu_);
  return returned_;
}

bool FakeScheduler::cancelled() {
  absl::MutexLock l(&mu_);
  return cancelled_;
}

void FakeScheduler::SetCreateError(absl::Status s, int times) {
  absl::MutexLock l(&mu_);
  create_error_ = std::move(s);
  create_error_times_ = times;
}

absl::Status FakeScheduler::CreateActor(const proto::CreateActorRequest& req,
                                        proto::CreateActorReply* reply) {
  absl::MutexLock l(&mu_);
  creations_.push_back(req);
  if (!create_error_.ok() && create_error_times_ != 0) {
    if (create_error_times_ > 0) --create_error_times_;
    return create_error_;
  }
  proto::ActorInfo& info = actors_[req.creation().actor_id()];
  info.set_actor_id(req.creation().actor_id());
  info.set_name(req.creation().name());
  info.set_class_name(req.creation().class_name());
  info.set_state(proto::ACTOR_ALIVE);
  info.set_node_id("n1");
  info.set_unix_path(absl::StrCat("actor:", req.creation().actor_id()));
  info.set_version(info.version() + 1);
  *reply->mutable_actor() = info;
  changed_.SignalAll();
  return absl::OkStatus();
}

absl::Status FakeScheduler::GetActor(const proto::GetActorRequest& req,
                                     proto::GetActorReply* reply) {
  const absl::Time deadline = absl::Now() + absl::Milliseconds(req.wait_ms());
  absl::MutexLock l(&mu_);
  for (;;) {
    const proto::ActorInfo* found = nullptr;
    for (const auto& [id, info] : actors_) {
      if ((!req.actor_id().empty() && id == req.actor_id()) ||
          (req.actor_id().empty() && !req.name().empty() && info.name() == req.name())) {
        found = &info;
      }
    }
    // An id or name the scheduler has no record of: NOT_FOUND at once.
    if (found == nullptr) return absl::NotFoundError(absl::StrCat("no actor ", req.actor_id(), req.name()));
    if (found != nullptr && found->version() > req.after_version()) {
      *reply->mutable_actor() = *found;
      return absl::OkStatus();
    }
    // Wait for a change, as the scheduler holds the call (bounded by the request).
    if (absl::Now() >= deadline || changed_.WaitWithDeadline(&mu_, deadline)) {
      *reply->mutable_actor() = *found;
      return absl::OkStatus();
    }
  }
}

absl::Status FakeScheduler::KillActor(const proto::KillActorRequest& req,
                                      proto::KillActorReply*) {
  absl::MutexLock l(&mu_);
  kills_.push_back(req);
  auto it = actors_.find(req.actor_id());
  if (it == actors_.end()) return absl::NotFoundError("no such actor");
  it->second.set_state(proto::ACTOR_DEAD);
  it->second.set_reason(req.reason());
  it->second.set_version(it->second.version() + 1);
  changed_.SignalAll();
  return absl::OkStatus();
}

void FakeScheduler::SetActor(proto::ActorInfo info) {
  absl::MutexLock l(&mu_);
  proto::ActorInfo& slot = actors_[info.actor_id()];
  info.set_version(slot.version() + 1);
  slot = std::move(info);
  changed_.SignalAll();
}

std::optional<proto::ActorInfo> FakeScheduler::Actor(const std::string& id) {
  absl::MutexLock l(&mu_);
  auto it = actors_.find(id);
  if (it == actors_.end()) return std::nullopt;
  return it->second;
}

std::vector<proto::CreateActorRequest> FakeScheduler::Creations() {
  absl::MutexLock l(&mu_);
  return creations_;
}

std::vector<proto::KillActorRequest> FakeScheduler::Kills() {
  absl::MutexLock l(&mu_);
  return kills_;
}

// --- FakeAgents ---

std::string FakeAgents::DescribeExit(const std::string&, const std::string&, absl::Duration) {
  absl::MutexLock l(&mu_);
  return exit_text_;
}

absl::Status FakeAgents::KillWorker(const std::string&, const std::string& worker_id,
                                    const std::string& reason) {
  {
    absl::MutexLock l(&mu_);
    kills_.emplace_back(worker_id, reason);
  }
  for (const auto& w : workers_->Workers()) {
    if (w->worker_id == worker_id) w->Die();
  }
  return absl::OkStatus();
}

void FakeAgents::NoteAgent(const std::string& node_id, const std::string& agent_address) {
  absl::MutexLock l(&mu_);
  noted_[node_id] = agent_address;
}

void FakeAgents::SetExitText(std::string text) {
  absl::MutexLock l(&mu_);
  exit_text_ = std::move(text);
}

std::vector<std::pair<std::string, std::string>> FakeAgents::Kills() {
  absl::MutexLock l(&mu_);
  return kills_;
}

std::map<std::string, std::string> FakeAgents::Noted() {
  absl::MutexLock l(&mu_);
  return noted_;
}

}  // namespace drover::internal::testing
