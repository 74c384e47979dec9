#include "node_agent/process_manager.h"

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "common/files.h"
#include "common/log.h"
#include "common/net.h"
#include "common/shm_names.h"
#include "common/spawn.h"
#include "node_agent/process_tree.h"

extern char** environ;

namespace drover {
namespace {

std::vector<std::pair<std::string, std::string>> CaptureEnviron() {
  std::vector<std::pair<std::string, std::string>> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq == nullptr) continue;
    env.emplace_back(std::string(*e, eq - *e), std::string(eq + 1));
  }
  return env;
}

// The last `max_lines` lines of `text`.
std::string LastLines(const std::string& text, int max_lines) {
  size_t end = text.size();
  if (end > 0 && text[end - 1] == '\n') --end;
  size_t pos = end;
  for (int i = 0; i < max_lines; ++i) {
    size_t nl = pos == 0 ? std::string::npos : text.rfind('\n', pos - 1);
    if (nl == std::string::npos) return text;
    pos = nl;
  }
  return text.substr(pos + 1);
}

// Sends `sig` to the process group of `root` (a worker's drover-launch, its group's
// leader) and to every descendant of `root` outside that group (`table`, or /proc read
// now if null): a worker's child that called setsid() leaves the group but not the
// launcher's subtree (the launcher is a child subreaper, so orphans stay under it while
// it lives). Descendants are signalled before the group, so that on SIGKILL none is
// orphaned to init by the launcher's death first. A process forked after the table
// was read may still escape.
void SignalTree(pid_t root, int sig, ProcessEntry* table = nullptr, size_t n = 0) {
  ProcessEntry* own = nullptr;
  if (table == nullptr) table = own = ReadProcessTable(&n);
  MarkDescendants(table, n, root);
  for (size_t i = 0; i < n; ++i) {
    if (table[i].descends && table[i].pgrp != root) ::kill(table[i].pid, sig);
  }
  std::free(own);
  ::kill(-root, sig);
}

}  // namespace

ProcessManager::ProcessManager(ProcessManagerOptions options, ExitCallback on_exit)
    : options_(std::move(options)),
      on_exit_(std::move(on_exit)),
      base_env_(CaptureEnviron()) {
  event_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  {
    absl::MutexLock lock(&mu_);
    node_id_ = options_.node_id;
  }
  thread_ = std::thread([this] { Loop(); });
}

ProcessManager::~ProcessManager() {
  StopAllAndWait(absl::ZeroDuration());
  {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
    changed_.SignalAll();
  }
  Wake();
  thread_.join();
  absl::MutexLock lock(&mu_);
  for (auto& [key, gen] : gens_) {
    for (auto& p : gen.procs) {
      if (p.pidfd >= 0) ::close(p.pidfd);
    }
  }
  if (event_fd_ >= 0) ::close(event_fd_);
}

bool ProcessManager::ValidJobId(const std::string& id) {
  if (id.empty() || id == "." || id == ".." || id.size() > 200) return false;
  for (char c : id) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
      return false;
    }
  }
  return true;
}

void ProcessManager::SetNodeId(const std::string& node_id) {
  absl::MutexLock lock(&mu_);
  node_id_ = node_id;
}

void ProcessManager::SetWorkerEnv(const std::string& key, const std::string& value) {
  absl::MutexLock lock(&mu_);
  worker_env_[key] = value;
}

std::string ProcessManager::JobLogDir(const std::string& job_id) const {
  return absl::StrCat(options_.log_dir, "/", job_id);
}

std::string ProcessManager::LogPath(const std::string& job_id, int rank, int stream) const {
  return absl::StrCat(JobLogDir(job_id), "/rank", rank, stream == kStderr ? ".err" : ".out");
}

std::string ProcessManager::WorkerLogPath(const std::string& job_id, int n, int stream) const {
  return absl::StrCat(JobLogDir(job_id), "/worker", n, stream == kStderr ? ".err" : ".out");
}

