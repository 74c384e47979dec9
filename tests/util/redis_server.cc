#include "tests/util/redis_server.h"

#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/auth.h"
#include "common/files.h"
#include "common/net.h"
#include "common/spawn.h"
#include "tests/util/proc_stat.h"

namespace drover {
namespace testing {
namespace {

constexpr absl::Duration kStartDeadline = absl::Seconds(10);
constexpr absl::Duration kStopGrace = absl::Seconds(5);
constexpr absl::Duration kPollInterval = absl::Milliseconds(10);

// redis-server from PATH, or "" if it is not installed.
std::string FindRedisServer() {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr && *path != '\0' ? path : "/usr/local/bin:/usr/bin:/bin";
  // Debian installs it in /usr/bin, which a stripped test PATH may lack.
  dirs += ":/usr/local/bin:/usr/bin:/usr/sbin";
  for (absl::string_view d : absl::StrSplit(dirs, ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(d, "/redis-server");
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// True once the server at host:port answers PING with PONG (not -LOADING).
bool AnswersPing(const std::string& host, int port, const std::string& password) {
  struct timeval timeout = {0, 200 * 1000};
  redisContext* c = redisConnectWithTimeout(host.c_str(), port, timeout);
  if (c == nullptr) return false;
  bool ok = false;
  if (c->err == 0 && redisSetTimeout(c, timeout) == REDIS_OK) {
    if (!password.empty()) {
      auto* auth = static_cast<redisReply*>(
          redisCommand(c, "AUTH %b", password.data(), password.size()));
      if (auth != nullptr) freeReplyObject(auth);
    }
    auto* reply = static_cast<redisReply*>(redisCommand(c, "PING"));
    if (reply != nullptr) {
      ok = reply->type == REDIS_REPLY_STATUS && std::string(reply->str, reply->len) == "PONG";
      freeReplyObject(reply);
    }
  }
  redisFree(c);
  return ok;
}

}  // namespace

RedisServer::RedisServer(std::string binary, std::string dir, bool appendonly, int port,
                         std::string password)
    : binary_(std::move(binary)),
      dir_(std::move(dir)),
      appendonly_(appendonly),
      port_(port),
      password_(std::move(password)) {}

std::string RedisServer::password_file() const {
  return password_.empty() ? "" : absl::StrCat(dir_, "/redis.password");
}

RedisServer::~RedisServer() { Stop(); }

std::string RedisServer::address() const { return absl::StrCat(host_, ":", port_); }

absl::StatusOr<std::unique_ptr<RedisServer>> RedisServer::Start(const std::string& dir,
                                                                bool appendonly,
                                                                bool with_password) {
  std::string binary = FindRedisServer();
  if (binary.empty()) {
    return absl::FailedPreconditionError(
        "redis-server not found in PATH; install it with: apt-get install redis-server");
  }
  absl::Status made = MakeDirs(dir);
  if (!made.ok()) return made;
  std::string password;
  if (with_password) {
    password = GenerateToken();
    absl::Status s = WriteFileAtomic(dir + "/redis.password", password + "\n", 0600);
    if (!s.ok()) return s;
  }
  // PickFreePort releases the port before redis-server binds it, so another process
  // can take it in between: then redis exits at once and we try another port.
  absl::Status last;
  for (int attempt = 0; attempt < 3; ++attempt) {
    absl::StatusOr<int> port = PickFreePort("127.0.0.1");
    if (!port.ok()) return port.status();
    std::unique_ptr<RedisServer> server(new RedisServer(binary, dir, appendonly, *port, password));
    last = server->Launch();
    if (last.ok()) return server;
  }
  return last;
}

absl::Status RedisServer::Launch() {
  SpawnOptions options;
  options.argv = {binary_};
  if (!password_.empty()) {
    // The password goes in a config file only the owner reads, never on the command
    // line (which every local user sees in ps).
    const std::string conf = absl::StrCat(dir_, "/redis.conf");
    // The config file's path in the process title (as `drover up` has it) tells
    // `drover up`/`down` which cluster's Redis this is.
    absl::Status s = WriteFileAtomic(
        conf,
        absl::StrCat("requirepass ", password_,
                     "\nproc-title-template \"{title} {listen-addr} {config-file}\"\n"),
        0600);
    if (!s.ok()) return s;
    options.argv.push_back(conf);
  }
  options.argv.insert(options.argv.end(), {"--port", absl::StrCat(port_), "--bind", host_,
                                           "--save", "", "--dir", dir_, "--daemonize", "no"});
  if (appendonly_) {
    options.argv.insert(options.argv.end(),
                        {"--appendonly", "yes", "--appendfsync", "always"});
  }
  argv_ = options.argv;
  const std::string log_path = absl::StrCat(dir_, "/redis-server.log");
  options.stdout_path = log_path;
  options.stderr_path = log_path;
  // Its own process group, so a Ctrl-C aimed at the test does not race our SIGTERM.
  options.new_process_group = true;
  absl::StatusOr<pid_t> pid = Spawn(options);
  if (!pid.ok()) return pid.status();
  pid_ = *pid;

  const absl::Time deadline = absl::Now() + kStartDeadline;
  while (true) {
    int status = 0;
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      return absl::UnavailableError(absl::StrCat(
          "redis-server on ", address(), " exited at start (", DescribeWaitStatus(status),
          "); its log ", log_path, " ends with:\n", TailFile(log_path, 0, 2000)));
    }
    if (AnswersPing(host_, port_, password_)) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      Stop();
      return absl::DeadlineExceededError(absl::StrCat(
          "redis-server on ", address(), " did not answer PING within ",
          absl::FormatDuration(kStartDeadline), "; its log ", log_path,
          " ends with:\n", TailFile(log_path, 0, 2000)));
    }
    absl::SleepFor(kPollInterval);
  }
}

void RedisServer::Stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  const absl::Time deadline = absl::Now() + kStopGrace;
  int status = 0;
  while (true) {
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_ || (r < 0 && errno != EINTR && errno != ECHILD)) break;
    if (r < 0 && errno == ECHILD) {
      // Not our child (adopted): gone once it no longer exists; SIGKILL after the grace.
      if (!IsRunning(pid_)) break;
      if (absl::Now() >= deadline) {
        ::kill(pid_, SIGKILL);
        const absl::Time last = absl::Now() + kStopGrace;
        while (IsRunning(pid_) && absl::Now() < last) absl::SleepFor(kPollInterval);
        break;
      }
      absl::SleepFor(kPollInterval);
      continue;
    }
    if (absl::Now() >= deadline) {
      ::kill(pid_, SIGKILL);
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    absl::SleepFor(kPollInterval);
  }
  pid_ = -1;
}

absl::Status RedisServer::Restart() {
  Stop();
  return Launch();
}

}  // namespace testing
}  // namespace drover
