#include "node_agent/worker_pool.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/exit_text.h"
#include "common/files.h"
#include "common/log.h"
#include "common/paths.h"
#include "common/status_macros.h"

namespace drover {
namespace {

constexpr absl::Duration kLoopPeriod = absl::Seconds(1);
// Exited workers are remembered this long (for owners asking how they ended).
constexpr absl::Duration kKeepExited = absl::Minutes(5);


}  // namespace

WorkerPool::WorkerPool(WorkerPoolOptions options, ProcessManager* pm, PackageCache* packages,
                       Callbacks callbacks)
    : options_(std::move(options)), pm_(pm), packages_(packages), callbacks_(std::move(callbacks)) {}

WorkerPool::~WorkerPool() { Shutdown(); }

absl::Status WorkerPool::Start() {
  // Room for the control socket and the workers' "w-<n>.sock".
  DROVER_ASSIGN_OR_RETURN(socket_dir_, SocketDir(options_.dir + "/workers", "workers", "w-9999999.sock"));
  control_path_ = socket_dir_ + "/control.sock";
  absl::StatusOr<int> fd = ListenUnix(control_path_);
  if (!fd.ok()) return fd.status();
  listen_fd_ = *fd;
  SetNonBlocking(listen_fd_).IgnoreError();
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void WorkerPool::Shutdown() {
  {
    absl::MutexLock l(&mu_);
    if (stop_) return;
    stop_ = true;
    changed_.SignalAll();
  }
  if (wake_fd_ >= 0) {
    uint64_t one = 1;
    (void)::write(wake_fd_, &one, sizeof(one));
  }
  if (thread_.joinable()) thread_.join();
  absl::MutexLock l(&mu_);
  for (auto& [fd, id] : by_fd_) ::close(fd);
  by_fd_.clear();
  for (auto& [fd, r] : unregistered_) ::close(fd);
  unregistered_.clear();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  listen_fd_ = wake_fd_ = -1;
  ::unlink(control_path_.c_str());
  RemoveSocketDir(socket_dir_, options_.dir + "/workers");
}

template <typename Pred>
bool WorkerPool::AwaitLocked(absl::Time deadline, Pred pred) {
  while (!pred()) {
    if (stop_) return false;
    if (changed_.WaitWithDeadline(&mu_, deadline)) return pred();
  }
  return true;
}

proto::StartWorkerReply WorkerPool::ReplyFor(const Worker& w) const {
  proto::StartWorkerReply r;
  r.set_worker_id(w.id);
  r.set_unix_path(w.unix_path);
  r.set_tcp_address(absl::StrCat(options_.node_ip.find(':') != std::string::npos
                                     ? absl::StrCat("[", options_.node_ip, "]")
                                     : options_.node_ip,
                                 ":", w.tcp_port));
  r.set_pid(w.pid);
  return r;
}

absl::Status WorkerPool::SendControl(Worker& w, const proto::WorkerControl& msg) {
  if (w.control_fd < 0) return absl::UnavailableError(absl::StrCat("worker ", w.id, " is not connected"));
  std::string frame;
  AppendFrame(msg, &frame);
  size_t off = 0;
  while (off < frame.size()) {
    ssize_t n = ::send(w.control_fd, frame.data() + off, frame.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      struct pollfd p{w.control_fd, POLLOUT, 0};
      ::poll(&p, 1, 100);  // control messages are tiny; the worker reads them promptly
      continue;
    }
    if (n < 0) return absl::UnavailableError(absl::StrCat("worker ", w.id, ": ", std::strerror(errno)));
    off += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<WorkerPool::Worker*> WorkerPool::Spawn(const proto::StartWorkerRequest& req,
                                                      const std::string& key) {
  auto w = std::make_unique<Worker>();
  const int n = next_worker_++;
  w->id = absl::StrCat("w-", n);
  w->job_id = req.job_id();
  w->key = key;
  w->generation = kFirstWorkerGeneration + n;
  Worker* raw = w.get();
  workers_[w->id] = std::move(w);
  return raw;
}

absl::StatusOr<proto::StartWorkerReply> WorkerPool::StartWorker(const proto::StartWorkerRequest& req) {
  if (req.lease_id().empty() || req.job_id().empty()) {
    return absl::InvalidArgumentError("StartWorker needs a lease id and a job id");
  }
  // Fetch the program first (without the lock): once per node per package.
  absl::StatusOr<std::string> binary = packages_->Ensure(req.package().hash());
  if (!binary.ok()) return binary.status();
  const proto::Resources& s = req.shape();
  std::string key = absl::StrCat(req.job_id(), "|", req.package().hash(), "|", s.cpus(), "|",
                                 s.memory_bytes(), "|", absl::StrJoin(req.gpu_ids(), ","));
  std::map<std::string, double> custom(s.custom().begin(), s.custom().end());
  for (const auto& [k, v] : custom) absl::StrAppend(&key, "|", k, "=", v);
  const absl::Time deadline = absl::Now() + options_.start_timeout;

  absl::MutexLock l(&mu_);
  if (stop_) return absl::UnavailableError("the agent is shutting down");
  Worker* w = nullptr;
  if (auto it = leases_.find(req.lease_id()); it != leases_.end()) {
    w = workers_[it->second].get();  // a retried request: the same worker
    AwaitLocked(deadline, [&] { return w->state != State::kStarting || w->exit.has_value(); });
    if (w->exit) return absl::UnavailableError(absl::StrCat("worker ", w->id, " ", DescribeExit(*w->exit)));
    return ReplyFor(*w);
  }
  bool reused = false;
  for (auto& [id, cand] : workers_) {
    if (cand->state == State::kIdle && cand->key == key && cand->control_fd >= 0 && !cand->exit) {
      w = cand.get();
      reused = true;
      ++reused_;
      break;
    }
  }
  if (w == nullptr) {
    absl::StatusOr<Worker*> made = Spawn(req, key);
    if (!made.ok()) return made.status();
    w = *made;
    proto::StartProcessesRequest sp;
    sp.set_job_id(req.job_id());
    sp.set_generation(w->generation);
    sp.add_command(*binary);
    for (int i = 1; i < req.package().argv_size(); ++i) sp.add_command(req.package().argv(i));
    for (const auto& [k, v] : req.package().env()) (*sp.mutable_env())[k] = v;
    auto& env = *sp.mutable_env();
    env["DROVER_WORKER_ID"] = w->id;
    env["DROVER_WORKER_CONTROL"] = control_path_;
    env["DROVER_WORKER_DIR"] = socket_dir_;
    env["DROVER_NODE_IP"] = options_.node_ip;
    env["DROVER_EXPECTED_BUILD_ID"] = req.package().build_id();
    env["DROVER_PACKAGE_HASH"] = req.package().hash();
    struct stat st;
    if (!req.package().cwd().empty() && ::stat(req.package().cwd().c_str(), &st) == 0 &&
        S_ISDIR(st.st_mode)) {
      sp.set_cwd(req.package().cwd());
    }
    sp.set_world_size(1);
    sp.set_local_world_size(1);
    sp.set_scheduler_address(req.scheduler_address());
    sp.set_task_worker(true);
    proto::ProcessSpec* p = sp.add_processes();
    p->set_rank(w->generation - kFirstWorkerGeneration);
    for (int g : req.gpu_ids()) p->add_gpu_ids(g);
    int port = 0;
    mu_.Unlock();  // the process manager's thread may be calling OnProcessExit
    absl::Status started = pm_->Start(sp, &port);
    mu_.Lock();
    if (!started.ok()) {
      w->state = State::kDead;
      return absl::Status(started.code(), absl::StrCat("cannot start a worker for job ", req.job_id(),
                                                       ": ", started.message()));
    }
    const bool ready = AwaitLocked(deadline, [&] {
      return w->control_fd >= 0 || !w->start_error.empty() || w->exit.has_value();
    });
    if (w->exit && w->start_error.empty()) {
      // Its reason, sent just before it exited, may still be on the way.
      AwaitLocked(std::min(deadline, absl::Now() + absl::Milliseconds(500)),
                  [&] { return !w->start_error.empty(); });
    }
    if (!w->start_error.empty()) {
      Stop(*w, "refused to start");
      return absl::FailedPreconditionError(absl::StrCat("worker ", w->id, " of job ", req.job_id(),
                                                        " refused to start: ", w->start_error));
    }
    if (w->exit) {
      // The program itself fails to start here: starting it again would fail the same way.
      return absl::FailedPreconditionError(absl::StrCat("worker ", w->id, " of job ", req.job_id(),
                                                 " ", DescribeExit(*w->exit),
                                                 " before it registered (does the program call "
                                                 "drover::Init first thing in main?)"));
    }
    if (!ready) {
      Stop(*w, "did not register in time");
      return absl::DeadlineExceededError(absl::StrCat(
          "worker ", w->id, " of job ", req.job_id(), " did not register within ",
          absl::FormatDuration(options_.start_timeout),
          " (does the program call drover::Init first thing in main?)"));
    }
  }
  leases_[req.lease_id()] = w->id;
  w->lease_id = req.lease_id();
  w->owner = req.owner();
  w->shape = req.shape();
  w->gpu_ids.assign(req.gpu_ids().begin(), req.gpu_ids().end());
  if (req.has_actor()) {
    w->state = State::kActor;
    w->actor_id = req.actor().actor_id();
    w->actor_created.reset();
    proto::WorkerControl msg;
    *msg.mutable_create_actor() = req.actor();
    absl::Status sent = SendControl(*w, msg);
    if (sent.ok()) {
      // The factory may load a model: no deadline but the worker's life.
      AwaitLocked(absl::InfiniteFuture(), [&] { return w->actor_created.has_value() || w->exit.has_value(); });
    }
    absl::Status created = !sent.ok()                  ? sent
                           : w->actor_created.has_value() ? *w->actor_created
                           : w->exit ? absl::UnavailableError(absl::StrCat("its worker ", w->id, " ", DescribeExit(*w->exit)))
                                     : absl::UnavailableError("the agent is shutting down");
    if (!created.ok()) {
      leases_.erase(req.lease_id());
      Stop(*w, "its actor's factory failed");
      return created;
    }
  } else {
    w->state = State::kLeased;
    proto::WorkerControl msg;
    msg.mutable_assign()->set_lease_id(req.lease_id());
    msg.mutable_assign()->set_owner(req.owner());
    if (absl::Status sent = SendControl(*w, msg); !sent.ok()) {
      leases_.erase(req.lease_id());
      return sent;
    }
  }
  proto::StartWorkerReply reply = ReplyFor(*w);
  reply.set_reused(reused);
  return reply;
}

void WorkerPool::Stop(Worker& w, const std::string& reason) {
  if (w.exit) return;
  DROVER_LOG(INFO) << "stopping worker " << w.id << " of job " << w.job_id << ": " << reason;
  w.state = State::kDead;
  const std::string job = w.job_id;
  const int gen = w.generation;
  const absl::Duration grace = options_.kill_grace;
  // Not under mu_: the process manager's thread may be waiting for it in OnProcessExit.
  std::thread([pm = pm_, job, gen, grace, why = absl::StrCat("worker ", w.id, ": ", reason)] {
    pm->StopGeneration(job, gen, grace, why);
  }).detach();
}

absl::Status WorkerPool::KillWorker(const proto::KillWorkerRequest& req) {
  absl::MutexLock l(&mu_);
  std::string id = req.worker_id();
  if (id.empty()) {
    auto it = leases_.find(req.lease_id());
    if (it == leases_.end()) return absl::OkStatus();  // gone already
    id = it->second;
  }
  auto it = workers_.find(id);
  if (it == workers_.end()) return absl::OkStatus();
  Stop(*it->second, req.reason().empty() ? "killed on request" : req.reason());
  return absl::OkStatus();
}

std::vector<proto::HeldLease> WorkerPool::HeldLeases() {
  absl::MutexLock l(&mu_);
  std::vector<proto::HeldLease> out;
  for (const auto& [id, w] : workers_) {
    if (w->exit || w->state == State::kDead) continue;
    proto::HeldLease h;
    // Idle and starting workers go with no lease id: the scheduler learns which jobs
    // have workers here (their end must stop them) and stops those of ended jobs.
    const bool holds = w->state == State::kLeased || w->state == State::kActor;
    if (holds) h.set_lease_id(w->lease_id);
    h.set_job_id(w->job_id);
    h.set_owner(w->owner);
    *h.mutable_shape() = w->shape;
    for (int g : w->gpu_ids) h.add_gpu_ids(g);
    h.set_worker_id(w->id);
    h.set_actor_id(w->actor_id);
    out.push_back(std::move(h));
  }
  return out;
}

absl::Status WorkerPool::RevokeLease(const std::string& lease_id, const std::string& reason) {
  absl::MutexLock l(&mu_);
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return absl::OkStatus();  // ended already
  auto w = workers_.find(it->second);
  if (w == workers_.end() || w->second->state != State::kLeased || w->second->lease_id != lease_id) {
    return absl::OkStatus();
  }
  proto::WorkerControl msg;
  msg.mutable_revoke()->set_lease_id(lease_id);
  msg.mutable_revoke()->set_reason(reason);
  return SendControl(*w->second, msg);
}

absl::StatusOr<proto::WaitWorkerExitReply> WorkerPool::WaitWorkerExit(const std::string& worker_id,
                                                                     absl::Duration wait) {
  absl::MutexLock l(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) {
    return absl::NotFoundError(absl::StrCat("no worker ", worker_id, " on this node"));
  }
  Worker* w = it->second.get();
  AwaitLocked(absl::Now() + wait, [&] { return w->exit.has_value(); });
  proto::WaitWorkerExitReply reply;
  reply.set_exited(w->exit.has_value());
  if (w->exit) *reply.mutable_exit() = *w->exit;
  return reply;
}

void WorkerPool::OnProcessExit(const std::string& job_id, const proto::ExitInfo& exit) {
  std::string id, lease, actor;
  {
    absl::MutexLock l(&mu_);
    for (auto& [wid, w] : workers_) {
      if (w->generation == exit.generation() && w->job_id == job_id) {
        w->exit = exit;
        w->state = State::kDead;
        w->idle_since = absl::Now();
        id = w->id;
        lease = w->lease_id;
        actor = w->actor_id;
        if (!lease.empty()) leases_.erase(lease);
        break;
      }
    }
    changed_.SignalAll();
  }
  pm_->Forget(job_id, exit.generation());
  if (!id.empty() && callbacks_.worker_exited) callbacks_.worker_exited(id, lease, actor, exit);
}

void WorkerPool::JobEnded(const std::string& job_id) {
  absl::MutexLock l(&mu_);
  for (auto& [id, w] : workers_) {
    if (w->job_id == job_id && !w->exit) w->state = State::kDead;  // never reused again
  }
}

std::set<std::string> WorkerPool::JobsWithWorkers() {
  absl::MutexLock l(&mu_);
  std::set<std::string> jobs;
  for (auto& [id, w] : workers_) {
    if (!w->exit && w->state != State::kDead) jobs.insert(w->job_id);
  }
  return jobs;
}

WorkerPool::Counts WorkerPool::counts() {
  absl::MutexLock l(&mu_);
  Counts c;
  c.reused = reused_;
  for (auto& [id, w] : workers_) {
    if (w->exit) continue;
    switch (w->state) {
      case State::kStarting: ++c.starting; break;
      case State::kIdle: ++c.idle; break;
      case State::kLeased: ++c.leased; break;
      case State::kActor: ++c.actors; break;
      case State::kDead: break;
    }
  }
  return c;
}

void WorkerPool::OnControlFrame(Worker* w, int fd, std::string_view payload) {
  proto::WorkerControl msg;
  if (!msg.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) return;
  if (msg.has_actor_created() && w != nullptr) {
    const proto::ActorCreated& c = msg.actor_created();
    w->actor_created = c.code() == static_cast<int>(absl::StatusCode::kOk)
                           ? absl::OkStatus()
                           : absl::Status(static_cast<absl::StatusCode>(c.code()), c.message());
    changed_.SignalAll();
  } else if (msg.has_lease_ended() && w != nullptr) {
    if (w->state == State::kLeased && w->lease_id == msg.lease_ended().lease_id()) {
      const std::string lease = w->lease_id;
      leases_.erase(lease);
      w->lease_id.clear();
      w->state = State::kIdle;
      w->idle_since = absl::Now();
      if (callbacks_.lease_returned) {
        // Called from the loop thread after the lock is released (see Loop).
        returned_.emplace_back(lease, "its holder disconnected");
      }
    }
  }
  (void)fd;
}

void WorkerPool::Loop() {
  std::vector<struct pollfd> fds;
  for (;;) {
    std::vector<std::pair<std::string, std::string>> returned;
    {
      absl::MutexLock l(&mu_);
      if (stop_) return;
      returned.swap(returned_);
      // Idle workers past their time, and old records of exited ones.
      const absl::Time now = absl::Now();
      for (auto it = workers_.begin(); it != workers_.end();) {
        Worker& w = *it->second;
        if (w.state == State::kIdle && !w.exit && now - w.idle_since > options_.idle_timeout) {
          Stop(w, "idle");
        }
        if (w.exit && now - w.idle_since > kKeepExited) {
          it = workers_.erase(it);
        } else {
          ++it;
        }
      }
      fds.clear();
      fds.push_back({listen_fd_, POLLIN, 0});
      fds.push_back({wake_fd_, POLLIN, 0});
      for (auto& [fd, id] : by_fd_) fds.push_back({fd, POLLIN, 0});
      for (auto& [fd, r] : unregistered_) fds.push_back({fd, POLLIN, 0});
    }
    for (auto& [lease, reason] : returned) callbacks_.lease_returned(lease, reason);
    int n = ::poll(fds.data(), fds.size(), static_cast<int>(absl::ToInt64Milliseconds(kLoopPeriod)));
    if (n <= 0) continue;
    if (fds[1].revents & POLLIN) {
      uint64_t v;
      (void)::read(wake_fd_, &v, sizeof(v));
    }
    if (fds[0].revents & POLLIN) {
      for (;;) {
        int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;
        absl::MutexLock l(&mu_);
        unregistered_[fd];
      }
    }
    absl::MutexLock l(&mu_);
    for (size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      const int fd = fds[i].fd;
      Worker* w = nullptr;
      FrameReader* reader = nullptr;
      if (auto it = by_fd_.find(fd); it != by_fd_.end()) {
        auto wit = workers_.find(it->second);
        if (wit != workers_.end()) {
          w = wit->second.get();
          reader = &w->reader;
        }
      } else if (auto u = unregistered_.find(fd); u != unregistered_.end()) {
        reader = &u->second;
      }
      if (reader == nullptr) continue;
      bool closed = false;
      for (;;) {
        char* p = reader->WritePtr(16 * 1024);
        ssize_t got = ::recv(fd, p, 16 * 1024, 0);
        if (got > 0) {
          reader->Commit(static_cast<size_t>(got));
          continue;
        }
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (got < 0 && errno == EINTR) continue;
        closed = true;
        break;
      }
      for (;;) {
        std::string_view payload;
        absl::StatusOr<bool> next = reader->Next(&payload);
        if (!next.ok()) {
          closed = true;
          break;
        }
        if (!*next) break;
        if (w != nullptr) {
          OnControlFrame(w, fd, payload);
          continue;
        }
        // The first frame of a new connection: who is it?
        proto::WorkerControl msg;
        if (!msg.ParseFromArray(payload.data(), static_cast<int>(payload.size())) ||
            !msg.has_register_() || !ConstantTimeEquals(msg.register_().token(), options_.token)) {
          closed = true;
          break;
        }
        const proto::WorkerRegister& r = msg.register_();
        auto wit = workers_.find(r.worker_id());
        if (wit == workers_.end() || wit->second->control_fd >= 0) {
          closed = true;
          break;
        }
        w = wit->second.get();
        if (!r.error().empty()) {
          // Kept even when the exit was seen first: a worker that refuses sends why,
          // then exits, and its exit report can overtake this message.
          w->start_error = r.error();
          changed_.SignalAll();
          closed = true;
          break;
        }
        if (w->exit) {
          closed = true;
          break;
        }
        w->pid = r.pid();
        w->unix_path = r.unix_path();
        w->tcp_port = r.tcp_port();
        w->control_fd = fd;
        w->reader = std::move(unregistered_[fd]);
        reader = &w->reader;
        unregistered_.erase(fd);
        by_fd_[fd] = w->id;
        changed_.SignalAll();
      }
      if (closed) {
        ::close(fd);
        unregistered_.erase(fd);
        by_fd_.erase(fd);
        if (w != nullptr && w->control_fd == fd) w->control_fd = -1;
        changed_.SignalAll();
      }
    }
  }
}

}  // namespace drover