void ProcessManager::Wake() {
  uint64_t one = 1;
  while (::write(event_fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
}

void ProcessManager::RunOnManager(std::function<void()> fn) {
  if (std::this_thread::get_id() == thread_.get_id()) {
    fn();
    return;
  }
  absl::Notification done;
  {
    absl::MutexLock lock(&mu_);
    queue_.push_back([&fn, &done] {
      fn();
      done.Notify();
    });
  }
  Wake();
  done.WaitForNotification();
}

absl::Status ProcessManager::Start(const proto::StartProcessesRequest& req, int* master_port) {
  absl::Status status;
  int port = 0;
  RunOnManager([&] { status = StartOnManager(req, &port); });
  if (status.ok() && master_port != nullptr) *master_port = port;
  return status;
}

int ProcessManager::Stop(const std::string& job_id, int generation, absl::Duration grace,
                         absl::string_view why, int64_t placement_epoch) {
  if (job_id.empty()) return 0;  // empty means "all" internally; not for callers
  int n = 0;
  RunOnManager([&] {
    n = StopOnManager(job_id, generation, grace, /*exact=*/false, why, placement_epoch);
  });
  return n;
}

int ProcessManager::StopGeneration(const std::string& job_id, int generation,
                                   absl::Duration grace, absl::string_view why) {
  if (job_id.empty()) return 0;
  int n = 0;
  RunOnManager([&] { n = StopOnManager(job_id, generation, grace, /*exact=*/true, why); });
  return n;
}

void ProcessManager::Forget(const std::string& job_id, int generation) {
  RunOnManager([&] {
    {
      absl::MutexLock lock(&mu_);
      auto it = gens_.find(Key(job_id, generation));
      if (it == gens_.end()) return;
      it->second.forgotten = true;
      bool alive = false;
      for (const auto& p : it->second.procs) alive |= p.running;
      if (!alive) {
        gens_.erase(it);
        return;
      }
    }
    StopOnManager(job_id, generation, options_.default_grace, /*exact=*/true,
                  "forgotten while some still ran");
  });
}

void ProcessManager::StopAllAndWait(absl::Duration grace) {
  RunOnManager([&] { StopOnManager("", -1, grace, false, "stopping everything"); });
  absl::Time deadline = absl::Now() + grace + absl::Seconds(10);
  absl::MutexLock lock(&mu_);
  for (;;) {
    bool alive = false;
    for (const auto& [key, gen] : gens_) {
      for (const auto& p : gen.procs) alive |= p.running;
    }
    if (!alive) return;
    if (changed_.WaitWithDeadline(&mu_, deadline)) {
      DROVER_LOG(WARNING) << "some worker processes were not reaped within the grace period";
      return;
    }
  }
}

bool ProcessManager::JobActive(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  for (auto it = gens_.lower_bound(Key(job_id, INT32_MIN));
       it != gens_.end() && it->first.first == job_id; ++it) {
    for (const auto& p : it->second.procs) {
      if (p.running) return true;
    }
  }
  return false;
}

void ProcessManager::SetAsideLeftoverLogs(const std::string& job_id) {
  {
    absl::MutexLock lock(&mu_);
    auto it = gens_.lower_bound(Key(job_id, INT32_MIN));
    if (it != gens_.end() && it->first.first == job_id) return;  // the job is ours
  }
  const std::string dir = JobLogDir(job_id);
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) return;
  // Another job had this id: a scheduler whose state was lost, on a node whose logs
  // were kept. Its output stays, under another name, out of the new job's way.
  std::string aside = absl::StrCat(dir, ".replaced-", absl::ToUnixSeconds(absl::Now()));
  for (int n = 1; ::access(aside.c_str(), F_OK) == 0; ++n) {
    aside = absl::StrCat(dir, ".replaced-", absl::ToUnixSeconds(absl::Now()), "-", n);
  }
  if (::rename(dir.c_str(), aside.c_str()) != 0) {
    DROVER_LOG(WARNING) << "cannot move the leftover logs " << dir << " aside: "
                        << std::strerror(errno);
    return;
  }
  DROVER_LOG(WARNING) << "job " << job_id << " starts here for the first time, but logs of "
                      << "an earlier job with that id were left in " << dir
                      << "; moved them to " << aside;
}

int ProcessManager::PruneLogs(absl::Duration older_than) {
  int removed = 0;
  RunOnManager([&] {
    const absl::Time cutoff = absl::Now() - older_than;
    DIR* d = ::opendir(options_.log_dir.c_str());
    if (d == nullptr) return;
    std::vector<std::string> jobs;
    while (dirent* e = ::readdir(d)) {
      if (ValidJobId(e->d_name)) jobs.push_back(e->d_name);
    }
    ::closedir(d);
    for (const std::string& job : jobs) {
      if (JobActive(job)) continue;
      const std::string dir = JobLogDir(job);
      struct stat st;
      if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
      absl::Time newest = absl::FromTimeT(st.st_mtime);
      std::vector<std::string> files;
      if (DIR* jd = ::opendir(dir.c_str())) {
        while (dirent* e = ::readdir(jd)) {
          const std::string name = e->d_name;
          if (name == "." || name == "..") continue;
          const std::string path = dir + "/" + name;
          if (::lstat(path.c_str(), &st) == 0) {
            newest = std::max(newest, absl::FromTimeT(st.st_mtime));
          }
          files.push_back(path);
        }
        ::closedir(jd);
      }
      if (newest >= cutoff) continue;
      for (const std::string& f : files) ::unlink(f.c_str());
      if (::rmdir(dir.c_str()) == 0) {
        ++removed;
      } else {
        DROVER_LOG(WARNING) << "pruning old logs: rmdir " << dir << ": " << std::strerror(errno);
      }
    }
  });
  if (removed > 0) DROVER_LOG(INFO) << "removed the logs of " << removed << " old job(s)";
  return removed;
}

uint64_t ProcessManager::ChangeSeq() {
  absl::MutexLock lock(&mu_);
  return change_seq_;
}

void ProcessManager::WaitForChange(uint64_t seen, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  while (change_seq_ == seen && !shutdown_) {
    if (changed_.WaitWithDeadline(&mu_, deadline)) return;
  }
}

std::vector<proto::ProcessStatus> ProcessManager::Snapshot() {
  std::vector<proto::ProcessStatus> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [key, gen] : gens_) {
    if (gen.forgotten) continue;
    for (const auto& p : gen.procs) {
      proto::ProcessStatus s;
      s.set_job_id(p.job_id);
      s.set_generation(p.generation);
      s.set_rank(p.rank);
      s.set_pid(p.pid);
      s.set_running(p.running);
      s.set_placement_epoch(p.placement_epoch);
      *s.mutable_exit() = p.exit;
      if (p.running) {
        s.mutable_exit()->set_rank(p.rank);
        s.mutable_exit()->set_node_id(node_id_);
        s.mutable_exit()->set_generation(p.generation);
        s.mutable_exit()->set_placement_epoch(p.placement_epoch);
      }
      out.push_back(std::move(s));
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    if (a.job_id() != b.job_id()) return a.job_id() < b.job_id();
    if (a.generation() != b.generation()) return a.generation() < b.generation();
    return a.rank() < b.rank();
  });
  return out;
}

