#include "tests/util/test_cluster.h"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/auth.h"
#include "common/files.h"
#include "common/net.h"
#include "common/spawn.h"
#include "tests/util/proc_stat.h"

extern char** environ;

namespace drover::testing {
namespace {

std::string JsonString(const std::string& json, const std::string& key) {
  std::string needle = absl::StrCat("\"", key, "\":\"");
  auto pos = json.find(needle);
  if (pos == std::string::npos) return "";
  pos += needle.size();
  return json.substr(pos, json.find('"', pos) - pos);
}

void StopProcess(pid_t pid, int first_signal) {
  if (pid <= 0) return;
  ::kill(pid, first_signal);
  absl::Time deadline = absl::Now() + absl::Seconds(15);
  while (absl::Now() < deadline) {
    if (ReapedOrGone(pid)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid, SIGKILL);
  deadline = absl::Now() + absl::Seconds(10);
  while (!ReapedOrGone(pid) && absl::Now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<TestCluster>> TestCluster::Start(TestClusterOptions options) {
  std::unique_ptr<TestCluster> c(new TestCluster);
  c->options_ = options;
  static int counter = 0;
  c->dir_ = absl::StrCat(TestTmpDir(), "/cluster-", getpid(), "-", counter++);
  if (auto s = MakeDirs(c->dir_, 0700); !s.ok()) return s;
  c->token_file_ = c->dir_ + "/token";
  if (auto t = LoadOrCreateTokenFile(c->token_file_); !t.ok()) return t.status();
  if (options.redis) {
    auto r = RedisServer::Start(c->dir_ + "/redis", /*appendonly=*/true,
                                options.redis_password);
    if (!r.ok()) return r.status();
    c->redis_ = std::move(*r);
  }
  if (auto s = c->StartScheduler(0); !s.ok()) return s;
  auto client = Client::Connect({c->address_, c->token_file_, c->tls_ca_});
  if (!client.ok()) return client.status();
  c->client_ = std::move(*client);
  c->agents_.assign(options.nodes, -1);
  for (int i = 0; i < options.nodes; ++i) {
    if (auto s = c->StartAgent(i); !s.ok()) return s;
  }
  bool ready = WaitFor(
      [&] {
        auto s = c->client_->Status();
        if (!s.ok()) return false;
        int alive = 0;
        for (const auto& n : s->nodes) alive += n.state == NodeState::kAlive;
        if (alive != options.nodes) return false;
        for (int i = 0; i < options.nodes; ++i) {
          if (c->agent_node_id(i).empty()) return false;
        }
        return true;
      },
      absl::Seconds(30));
  if (!ready) {
    return absl::DeadlineExceededError(
        absl::StrCat("agents did not register in 30 s\n", c->DaemonLogs()));
  }
  return c;
}

absl::Status TestCluster::StartScheduler(int port) {
  std::string ready = dir_ + "/scheduler.ready";
  ::unlink(ready.c_str());
  std::vector<std::string> advertise;
  if (!options_.netns.empty() && !options_.scheduler_host.empty()) {
    // Bound to 0.0.0.0, the scheduler advertises its hostname, which often resolves to
    // loopback (/etc/hosts): workers in the namespaces would get an address they cannot
    // reach. --advertise needs the port up front, so pick one free on every address.
    if (port == 0) {
      auto free_port = PickFreePort("0.0.0.0");
      if (!free_port.ok()) return free_port.status();
      port = *free_port;
    }
    advertise = {"--advertise", absl::StrCat(options_.scheduler_host, ":", port)};
  }
  SpawnOptions o;
  o.argv = {Runfile("scheduler/drover-scheduler"), "--bind",
            options_.netns.empty() ? "127.0.0.1" : "0.0.0.0",
            "--port", absl::StrCat(port), "--token-file", token_file_,
            "--ready-file", ready, "--node-timeout-ms", absl::StrCat(options_.node_timeout_ms),
            "--heartbeat-ms", absl::StrCat(options_.heartbeat_ms),
            "--kill-grace-ms", absl::StrCat(options_.kill_grace_ms)};
  o.argv.insert(o.argv.end(), advertise.begin(), advertise.end());
  if (!options_.metrics) o.argv.insert(o.argv.end(), {"--metrics-port", "-1"});
  if (options_.tls) o.argv.insert(o.argv.end(), {"--tls-dir", dir_ + "/tls"});
  o.argv.insert(o.argv.end(), options_.scheduler_args.begin(), options_.scheduler_args.end());
  if (redis_) {
    o.argv.push_back("--redis");
    o.argv.push_back(redis_->address());
    if (!redis_->password_file().empty()) {
      o.argv.insert(o.argv.end(), {"--redis-password-file", redis_->password_file()});
    }
  }
  o.stdout_path = o.stderr_path = dir_ + "/scheduler.log";
  auto pid = Spawn(o);
  if (!pid.ok()) return pid.status();
  scheduler_ = *pid;
  std::string json;
  bool ok = WaitFor(
      [&] {
        auto t = ReadFile(ready);
        if (t.ok()) json = *t;
        return !JsonString(json, "address").empty();
      },
      absl::Seconds(20));
  if (!ok) return absl::DeadlineExceededError("scheduler did not start\n" + DaemonLogs());
  address_ = JsonString(json, "address");
  tls_ca_ = JsonString(json, "tls_ca");
  if (options_.tls && tls_ca_.empty()) {
    return absl::InternalError("the TLS scheduler's ready file names no tls_ca\n" + DaemonLogs());
  }
  return absl::OkStatus();
}

absl::Status TestCluster::StartAgent(int i) {
  SpawnOptions o;
  std::string scheduler = address_;
  std::vector<std::string> prefix;
  if (!options_.netns.empty()) {
    // Agents in namespaces reach the scheduler at the host's side of their link.
    prefix = {"ip", "netns", "exec", options_.netns[i]};
    scheduler = absl::StrCat(options_.scheduler_host, ":", address_.substr(address_.rfind(':') + 1));
  }
  o.argv = prefix;
  std::vector<std::string> args = {
      Runfile("node_agent/drover-agent"), "--scheduler", scheduler, "--token-file", token_file_,
      "--dir", absl::StrCat(dir_, "/agent-", i), "--num-cpus",
      absl::StrCat(options_.cpus_per_node), "--kill-grace-ms", absl::StrCat(options_.kill_grace_ms),
      "--ready-file", absl::StrCat(dir_, "/agent-", i, ".ready")};
  if (options_.gpus_per_node >= 0) {
    args.insert(args.end(), {"--num-gpus", absl::StrCat(options_.gpus_per_node)});
  }
  if (options_.object_store) {
    args.insert(args.end(), {"--object-store-memory", absl::StrCat(options_.object_store_memory)});
  } else {
    args.push_back("--no-object-store");
  }
  if (!options_.metrics) {
    args.insert(args.end(), {"--metrics-port", "-1"});
  }
  if (!tls_ca_.empty()) args.insert(args.end(), {"--tls-ca", tls_ca_});
  ::unlink(absl::StrCat(dir_, "/agent-", i, ".ready").c_str());
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.stdout_path = o.stderr_path = absl::StrCat(dir_, "/agent-", i, ".log");
  auto pid = Spawn(o);
  if (!pid.ok()) return pid.status();
  agents_[i] = *pid;
  return absl::OkStatus();
}

TestCluster::~TestCluster() {
  for (pid_t& p : agents_) {
    StopProcess(p, SIGTERM);
    p = -1;
  }
  StopProcess(scheduler_, SIGTERM);
}

void TestCluster::SignalAgent(int i, int sig) {
  ::kill(agents_[i], sig);
  if (sig == SIGKILL || sig == SIGTERM) {
    int status;
    ::waitpid(agents_[i], &status, 0);
    agents_[i] = -1;
  }
}

absl::Status TestCluster::RestartAgent(int i, absl::Duration timeout) {
  if (agents_[i] > 0) {
    return absl::FailedPreconditionError(absl::StrCat("agent ", i, " is still running"));
  }
  if (auto s = StartAgent(i); !s.ok()) return s;
  if (!WaitFor([&] { return !agent_node_id(i).empty(); }, timeout)) {
    return absl::DeadlineExceededError(absl::StrCat("agent ", i, " did not register again in ",
                                                    absl::FormatDuration(timeout), "\n",
                                                    DaemonLogs()));
  }
  return absl::OkStatus();
}

std::string TestCluster::agent_node_id(int i) const {
  auto text = ReadFile(absl::StrCat(dir_, "/agent-", i, ".ready"));
  return text.ok() ? JsonString(*text, "node_id") : "";
}

absl::Status TestCluster::RestartScheduler(int sig) {
  StopScheduler(sig);
  return StartSchedulerAgain();
}

void TestCluster::StopScheduler(int sig) {
  StopProcess(scheduler_, sig);
  scheduler_ = -1;
}

absl::Status TestCluster::StartSchedulerAgain() {
  auto hp = absl::StrSplit(address_, ':');
  std::vector<std::string> parts(hp.begin(), hp.end());
  return StartScheduler(std::atoi(parts.back().c_str()));
}

int RunDrover(const std::vector<std::string>& args, const std::vector<std::string>& env,
              const std::string& scratch_dir, std::string* out, std::string* err) {
  std::vector<std::string> argv = {Runfile("cli/drover")};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProgram(argv, env, scratch_dir, out, err);
}

int RunProgram(const std::vector<std::string>& argv, const std::vector<std::string>& env,
               const std::string& scratch_dir, std::string* out, std::string* err) {
  static int n = 0;
  std::string base = absl::StrCat(scratch_dir, "/run-", getpid(), "-", n++);
  SpawnOptions o;
  o.argv = argv;
  // The caller's environment without the variables `env` sets.
  for (char** e = environ; *e; ++e) {
    absl::string_view kv(*e);
    bool overridden = false;
    for (const auto& mine : env) {
      overridden |= absl::StartsWith(kv, mine.substr(0, mine.find('=') + 1));
    }
    if (!overridden) o.env.push_back(*e);
  }
  o.env.insert(o.env.end(), env.begin(), env.end());
  o.stdout_path = base + ".out";
  o.stderr_path = base + ".err";
  auto pid = Spawn(o);
  if (!pid.ok()) {
    if (err) *err = std::string(pid.status().message());
    return -1;
  }
  int status = 0;
  ::waitpid(*pid, &status, 0);
  if (out) *out = ReadFile(base + ".out").value_or("");
  if (err) *err = ReadFile(base + ".err").value_or("");
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int TestCluster::RunCli(const std::vector<std::string>& args, std::string* out, std::string* err,
                        const std::vector<std::string>& extra_env) {
  std::vector<std::string> env = {"DROVER_ADDRESS=" + address_,
                                  "DROVER_TOKEN_FILE=" + token_file_,
                                  "DROVER_TLS_CA=" + tls_ca_,
                                  "DROVER_HOME=" + dir_ + "/home"};
  // `extra_env` wins over the entries above.
  for (const std::string& e : extra_env) {
    const std::string key = e.substr(0, e.find('=') + 1);
    env.erase(std::remove_if(env.begin(), env.end(),
                             [&](const std::string& mine) { return absl::StartsWith(mine, key); }),
              env.end());
  }
  env.insert(env.end(), extra_env.begin(), extra_env.end());
  return RunDrover(args, env, dir_, out, err);
}

JobSpec TestCluster::JobOf(const std::vector<std::string>& command, int nproc,
                           int nproc_per_node) {
  JobSpec spec;
  spec.command = command;
  spec.nproc = nproc;
  spec.nproc_per_node = nproc_per_node;
  spec.strategy = PlacementStrategy::kPack;
  spec.per_process.cpus = 1;
  return spec;
}

absl::StatusOr<JobInfo> TestCluster::RunJob(const JobSpec& spec, absl::Duration timeout) {
  auto job = client_->Submit(spec);
  if (!job.ok()) {
    return absl::Status(job.status().code(),
                        absl::StrCat("Submit: ", job.status().message(), "\n", DaemonLogs()));
  }
  auto done = client_->WaitJob(job->job_id, timeout);
  if (!done.ok()) {
    return absl::Status(done.status().code(),
                        absl::StrCat("waiting for ", job->job_id, ": ",
                                     done.status().message(), "\n", DaemonLogs()));
  }
  return *done;
}

std::string TestCluster::DaemonLogs() const {
  std::string out;
  std::vector<std::string> logs = {dir_ + "/scheduler.log"};
  for (size_t i = 0; i < agents_.size(); ++i) {
    logs.push_back(absl::StrCat(dir_, "/agent-", i, ".log"));
    logs.push_back(absl::StrCat(dir_, "/agent-", i, "/object-store.log"));
  }
  for (const auto& l : logs) {
    absl::StrAppend(&out, "==== ", l, "\n", TailFile(l, 0, 3000), "\n");
  }
  return out;
}

std::vector<pid_t> ProcessesOfJob(const std::string& job_id) {
  std::vector<pid_t> out;
  const std::string needle = "DROVER_JOB_ID=" + job_id;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    pid_t pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    auto env = ReadFile(absl::StrCat("/proc/", pid, "/environ"));
    if (!env.ok()) continue;
    for (absl::string_view kv : absl::StrSplit(*env, '\0')) {
      if (kv == needle) {
        if (IsRunning(pid)) out.push_back(pid);  // a zombie runs nothing
        break;
      }
    }
  }
  ::closedir(d);
  return out;
}

}  // namespace drover::testing