std::vector<std::string> ProcessManager::BuildEnv(const proto::StartProcessesRequest& req,
                                                  const proto::ProcessSpec& spec,
                                                  int master_port, int num_procs,
                                                  const std::string& node_id,
                                                  const std::map<std::string, std::string>&
                                                      agent_env) const {
  std::map<std::string, std::string> env(base_env_.begin(), base_env_.end());
  for (const auto& [k, v] : req.env()) env[k] = v;
  int local_world = req.local_world_size() > 0 ? req.local_world_size() : num_procs;
  int groups = (req.world_size() + local_world - 1) / std::max(local_world, 1);
  auto set = [&env](const std::string& k, const auto& v) { env[k] = absl::StrCat(v); };
  // What every process gets, a gang's rank or a task worker: its GPUs, drover's own
  // variables, and the agent's overrides last.
  auto finish = [&]() {
    set("CUDA_VISIBLE_DEVICES", absl::StrJoin(spec.gpu_ids(), ","));
    if (env.find("OMP_NUM_THREADS") == env.end()) set("OMP_NUM_THREADS", 1);
    set("DROVER_JOB_ID", req.job_id());
    set("DROVER_NODE_ID", node_id);
    set("DROVER_SCHEDULER_ADDRESS", req.scheduler_address());
    set("DROVER_TOKEN_FILE", options_.token_file);
    set("DROVER_AGENT_PID", ::getpid());
    for (const auto& [k, v] : agent_env) env[k] = v;
    std::vector<std::string> out;
    out.reserve(env.size());
    for (const auto& [k, v] : env) out.push_back(absl::StrCat(k, "=", v));
    return out;
  };
  // A task worker is not a rank of a gang: no torchrun variables.
  if (req.task_worker()) return finish();
  set("RANK", spec.rank());
  set("LOCAL_RANK", spec.local_rank());
  set("WORLD_SIZE", req.world_size());
  set("LOCAL_WORLD_SIZE", local_world);
  set("GROUP_RANK", req.group_rank());
  set("GROUP_WORLD_SIZE", groups);
  set("ROLE_RANK", spec.rank());
  set("ROLE_WORLD_SIZE", req.world_size());
  set("ROLE_NAME", "default");
  set("MASTER_ADDR", req.master_addr().empty() ? options_.node_ip : req.master_addr());
  set("MASTER_PORT", master_port);
  set("TORCHELASTIC_RESTART_COUNT", req.generation());
  set("TORCHELASTIC_MAX_RESTARTS", req.max_restarts());
  set("TORCHELASTIC_RUN_ID", req.job_id());
  // Make Gloo and NCCL use the node's address rather than whatever the hostname
  // resolves to (often 127.0.x.1), unless the user chose an interface.
  if (!options_.socket_ifname.empty()) {
    for (const char* k : {"GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"}) {
      if (env.find(k) == env.end()) set(k, options_.socket_ifname);
    }
  }
  set("DROVER_RANK", spec.rank());
  set("DROVER_GENERATION", req.generation());
  return finish();
}

absl::Status ProcessManager::StartOnManager(const proto::StartProcessesRequest& req,
                                            int* master_port) {
  Key key(req.job_id(), req.generation());
  bool replaces_placement = false;  // of this job: its log directory is this job's
  std::string node_id;
  std::map<std::string, std::string> agent_env;
  {
    absl::MutexLock lock(&mu_);
    node_id = node_id_;
    agent_env = worker_env_;
    auto it = gens_.find(key);
    if (it != gens_.end() && it->second.placement_epoch != 0 && req.placement_epoch() != 0 &&
        it->second.placement_epoch != req.placement_epoch()) {
      bool held_runs = false;
      for (const auto& p : it->second.procs) held_runs = held_runs || p.running;
      if (req.placement_epoch() > it->second.placement_epoch && !held_runs) {
        // A later placement (a job's epochs only grow), and nothing of the earlier one
        // runs here any more (the scheduler stopped it when this node reported it): its
        // record goes, its unreported exits with it (the scheduler ignores them), and
        // the later placement starts.
        DROVER_LOG(INFO) << "job " << req.job_id() << " generation " << req.generation()
                         << ": placement epoch " << it->second.placement_epoch
                         << " has ended here; starting placement epoch "
                         << req.placement_epoch();
        gens_.erase(it);
        replaces_placement = true;
        it = gens_.end();
      }
    }
    if (it != gens_.end() && it->second.placement_epoch != 0 && req.placement_epoch() != 0 &&
        it->second.placement_epoch != req.placement_epoch()) {
      // Another placement of the same generation whose processes still run here (or an
      // earlier one, late): acknowledging it would leave its ranks to processes it does
      // not know; starting it would run them twice. The scheduler stops the other
      // epoch's processes when this node reports them.
      return absl::FailedPreconditionError(absl::StrCat(
          "start of job ", req.job_id(), " generation ", req.generation(),
          " under placement epoch ", req.placement_epoch(), " refused: this node holds ",
          "that generation under placement epoch ", it->second.placement_epoch,
          "; stop that placement's processes first (StopJob with its epoch)"));
    }
    if (it != gens_.end()) {
      // A repeated start (a retried RPC, or a second placement on this node): its
      // processes started once, here; acknowledged, nothing started again.
      DROVER_LOG(INFO) << "start of job " << req.job_id() << " generation " << req.generation()
                       << " repeated: already started here; nothing started again";
      *master_port = it->second.master_port;
      return absl::OkStatus();
    }
  }
  if (!ValidJobId(req.job_id())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid job id '", req.job_id(), "': use letters, digits, '-', '_' and '.'"));
  }
  if (req.command().empty() || req.command(0).empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("job ", req.job_id(), ": the command is empty"));
  }
  if (!req.cwd().empty()) {
    struct stat st;
    if (::stat(req.cwd().c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "job ", req.job_id(), ": working directory '", req.cwd(),
          "' does not exist on node ", options_.node_ip, " (", Hostname(),
          "); create it there or pass a directory that exists on every node"));
    }
  }
  if (::access(options_.launcher_path.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("drover-launch not found or not executable at '", options_.launcher_path,
                     "': install it next to drover-agent"));
  }
  if (req.generation() == 0 && !replaces_placement) SetAsideLeftoverLogs(req.job_id());
  if (absl::Status s = MakeDirs(JobLogDir(req.job_id()), 0700); !s.ok()) return s;
  int port = req.master_port();
  if (port == 0 && !req.task_worker()) {
    auto picked = PickFreePort(options_.node_ip);
    if (!picked.ok()) return picked.status();
    port = *picked;
  }

  Generation gen;
  gen.master_port = port;
  gen.placement_epoch = req.placement_epoch();
  absl::Status failure;
  for (const auto& spec : req.processes()) {
    Proc p;
    p.job_id = req.job_id();
    p.generation = req.generation();
    p.placement_epoch = req.placement_epoch();
    p.rank = spec.rank();
    p.err_path = req.task_worker() ? WorkerLogPath(req.job_id(), spec.rank(), kStderr)
                                   : LogPath(req.job_id(), spec.rank(), kStderr);
    p.err_offset = FileSize(p.err_path);
    SpawnOptions so;
    so.argv.push_back(options_.launcher_path);
    so.argv.insert(so.argv.end(), req.command().begin(), req.command().end());
    so.env = BuildEnv(req, spec, port, req.processes_size(), node_id, agent_env);
    so.cwd = req.cwd();
    so.stdout_path = req.task_worker() ? WorkerLogPath(req.job_id(), spec.rank(), kStdout)
                                       : LogPath(req.job_id(), spec.rank(), kStdout);
    so.stderr_path = p.err_path;
    so.new_process_group = true;
    auto pid = Spawn(so);
    if (!pid.ok()) {
      failure = absl::Status(pid.status().code(),
                             absl::StrCat("job ", req.job_id(), " rank ", spec.rank(), ": ",
                                          pid.status().message()));
      break;
    }
    p.pid = *pid;
    p.pidfd = PidfdOpen(p.pid);
    if (p.pidfd < 0) {
      DROVER_LOG(WARNING) << "pidfd_open(" << p.pid << "): " << std::strerror(errno)
                          << "; falling back to polling for exits";
    }
    gen.procs.push_back(std::move(p));
  }
  if (!failure.ok()) {
    {
      absl::MutexLock lock(&mu_);
      ++starts_.failed;
    }
    // Leave nothing of a half-started generation behind, so a retry can start it.
    for (auto& p : gen.procs) {
      SignalTree(p.pid, SIGKILL);
      int st;
      while (::waitpid(p.pid, &st, 0) < 0 && errno == EINTR) {
      }
      if (p.pidfd >= 0) ::close(p.pidfd);
    }
    return failure;
  }
  DROVER_LOG(INFO) << "started job " << req.job_id() << " generation " << req.generation()
                   << ": " << gen.procs.size() << " process(es), MASTER_PORT " << port;
  *master_port = port;
  absl::MutexLock lock(&mu_);
  const int64_t n = static_cast<int64_t>(gen.procs.size());
  if (req.task_worker()) {
    starts_.task_workers += n;
  } else {
    starts_.ranks += n;
    if (req.generation() > 0) starts_.rank_restarts += n;
  }
  gens_.emplace(key, std::move(gen));
  return absl::OkStatus();
}

ProcessManager::StartCounts ProcessManager::start_counts() {
  absl::MutexLock lock(&mu_);
  return starts_;
}

int ProcessManager::StopOnManager(const std::string& job_id, int generation,
                                  absl::Duration grace, bool exact, absl::string_view why,
                                  int64_t placement_epoch) {
  absl::Time deadline = absl::Now() + std::max(grace, absl::ZeroDuration());
  int signalled = 0;
  ProcessEntry* table = nullptr;  // the process tree, read once for every SIGTERM below
  size_t table_size = 0;
  absl::MutexLock lock(&mu_);
  for (auto& [key, gen] : gens_) {
    if (!job_id.empty() && key.first != job_id) continue;
    if (exact ? key.second != generation : (generation >= 0 && key.second > generation)) {
      continue;
    }
    if (placement_epoch != 0 && gen.placement_epoch != placement_epoch) continue;
    for (auto& p : gen.procs) {
      if (!p.running) continue;
      if (!p.term_sent) {
        if (table == nullptr) table = ReadProcessTable(&table_size);
        SignalTree(p.pid, SIGTERM, table, table_size);
        p.term_sent = true;
        ++signalled;
      }
      p.kill_deadline = std::min(p.kill_deadline, deadline);
    }
  }
  std::free(table);
  if (signalled > 0) {
    DROVER_LOG(INFO) << "stopping " << signalled << " process(es) of "
                     << (job_id.empty() ? "all jobs" : "job " + job_id)
                     << (job_id.empty() || generation < 0
                             ? ""
                             : absl::StrCat(exact ? " generation " : " generations <= ",
                                            generation))
                     << ", grace " << absl::FormatDuration(grace)
                     << (why.empty() ? "" : absl::StrCat(": ", why));
  }
  return signalled;
}

bool ProcessManager::TryReap(Proc* p,
                             std::vector<std::pair<std::string, proto::ExitInfo>>* reports) {
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(p->pid, &status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == 0) return false;
  proto::ExitInfo& e = p->exit;
  e.set_rank(p->rank);
  e.set_node_id(node_id_);
  e.set_generation(p->generation);
  e.set_placement_epoch(p->placement_epoch);
  if (r < 0) {
    e.set_exit_code(-1);
    e.set_error(absl::StrCat("process ", p->pid, " was reaped by someone else: ",
                             std::strerror(errno)));
  } else if (WIFEXITED(status)) {
    e.set_exit_code(WEXITSTATUS(status));
  } else if (WIFSIGNALED(status)) {
    e.set_exit_code(-1);
    e.set_signal(WTERMSIG(status));
  }
  e.set_stderr_tail(LastLines(TailFile(p->err_path, p->err_offset, options_.tail_bytes),
                              options_.tail_lines));
  p->running = false;
  if (p->pidfd >= 0) {
    ::close(p->pidfd);
    p->pidfd = -1;
  }
  if (r > 0) {
    // The launcher removes the collective segments its ranks left when they died before
    // unlinking them; this covers a launcher that was killed itself (it is their owner,
    // common/shm_names.h). Its rank may outlive it then (still in its process group):
    // that rank's exit is reported now, so it is killed first, never left running with
    // its segments unlinked under it.
    if (::kill(-p->pid, 0) == 0) SignalTree(p->pid, SIGKILL);
    const int removed = UnlinkCollectiveSegments(PidNamespaceId(), p->pid);
    if (removed > 0) {
      DROVER_LOG(INFO) << "job " << p->job_id << " rank " << p->rank << ": removed " << removed
                       << " collective shared-memory segment(s) it left";
    }
  }
  DROVER_LOG(INFO) << "job " << p->job_id << " generation " << p->generation << " rank "
                   << p->rank << " (pid " << p->pid << ") ended: "
                   << (r > 0 ? DescribeWaitStatus(status) : e.error());
  reports->emplace_back(p->job_id, e);
  return true;
}

void ProcessManager::Loop() {
  std::vector<pollfd> fds;
  std::vector<std::pair<std::string, proto::ExitInfo>> reports;
  for (;;) {
    // 1. What to wait for.
    fds.clear();
    fds.push_back({event_fd_, POLLIN, 0});
    absl::Time next_deadline = absl::InfiniteFuture();
    bool need_polling = false;
    {
      absl::MutexLock lock(&mu_);
      if (shutdown_ && queue_.empty()) break;
      for (const auto& [key, gen] : gens_) {
        for (const auto& p : gen.procs) {
          if (!p.running) continue;
          if (p.pidfd >= 0) {
            fds.push_back({p.pidfd, POLLIN, 0});
          } else {
            need_polling = true;
          }
          if (p.term_sent) next_deadline = std::min(next_deadline, p.kill_deadline);
        }
      }
    }
    int timeout_ms = -1;
    if (next_deadline != absl::InfiniteFuture()) {
      absl::Duration left = next_deadline - absl::Now();
      timeout_ms = left <= absl::ZeroDuration()
                       ? 0
                       : static_cast<int>(absl::ToInt64Milliseconds(left + absl::Milliseconds(1)));
    }
    if (need_polling && (timeout_ms < 0 || timeout_ms > 20)) timeout_ms = 20;
    int n = ::poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0 && errno != EINTR) {
      DROVER_LOG(ERROR) << "poll: " << std::strerror(errno);
    }
    if (fds[0].revents & POLLIN) {
      uint64_t v;
      while (::read(event_fd_, &v, sizeof(v)) > 0) {
      }
    }
    std::set<int> ready;
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents != 0) ready.insert(fds[i].fd);
    }

    // 2. Reap, escalate, drop forgotten generations that are done.
    std::deque<std::function<void()>> tasks;
    reports.clear();
    {
      absl::MutexLock lock(&mu_);
      absl::Time now = absl::Now();
      bool reaped = false;
      for (auto it = gens_.begin(); it != gens_.end();) {
        Generation& gen = it->second;
        bool alive = false;
        size_t first_report = reports.size();
        for (auto& p : gen.procs) {
          if (!p.running) continue;
          if ((p.pidfd < 0 || ready.count(p.pidfd)) && TryReap(&p, &reports)) {
            reaped = true;
            continue;
          }
          alive = true;
          if (p.term_sent && p.kill_deadline <= now) {
            SignalTree(p.pid, SIGKILL);
            p.kill_deadline = absl::InfiniteFuture();
            DROVER_LOG(INFO) << "job " << p.job_id << " rank " << p.rank << " (pid "
                             << p.pid << ") did not exit after SIGTERM: sent SIGKILL";
          }
        }
        if (gen.forgotten) {
          reports.resize(first_report);  // settled: the scheduler wants no reports
          if (!alive) {
            it = gens_.erase(it);
            continue;
          }
        }
        ++it;
      }
      if (reaped) {
        ++change_seq_;
        changed_.SignalAll();
      }
      tasks.swap(queue_);
    }

    // 3. Posted work and callbacks, without the lock.
    for (auto& t : tasks) t();
    if (on_exit_) {
      for (const auto& [job_id, info] : reports) on_exit_(job_id, info);
    }
  }
}

}  // namespace drover
