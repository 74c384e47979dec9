// drover up | down | start
//
// `up` starts a whole local cluster (scheduler + N agents, optionally redis-server) as
// background daemons and records them in $DROVER_HOME/cluster.json; over a recorded
// cluster of which something still runs, it brings back only the dead daemons, in
// place. `down` stops every daemon of the cluster: those the file lists and any other
// running on the cluster's directory. `start` runs one daemon in the foreground for real
// multi-machine clusters (one head, one agent per machine).
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "cli/cluster_file.h"
#include "cli/commands.h"
#include "cli/job_spec.h"
#include "cli/status_line.h"
#include "cli/table.h"
#include "common/auth.h"
#include "common/files.h"
#include "common/net.h"
#include "common/paths.h"
#include "common/progress_line.h"
#include "common/spawn.h"
#include "common/status_macros.h"
#include "drover/client.h"
#include "nlohmann/json.hpp"

namespace drover::cli {
namespace {

// True if `pid` runs. Reaps it first if it is our own exited child (a zombie still
// answers kill(pid, 0)).
bool Alive(pid_t pid) {
  if (pid <= 0) return false;
  int status;
  if (::waitpid(pid, &status, WNOHANG) == pid) return false;
  return ::kill(pid, 0) == 0;
}

// The program `pid` was started as: the file name of its argv[0] up to the first space
// (redis-server retitles itself "redis-server 127.0.0.1:PORT"); "" if unknown.
std::string ProgramOf(pid_t pid) {
  auto cmdline = ReadFile(absl::StrCat("/proc/", pid, "/cmdline"));
  if (!cmdline.ok()) return "";
  std::string argv0 = cmdline->substr(0, cmdline->find_first_of(std::string(" \0", 2)));
  const size_t slash = argv0.rfind('/');
  return slash == std::string::npos ? argv0 : argv0.substr(slash + 1);
}

// True if `pid` runs and is the daemon `program` that the cluster file recorded. A pid
// from a cluster file that outlived its daemons (a reboot, a crash) may belong to an
// unrelated process by now, which must never be signalled.
bool RunsDaemon(pid_t pid, absl::string_view program) {
  return Alive(pid) && ProgramOf(pid) == program;
}

constexpr absl::string_view kSchedulerProgram = "drover-scheduler";
constexpr absl::string_view kAgentProgram = "drover-agent";
constexpr absl::string_view kRedisProgram = "redis-server";

// The command line of `pid`, one string per argument (redis-server retitles itself
// into one string: "redis-server 127.0.0.1:PORT CONFIG"); empty if unknown.
std::vector<std::string> CmdlineOf(pid_t pid) {
  auto raw = ReadFile(absl::StrCat("/proc/", pid, "/cmdline"));
  if (!raw.ok()) return {};
  return absl::StrSplit(*raw, '\0', absl::SkipEmpty());
}

// True if an argument of `argv` names a path under `dir`.
bool NamesPathUnder(const std::vector<std::string>& argv, const std::string& dir) {
  const std::string under = dir + "/";
  for (const std::string& a : argv) {
    if (absl::StrContains(a, under)) return true;
  }
  return false;
}

// True if `pid` runs the daemon `program` of the cluster kept in `dir` (any cluster's
// if `dir` is "", as in records of older versions).
bool RunsClusterDaemon(pid_t pid, absl::string_view program, const std::string& dir) {
  if (!RunsDaemon(pid, program)) return false;
  return dir.empty() || NamesPathUnder(CmdlineOf(pid), dir);
}

// A daemon of a cluster found running.
struct Found {
  pid_t pid;
  std::string program;
  std::vector<std::string> argv;
};

// Every process of this user that runs drover-scheduler, drover-agent or redis-server
// with a path under `dir` (the cluster's directory) on its command line: what `up`
// started, brought back, or what a user started again by hand with the same command.
std::vector<Found> DaemonsUnder(const std::string& dir) {
  std::vector<Found> found;
  if (dir.empty()) return found;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return found;
  while (dirent* e = ::readdir(d)) {
    int pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid) || pid <= 0 || pid == ::getpid()) continue;
    struct stat st;
    if (::stat(absl::StrCat("/proc/", pid).c_str(), &st) != 0 || st.st_uid != ::getuid()) {
      continue;
    }
    std::string program = ProgramOf(pid);
    if (program != kSchedulerProgram && program != kAgentProgram && program != kRedisProgram) {
      continue;
    }
    std::vector<std::string> argv = CmdlineOf(pid);
    if (NamesPathUnder(argv, dir) && Alive(pid)) {
      found.push_back({pid, std::move(program), std::move(argv)});
    }
  }
  ::closedir(d);
  return found;
}

bool HasArg(const std::vector<std::string>& argv, const std::string& arg) {
  return std::find(argv.begin(), argv.end(), arg) != argv.end();
}

// The roles of a cluster's daemons, told apart by the paths on their command lines.
bool IsSchedulerOf(const Found& f, const std::string& dir) {
  return f.program == kSchedulerProgram && HasArg(f.argv, dir + "/scheduler.ready");
}
bool IsAgentOf(const Found& f, const std::string& dir, int i) {
  return f.program == kAgentProgram && HasArg(f.argv, absl::StrCat(dir, "/agent-", i));
}
bool IsRedisOf(const Found& f, const std::string& dir) {
  return f.program == kRedisProgram && NamesPathUnder(f.argv, dir);
}

// True once something accepts TCP connections at 127.0.0.1:port.
bool Accepts(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

std::string ClusterFile() { return DroverHome() + "/cluster.json"; }

// Waits until `pred` holds or `timeout` passes, checking every 20 ms.
template <typename Pred>
bool WaitFor(Pred pred, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

// SIGTERM, then SIGKILL after `grace`; returns once the process is gone. Nothing if
// `pid` is not (or no longer) the daemon `program`. Whether it was there to stop.
bool Terminate(pid_t pid, absl::string_view program, absl::Duration grace) {
  if (!RunsDaemon(pid, program)) return false;
  ::kill(pid, SIGTERM);
  if (!WaitFor([pid] { return !Alive(pid); }, grace)) {
    ::kill(pid, SIGKILL);
    WaitFor([pid] { return !Alive(pid); }, absl::Seconds(5));
  }
  return true;
}

std::string LogTail(const std::string& path) {
  std::string tail = TailFile(path, 0, 2000);
  return tail.empty() ? "(empty)" : tail;
}

absl::StatusOr<ClusterRecord> ReadClusterFile() {
  DROVER_ASSIGN_OR_RETURN(std::string text, ReadFile(ClusterFile()));
  return ParseClusterRecord(text, ClusterFile());
}

// A node's memory flag in bytes: 0 when not given (the node offers all it has).
absl::StatusOr<int64_t> ParseMemoryFlag(const char* flag, const std::string& value) {
  absl::StatusOr<int64_t> bytes = ParseBytes(value);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", bytes.status().message()));
  }
  if (!value.empty() && *bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", value, ": a node needs some memory"));
  }
  return bytes;
}

// A secret in an owner-only file: read it if the file exists (refused if others may
// read it), else generate one and create the file with mode 600. Two processes that
// create it at once (a head and its Redis started together) end up with the same
// secret: the file appears whole (link(2) of a written temporary) and only once.
absl::StatusOr<std::string> LoadOrCreateSecretFile(const std::string& path,
                                                   const std::string& what) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const std::string secret = GenerateToken();
    const std::string tmp = absl::StrCat(path, ".new-", ::getpid());
    DROVER_RETURN_IF_ERROR(WriteFileAtomic(tmp, secret + "\n", 0600));
    const int linked = ::link(tmp.c_str(), path.c_str());
    const int err = errno;
    ::unlink(tmp.c_str());
    if (linked == 0) return secret;
    if (err != EEXIST) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot create ", what, " ", path, ": ", std::strerror(err)));
    }
  }
  DROVER_ASSIGN_OR_RETURN(std::string text, ReadOwnerOnlyFile(path, what));
  std::string secret(absl::StripAsciiWhitespace(text));
  if (secret.empty()) return absl::FailedPreconditionError(absl::StrCat(what, " ", path, " is empty"));
  return secret;
}

// The redis.conf of a Redis for drover's state: on `bind`:`port`, data (append-only)
// in `dir`, clients must AUTH with `password`; the config file's path shows in the
// process title, by which `drover up` and `drover down` know the server as theirs.
std::string RedisConfig(int port, const std::string& bind, const std::string& dir,
                        const std::string& password, const std::string& password_file);

// `s` as a double-quoted string of redis.conf.
std::string RedisQuoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string RedisConfig(int port, const std::string& bind, const std::string& dir,
                        const std::string& password, const std::string& password_file) {
  return absl::StrCat("# written by drover; the password is also in ", password_file, "\n",
                      "port ", port, "\nbind ", bind, "\ndir ", RedisQuoted(dir),
                      "\nappendonly yes\nappendfsync everysec\nsave \"\"\ndaemonize no\n",
                      "requirepass ", password, "\n",
                      "proc-title-template \"{title} {listen-addr} {config-file}\"\n");
}

struct UpFlags {
  int nodes = 1;
  int gpus_per_node = -1;     // -1: the GPUs found
  double cpus_per_node = 0;   // 0: all
  std::string memory_per_node;
  bool redis = false;
  bool tls = false;
  int port = 0;
  int64_t node_timeout_ms = 10000;
  int64_t kill_grace_ms = 5000;
  int timeout_s = 60;
};

// Which daemons of a recorded cluster run: the recorded pid if it still runs its
// daemon, else one found running the same role (brought back by hand); 0 if none.
struct Liveness {
  pid_t redis = 0;
  pid_t scheduler = 0;
  std::vector<pid_t> agents;  // one per recorded agent
  bool any() const {
    return redis != 0 || scheduler != 0 ||
           std::any_of(agents.begin(), agents.end(), [](pid_t p) { return p != 0; });
  }
};

Liveness Survey(const ClusterRecord& r) {
  const std::vector<Found> found = DaemonsUnder(r.dir);
  auto pick = [&](pid_t recorded, absl::string_view program, auto is_role) -> pid_t {
    if (RunsClusterDaemon(recorded, program, r.dir)) return recorded;
    for (const Found& f : found) {
      if (is_role(f)) return f.pid;
    }
    return 0;
  };
  Liveness l;
  if (r.redis_pid != 0 || !r.redis_argv.empty()) {
    l.redis = pick(r.redis_pid, kRedisProgram, [&](const Found& f) { return IsRedisOf(f, r.dir); });
  }
  l.scheduler = pick(r.scheduler_pid, kSchedulerProgram,
                     [&](const Found& f) { return IsSchedulerOf(f, r.dir); });
  const size_t agents = std::max(r.agent_pids.size(), r.agent_argvs.size());
  for (size_t i = 0; i < agents; ++i) {
    l.agents.push_back(pick(i < r.agent_pids.size() ? r.agent_pids[i] : 0, kAgentProgram,
                            [&](const Found& f) { return IsAgentOf(f, r.dir, i); }));
  }
  return l;
}

// If the record is that of a `drover start --head` head (no daemon of `drover up`)
// whose scheduler runs: a sentence saying so; else "".
std::string StartedHead(const ClusterRecord& r) {
  if (r.scheduler_pid != 0 || !r.scheduler_argv.empty() ||
      !RunsDaemon(r.head_pid, kSchedulerProgram)) {
    return "";
  }
  return absl::StrCat("a head started by `drover start --head` runs here (scheduler pid ",
                      r.head_pid, " at ", r.address.empty() ? "?" : r.address, ", recorded in ",
                      ClusterFile(), ")");
}

// "scheduler (pid 12)" / "scheduler (dead)".
std::string Described(const std::string& name, pid_t pid) {
  return pid != 0 ? absl::StrCat(name, " (pid ", pid, ")") : absl::StrCat(name, " (dead)");
}

// `drover up` where a recorded cluster partly runs: brings back in place what is dead
// (Redis on its port and directory, the scheduler on its port, each agent on its own
// directory, all with the command lines they were first started with), leaves what
// runs alone, and waits until every node is ALIVE. The jobs of a --redis cluster keep
// running: the restarted scheduler reloads them from Redis and the agents, which keep
// their node ids, re-register and report their processes.
int RepairCluster(const ClusterRecord& r, const Liveness& live, const UpFlags& f, bool json) {
  auto text = ReadFile(ClusterFile());
  if (!text.ok()) return Fail(text.status());
  nlohmann::json record = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!record.is_object()) return Fail(ClusterFile() + ": not a JSON object");
  const bool progress = !json;
  auto say = [progress](const std::string& line) {
    if (progress) std::cerr << line << "\n";
  };
  const std::string address = r.address.empty() ? "?" : r.address;
  std::vector<std::string> found_parts;
  if (r.redis_pid != 0 || !r.redis_argv.empty()) found_parts.push_back(Described("redis-server", live.redis));
  found_parts.push_back(Described("scheduler", live.scheduler));
  for (size_t i = 0; i < live.agents.size(); ++i) {
    found_parts.push_back(Described(absl::StrCat("agent-", i), live.agents[i]));
  }
  say(absl::StrCat("drover: found the cluster at ", address, " (", ClusterFile(),
                   "): ", absl::StrJoin(found_parts, ", ")));
  const size_t nodes = live.agents.size();
  if (static_cast<size_t>(f.nodes) != nodes || f.redis != !r.redis_argv.empty() ||
      f.tls != !r.tls_ca.empty()) {
    say(absl::StrCat("drover: this cluster keeps its ", nodes, nodes == 1 ? " node" : " nodes",
                     r.redis_argv.empty() ? "" : ", Redis", r.tls_ca.empty() ? "" : ", TLS",
                     "; to start one with other settings, `drover down` first"));
  }
  // What cannot be brought back in place: a role that runs no more and whose command
  // line the record lacks (a `drover start --head` record, or one of an older drover).
  auto cannot = [&](const std::string& what) {
    return Fail(absl::StrCat(
        "part of the cluster recorded in ", ClusterFile(), " still runs, but ", what,
        " is dead and the record does not say how to start it again; stop what runs with "
        "`drover down`, then `drover up`"));
  };
  if (!r.redis_argv.empty() || r.redis_pid != 0) {
    if (live.redis == 0 && r.redis_argv.empty()) return cannot("redis-server");
  }
  if (live.scheduler == 0 && r.scheduler_argv.empty()) return cannot("the scheduler");
  for (size_t i = 0; i < nodes; ++i) {
    if (live.agents[i] == 0 && (i >= r.agent_argvs.size() || r.agent_argvs[i].empty())) {
      return cannot(absl::StrCat("agent-", i));
    }
  }
  auto save = [&record]() {
    return WriteFileAtomic(ClusterFile(), record.dump(2) + "\n", 0600);
  };
  auto log_of = [&](const std::string& name) { return absl::StrCat(r.dir, "/", name, ".log"); };
  auto spawn = [&](const std::vector<std::string>& argv, const std::string& log) {
    SpawnOptions o;
    o.argv = argv;
    o.stdout_path = o.stderr_path = log;
    o.new_session = true;
    return Spawn(o);
  };
  // A port that must be ours to bring a daemon back on it.
  auto port_taken = [&](const std::string& what, const std::string& hostport) -> std::string {
    auto hp = ParseHostPort(hostport);
    if (!hp.ok()) return absl::StrCat(ClusterFile(), ": ", what, " address '", hostport, "': ",
                                      hp.status().message());
    if (Accepts(hp->port)) {
      return absl::StrCat("cannot bring ", what, " back on ", hostport,
                          ": another process listens there now; stop it, or `drover down` and "
                          "`drover up` a new cluster");
    }
    return "";
  };
  std::vector<std::string> restarted;

  // Redis first: the scheduler loads the jobs from it as it starts.
  record["redis_pid"] = live.redis;
  if (live.redis == 0 && !r.redis_argv.empty()) {
    if (std::string e = port_taken("redis-server", r.redis); !e.empty()) return Fail(e);
    auto pid = spawn(r.redis_argv, log_of("redis"));
    if (!pid.ok()) return Fail(pid.status());
    const int port = ParseHostPort(r.redis)->port;
    const pid_t p = *pid;
    if (!WaitFor([&] { return Accepts(port) || !Alive(p); }, absl::Seconds(f.timeout_s)) ||
        !Alive(p)) {
      return Fail(absl::StrCat("redis-server did not start again; its log (", log_of("redis"),
                               ") ends with:\n", LogTail(log_of("redis"))));
    }
    record["redis_pid"] = p;
    restarted.push_back(absl::StrCat("redis-server (pid ", p, ", ", r.redis, ")"));
  }
  if (record["redis_pid"] == 0) record.erase("redis_pid");

  record["scheduler_pid"] = live.scheduler;
  if (live.scheduler == 0) {
    if (std::string e = port_taken("the scheduler", r.address); !e.empty()) return Fail(e);
    const std::string ready = r.dir + "/scheduler.ready";
    ::unlink(ready.c_str());
    auto pid = spawn(r.scheduler_argv, log_of("scheduler"));
    if (!pid.ok()) return Fail(pid.status());
    const pid_t p = *pid;
    record["scheduler_pid"] = p;
    if (!save().ok()) return Fail("cannot write " + ClusterFile());
    std::string got;
    WaitFor(
        [&] {
          auto ready_text = ReadFile(ready);
          if (ready_text.ok()) {
            auto rr = ParseClusterRecord(*ready_text, ready);
            if (rr.ok()) got = rr->address;
          }
          return !got.empty() || !Alive(p);
        },
        absl::Seconds(f.timeout_s));
    if (got.empty()) {
      return Fail(absl::StrCat("the scheduler did not start again; its log (",
                               log_of("scheduler"), ") ends with:\n",
                               LogTail(log_of("scheduler"))));
    }
    restarted.push_back(absl::StrCat("scheduler (pid ", p, ", ", got, ")"));
    if (r.redis.empty()) {
      say("drover: this cluster keeps its state in memory: the jobs of the scheduler that "
          "died are lost and their processes stopped (`drover up --redis` keeps jobs "
          "running across a head restart)");
    }
  }

  auto client = Client::Connect({r.address, r.token_file, r.tls_ca});
  if (!client.ok()) return Fail(client.status());
  // A restarted agent is the node of its directory (`<dir>/node-id`). The scheduler may
  // still show that node ALIVE at its dead agent's address for a moment (the loss is
  // declared after a grace): it is back once it shows another address.
  std::map<std::string, std::string> coming_back;  // node id -> the dead agent's address
  auto node_of = [](const std::vector<std::string>& argv) -> std::string {
    for (size_t k = 0; k + 1 < argv.size(); ++k) {
      if (argv[k] == "--dir") {
        auto id = ReadFile(argv[k + 1] + "/node-id");
        return id.ok() ? std::string(absl::StripAsciiWhitespace(*id)) : "";
      }
    }
    return "";
  };
  absl::StatusOr<ClusterStatus> before = (*client)->Status();
  nlohmann::json agent_pids = nlohmann::json::array();
  for (size_t i = 0; i < nodes; ++i) {
    pid_t p = live.agents[i];
    if (p == 0) {
      if (std::string id = node_of(r.agent_argvs[i]); !id.empty()) {
        coming_back[id] = "";
        if (before.ok()) {
          for (const auto& n : before->nodes) {
            if (n.node_id == id) coming_back[id] = n.agent_address;
          }
        }
      }
      auto pid = spawn(r.agent_argvs[i], log_of(absl::StrCat("agent-", i)));
      if (!pid.ok()) return Fail(pid.status());
      p = *pid;
      restarted.push_back(absl::StrCat("agent-", i, " (pid ", p, ")"));
    }
    agent_pids.push_back(p);
  }
  record["agent_pids"] = agent_pids;
  if (!save().ok()) return Fail("cannot write " + ClusterFile());

  // Every node ALIVE again: the agents of a restarted scheduler re-register (their
  // nodes show RECONNECTING until then), a restarted agent registers as its node.
  ClusterStatus status;
  int alive = 0;
  bool ok = WaitFor(
      [&] {
        auto st = (*client)->Status();
        if (!st.ok()) return false;
        status = *st;
        alive = 0;
        size_t back = 0;
        for (const auto& n : st->nodes) {
          if (n.state != NodeState::kAlive) continue;
          auto it = coming_back.find(n.node_id);
          if (it != coming_back.end() && !it->second.empty() && n.agent_address == it->second) {
            continue;  // still the dead agent's registration
          }
          ++alive;
          back += it != coming_back.end();
        }
        return alive >= static_cast<int>(nodes) && back == coming_back.size();
      },
      absl::Seconds(f.timeout_s));
  if (!ok) {
    return Fail(absl::StrCat(
        restarted.empty() ? "nothing was restarted, but only "
                          : absl::StrCat("restarted ", absl::StrJoin(restarted, ", "), ", but only "),
        alive, " of ", nodes, " nodes are ALIVE after ", f.timeout_s, " s; logs in ", r.dir));
  }
  if (json) {
    record["restarted"] = restarted;
    std::cout << record.dump(2) << "\n";
    return 0;
  }
  if (restarted.empty()) {
    std::cerr << "drover: every daemon of the cluster at " << address
              << " runs; nothing to restart (stop it with `drover down`)\n";
  } else {
    std::cerr << "drover: restarted " << absl::StrJoin(restarted, ", ") << "; " << nodes
              << (nodes == 1 ? " node" : " nodes") << " ready\n";
  }
  std::cout << "cluster at " << address << " (logs in " << r.dir << ")\n";
  return 0;
}

// `drover up` and `drover down` change one DROVER_HOME's cluster: two at once would
// each start (or stop) daemons the other does not know of. Each holds an flock on
// $DROVER_HOME/cluster.lock (owner-only) while it works, with its pid in the file; a
// second one says which pid holds it and waits for it, at most `wait`. The lock goes
// with the process (the fd is close-on-exec: the daemons it starts never hold it).
class HomeLock {
 public:
  // The lock, or an error saying who holds it and what to do.
  static absl::StatusOr<HomeLock> Take(const std::string& what, absl::Duration wait,
                                       bool progress) {
    const std::string home = DroverHome();
    if (auto s = MakeDirs(home, 0700); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("cannot make DROVER_HOME ", home,
                                                 " for its lock file: ", s.message()));
    }
    const std::string path = home + "/cluster.lock";
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
      return absl::PermissionDeniedError(absl::StrCat(
          "cannot open the lock file ", path, ": ", std::strerror(errno), "; `drover ", what,
          "` needs to create and lock it: make ", home,
          " yours and writable (no symlink there), or set DROVER_HOME to a directory of yours"));
    }
    ::fchmod(fd, 0600);
    auto holder = [fd] {
      char buf[32] = {};
      const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
      std::string text(buf, n > 0 ? static_cast<size_t>(n) : 0);
      text = std::string(absl::StripAsciiWhitespace(text));
      return text.empty() ? std::string("a process that has not written its pid yet")
                          : absl::StrCat("pid ", text);
    };
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK) {
        const int err = errno;
        ::close(fd);
        return absl::UnavailableError(absl::StrCat(
            "cannot lock ", path, ": ", std::strerror(err), "; `drover ", what,
            "` needs a local file system that supports flock for DROVER_HOME (set DROVER_HOME "
            "to a local directory)"));
      }
      const std::string first = holder();
      if (progress) {
        std::cerr << "drover: another `drover up` or `drover down` (" << first
                  << ") is working on the cluster in " << home << " (it holds " << path
                  << "); waiting for it, at most " << absl::FormatDuration(wait) << "\n";
      }
      const bool got = WaitFor([fd] { return ::flock(fd, LOCK_EX | LOCK_NB) == 0; }, wait);
      if (!got) {
        const std::string now = holder();
        ::close(fd);
        return absl::UnavailableError(absl::StrCat(
            "another `drover up` or `drover down` (", now, ") still holds ", path, " after ",
            absl::FormatDuration(wait), "; this `drover ", what,
            "` changed nothing: wait for that one to finish (or stop it), then run `drover ",
            what, "` again"));
      }
    }
    const std::string pid = absl::StrCat(::getpid(), "\n");
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
      // The lock holds without it; only the message of a waiting one is poorer.
    }
    return HomeLock(fd);
  }
  HomeLock(HomeLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  HomeLock& operator=(HomeLock&&) = delete;
  ~HomeLock() {
    if (fd_ < 0) return;
    (void)!::ftruncate(fd_, 0);
    ::close(fd_);  // releases the flock
  }

 private:
  explicit HomeLock(int fd) : fd_(fd) {}
  int fd_;
};

int CmdUp(const UpFlags& f, bool json) {
  auto memory = ParseMemoryFlag("--memory-per-node", f.memory_per_node);
  if (!memory.ok()) return Fail(memory.status(), kUsageError);
  // The other's work takes up to its own --timeout per step: wait a bit more than ours.
  auto lock = HomeLock::Take("up", absl::Seconds(f.timeout_s) * 2, !json);
  if (!lock.ok()) return Fail(lock.status());
  const std::string home = DroverHome();
  const std::string dir = home + "/cluster";
  // Never a second cluster over live daemons of the first: bring back what is dead.
  if (auto existing = ReadClusterFile(); existing.ok()) {
    if (std::string head = StartedHead(*existing); !head.empty()) {
      return Fail(absl::StrCat(head, "; `drover up` would start a second cluster over it: "
                               "use another DROVER_HOME, or stop that head first"));
    }
    const Liveness live = Survey(*existing);
    if (live.any()) return RepairCluster(*existing, live, f, json);
    if (!json) {
      std::cerr << "drover: no daemon of the cluster recorded in " << ClusterFile()
                << " runs; starting a new one\n";
    }
  }
  if (auto s = MakeDirs(dir, 0700); !s.ok()) return Fail(std::string(s.message()));
  ::chmod(home.c_str(), 0700);
  const std::string token_file = home + "/token";
  auto token = LoadOrCreateTokenFile(token_file);
  if (!token.ok()) return Fail(std::string(token.status().message()));

  // TLS: the scheduler makes the CA here (or keeps the one from an earlier `up --tls`).
  const std::string tls_dir = home + "/tls";
  nlohmann::json record;
  record["token_file"] = token_file;
  record["dir"] = dir;
  record["agent_pids"] = nlohmann::json::array();
  record["agent_argvs"] = nlohmann::json::array();
  auto save = [&record]() {
    return WriteFileAtomic(ClusterFile(), record.dump(2) + "\n", 0600);
  };
  // On a terminal, what `up` waits for, on a status line (erased when done).
  std::unique_ptr<ProgressLine> line = ProgressLine::ForStderr();
  auto show = [&line](const std::string& text) {
    if (line != nullptr) line->Show(text);
  };
  auto abort_up = [&](const std::string& msg) {
    line.reset();
    for (auto& p : record["agent_pids"]) Terminate(p.get<int>(), kAgentProgram, absl::Seconds(5));
    Terminate(record.value("scheduler_pid", 0), kSchedulerProgram, absl::Seconds(5));
    Terminate(record.value("redis_pid", 0), kRedisProgram, absl::Seconds(5));
    ::unlink(ClusterFile().c_str());
    return Fail(msg);
  };
  const bool progress = !json;
  // A line of its own on stderr (above the status line).
  auto say = [&line, progress](const std::string& text) {
    if (!progress) return;
    if (line == nullptr) {
      std::cerr << text << "\n";
    } else {
      line->PrintAbove([&] { std::cerr << text << "\n"; });
    }
  };

  std::string redis_address;
  const std::string redis_password_file = home + "/redis.password";
  if (f.redis) {
    auto port = PickFreePort("127.0.0.1");
    if (!port.ok()) return Fail(std::string(port.status().message()));
    show("drover: starting redis-server");
    // Only the scheduler may read the jobs (their command lines and environments): a
    // generated password, kept beside the token, given to redis-server in a config
    // file only we can read (a command line is visible to every local user).
    auto password = LoadOrCreateSecretFile(redis_password_file, "Redis password file");
    if (!password.ok()) return Fail(password.status());
    const std::string conf = dir + "/redis.conf";
    const std::string conf_text =
        RedisConfig(*port, "127.0.0.1", dir, *password, redis_password_file);
    if (auto s = WriteFileAtomic(conf, conf_text, 0600); !s.ok()) return Fail(s);
    SpawnOptions o;
    o.argv = {"redis-server", conf};
    record["redis_argv"] = o.argv;
    record["redis_password_file"] = redis_password_file;
    o.stdout_path = dir + "/redis.log";
    o.stderr_path = dir + "/redis.log";
    o.new_session = true;
    auto pid = Spawn(o);
    if (!pid.ok()) {
      return Fail(absl::StrCat(pid.status().message(), "; install it with `apt-get install "
                               "redis-server` or drop --redis"));
    }
    record["redis_pid"] = *pid;
    redis_address = absl::StrCat("127.0.0.1:", *port);
    record["redis"] = redis_address;
    pid_t redis_pid = *pid;
    if (!WaitFor([&] { return Accepts(*port) || !Alive(redis_pid); }, absl::Seconds(f.timeout_s)) ||
        !Alive(redis_pid)) {
      return abort_up(absl::StrCat("redis-server did not start; its log (", dir,
                                   "/redis.log) ends with:\n", LogTail(dir + "/redis.log")));
    }
    say("drover: redis-server at " + redis_address);
  }

  const std::string scheduler_bin = FindDroverBinary("drover-scheduler");
  const std::string agent_bin = FindDroverBinary("drover-agent");
  if (scheduler_bin.empty() || agent_bin.empty()) {
    return abort_up(
        "cannot find drover-scheduler/drover-agent next to this binary or in PATH; build "
        "them (`bazel build //...`) or set DROVER_BIN_DIR");
  }
  const std::string ready = dir + "/scheduler.ready";
  ::unlink(ready.c_str());
  SpawnOptions so;
  so.argv = {scheduler_bin, "--bind", "127.0.0.1", "--port", absl::StrCat(f.port),
             "--token-file", token_file, "--ready-file", ready,
             "--node-timeout-ms", absl::StrCat(f.node_timeout_ms),
             "--kill-grace-ms", absl::StrCat(f.kill_grace_ms)};
  if (!redis_address.empty()) {
    so.argv.insert(so.argv.end(),
                   {"--redis", redis_address, "--redis-password-file", redis_password_file});
  }
  if (f.tls) so.argv.insert(so.argv.end(), {"--tls-dir", tls_dir});
  so.stdout_path = so.stderr_path = dir + "/scheduler.log";
  so.new_session = true;
  show("drover: starting the scheduler");
  auto spid = Spawn(so);
  if (!spid.ok()) return abort_up(std::string(spid.status().message()));
  record["scheduler_pid"] = *spid;
  if (!save().ok()) return abort_up("cannot write " + ClusterFile());
  std::string address;
  std::string tls_ca;
  bool ok = WaitFor(
      [&] {
        auto text = ReadFile(ready);
        if (text.ok()) {
          absl::StatusOr<ClusterRecord> r = ParseClusterRecord(*text, ready);
          if (r.ok()) {
            address = r->address;
            tls_ca = r->tls_ca;
          }
        }
        return !address.empty() || !Alive(*spid);
      },
      absl::Seconds(f.timeout_s));
  ok = ok && !address.empty();
  if (!ok) {
    return abort_up(absl::StrCat("the scheduler did not start; its log (", dir,
                                 "/scheduler.log) ends with:\n", LogTail(dir + "/scheduler.log")));
  }
  record["address"] = address;
  if (!tls_ca.empty()) record["tls_ca"] = tls_ca;
  // Brought back, the scheduler must listen where the agents and clients look for it.
  if (auto hp = ParseHostPort(address); hp.ok()) {
    for (size_t i = 0; i + 1 < so.argv.size(); ++i) {
      if (so.argv[i] == "--port") so.argv[i + 1] = absl::StrCat(hp->port);
    }
  }
  record["scheduler_argv"] = so.argv;
  if (!save().ok()) return abort_up("cannot write " + ClusterFile());
  say("drover: scheduler at " + address +
      (tls_ca.empty() ? "" : absl::StrCat(" (TLS, cluster CA ", tls_ca, ")")));

  for (int i = 0; i < f.nodes; ++i) {
    SpawnOptions ao;
    std::string node_dir = absl::StrCat(dir, "/agent-", i);
    ao.argv = {agent_bin, "--scheduler", address, "--token-file", token_file, "--dir", node_dir,
               "--kill-grace-ms", absl::StrCat(f.kill_grace_ms)};
    if (!tls_ca.empty()) ao.argv.insert(ao.argv.end(), {"--tls-ca", tls_ca});
    if (f.gpus_per_node >= 0) {
      ao.argv.push_back("--num-gpus");
      ao.argv.push_back(absl::StrCat(f.gpus_per_node));
    }
    if (f.cpus_per_node > 0) {
      ao.argv.push_back("--num-cpus");
      ao.argv.push_back(absl::StrCat(f.cpus_per_node));
    }
    if (*memory > 0) {
      ao.argv.push_back("--memory-bytes");
      ao.argv.push_back(absl::StrCat(*memory));
    }
    ao.stdout_path = ao.stderr_path = absl::StrCat(dir, "/agent-", i, ".log");
    ao.new_session = true;
    auto apid = Spawn(ao);
    if (!apid.ok()) return abort_up(std::string(apid.status().message()));
    record["agent_pids"].push_back(*apid);
    record["agent_argvs"].push_back(ao.argv);
  }
  if (!save().ok()) return abort_up("cannot write " + ClusterFile());

  auto client = Client::Connect({address, token_file, tls_ca});
  if (!client.ok()) return abort_up(std::string(client.status().message()));
  ClusterStatus status;
  const absl::Time agents_started = absl::Now();
  int shown = -1;  // the count on the status line
  ok = WaitFor(
      [&] {
        auto s = (*client)->Status();
        if (!s.ok()) return false;
        int alive = 0;
        for (const auto& n : s->nodes) alive += n.state == NodeState::kAlive;
        status = *s;
        if (line != nullptr) {  // a new count at once, the time at most every 100 ms
          const std::string text = NodesComingUp(alive, f.nodes, absl::Now() - agents_started);
          alive != shown ? line->Show(text) : line->Update(text);
          shown = alive;
        }
        return alive >= f.nodes;
      },
      absl::Seconds(f.timeout_s));
  line.reset();
  if (!ok) {
    return abort_up(absl::StrCat("only ", status.nodes.size(), " of ", f.nodes,
                                 " node agents registered in time; the first agent's log ends "
                                 "with:\n", LogTail(dir + "/agent-0.log")));
  }
  if (json) {
    std::cout << record.dump(2) << "\n";
    return 0;
  }
  std::cerr << "drover: " << f.nodes << (f.nodes == 1 ? " node" : " nodes") << " ready\n";
  Table t({"NODE", "ADDRESS", "CPUS", "GPUS", "MEMORY"});
  for (const auto& n : status.nodes) {
    t.AddRow({n.node_id, n.agent_address, absl::StrCat(n.total.cpus), absl::StrCat(n.total.gpus),
              HumanBytes(n.total.memory_bytes)});
  }
  t.Print(std::cout);
  std::cout << "\ncluster at " << address << " (logs in " << dir << ")\n"
            << "next: drover run --nproc 2 -- hostname    |    drover status    |    drover down\n";
  return 0;
}

// SIGTERM to every process of `procs` at once, SIGKILL after `grace` to those still
// there; returns once all are gone (or 5 s after the SIGKILL).
void TerminateAll(const std::vector<Found>& procs, absl::Duration grace) {
  for (const Found& p : procs) ::kill(p.pid, SIGTERM);
  auto all_gone = [&] {
    return std::none_of(procs.begin(), procs.end(), [](const Found& p) { return Alive(p.pid); });
  };
  if (WaitFor(all_gone, grace)) return;
  for (const Found& p : procs) {
    if (Alive(p.pid)) ::kill(p.pid, SIGKILL);
  }
  WaitFor(all_gone, absl::Seconds(5));
}

int CmdDown(bool json) {
  // Without a DROVER_HOME there is nothing to lock (nor to stop). With one, lock even
  // before a cluster is recorded: a `drover up` writes its record only once its head
  // runs, and a `down` meanwhile must wait for it rather than find nothing to stop.
  std::optional<HomeLock> lock;
  if (::access(DroverHome().c_str(), F_OK) == 0) {
    auto taken = HomeLock::Take("down", absl::Seconds(120), !json);
    if (!taken.ok()) return Fail(taken.status());
    lock.emplace(*std::move(taken));
  }
  auto record = ReadClusterFile();
  if (!record.ok()) {
    if (absl::IsNotFound(record.status())) {
      return Fail(absl::StrCat("no local cluster recorded in ", ClusterFile(),
                               "; nothing to stop (start one with `drover up`)"));
    }
    return Fail(record.status());
  }
  if (std::string head = StartedHead(*record); !head.empty()) {
    return Fail(absl::StrCat(head, "; `drover down` stops what `drover up` started: stop "
                             "it where it was started (`systemctl stop drover-scheduler`, or "
                             "SIGTERM to pid ", record->head_pid, ")"));
  }
  // Every daemon of the cluster: the recorded pids that still run their daemon, and any
  // other process running a daemon on the cluster's directory (brought back by hand).
  std::vector<Found> agents, schedulers, redis;
  auto add = [&](pid_t pid, absl::string_view program, std::vector<Found>* to) {
    for (const auto* list : {&agents, &schedulers, &redis}) {
      for (const Found& f : *list) {
        if (f.pid == pid) return;
      }
    }
    to->push_back({pid, std::string(program), {}});
  };
  auto survey = [&] {
    for (pid_t pid : record->agent_pids) {
      if (RunsClusterDaemon(pid, kAgentProgram, record->dir)) add(pid, kAgentProgram, &agents);
    }
    if (RunsClusterDaemon(record->scheduler_pid, kSchedulerProgram, record->dir)) {
      add(record->scheduler_pid, kSchedulerProgram, &schedulers);
    }
    if (RunsClusterDaemon(record->redis_pid, kRedisProgram, record->dir)) {
      add(record->redis_pid, kRedisProgram, &redis);
    }
    for (const Found& f : DaemonsUnder(record->dir)) {
      add(f.pid, f.program,
          f.program == kAgentProgram ? &agents
                                     : f.program == kSchedulerProgram ? &schedulers : &redis);
    }
  };
  survey();
  const size_t stopping = agents.size() + schedulers.size() + redis.size();
  // Agents first: each stops its workers (SIGTERM, grace, SIGKILL) and its object
  // store before exiting. Then the scheduler, then the Redis it writes to.
  TerminateAll(agents, absl::Seconds(30));
  TerminateAll(schedulers, absl::Seconds(10));
  TerminateAll(redis, absl::Seconds(10));

  // Anything of the cluster still alive (it ignored SIGKILL, or was started meanwhile)?
  agents.clear();
  schedulers.clear();
  redis.clear();
  survey();
  std::vector<std::string> left;
  for (const auto* list : {&agents, &schedulers, &redis}) {
    for (const Found& f : *list) left.push_back(absl::StrCat(f.program, " (pid ", f.pid, ")"));
  }
  const size_t stopped = stopping;
  if (!left.empty()) {
    return Fail(absl::StrCat("stopped ", stopping, " daemons, but ", absl::StrJoin(left, ", "),
                             " of the cluster still ", left.size() == 1 ? "runs" : "run",
                             "; ", ClusterFile(), " is kept: run `drover down` again"));
  }
  ::unlink(ClusterFile().c_str());
  if (json) {
    std::cout << "{\"stopped\": " << stopped << "}\n";
  } else {
    std::cout << "stopped " << stopped << " daemons of the cluster at "
              << (record->address.empty() ? "?" : record->address) << "\n";
  }
  return 0;
}

struct StartFlags {
  bool head = false;
  bool redis_server = false;  // run the head's Redis (with a generated password)
  std::string redis_password_file;  // head, redis server: the Redis password's file
  bool tls = false;  // head: make or keep the cluster CA; agent: get a certificate
  std::string address;  // agent: the head's address
  std::string bind;
  int port = 0;
  std::string redis;
  std::string advertise;
  int num_gpus = -1;    // -1: the GPUs found
  std::vector<int> gpu_ids;  // agent: exactly these devices (wins over num_gpus)
  double num_cpus = 0;  // 0: all
  std::string node_ip;
  std::string memory;
  std::vector<std::string> resources;
  std::string dir;  // agent: its state directory (logs); empty: the agent's default
};

int ExecOrFail(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execv(args[0], args.data());
  return Fail(absl::StrCat("cannot run ", argv[0], ": ", std::strerror(errno)));
}

// `drover start --redis-server`: the head's Redis in the foreground (exec), bound to
// loopback unless --bind says otherwise, with the password of --redis-password-file
// ($DROVER_HOME/redis.password; generated if missing) in a 600 config file.
int StartRedisServer(const StartFlags& f, const std::string& home) {
  const std::string pw_file =
      f.redis_password_file.empty() ? home + "/redis.password" : f.redis_password_file;
  auto password = LoadOrCreateSecretFile(pw_file, "Redis password file");
  if (!password.ok()) return Fail(password.status());
  const std::string dir = f.dir.empty() ? home + "/redis" : f.dir;
  if (auto s = MakeDirs(dir, 0700); !s.ok()) return Fail(s);
  const std::string conf = dir + "/redis.conf";
  const std::string text = RedisConfig(f.port ? f.port : 6391, f.bind.empty() ? "127.0.0.1" : f.bind,
                                       dir, *password, pw_file);
  if (auto s = WriteFileAtomic(conf, text, 0600); !s.ok()) return Fail(s);
  std::vector<char*> args = {const_cast<char*>("redis-server"), const_cast<char*>(conf.c_str()),
                             nullptr};
  ::execvp(args[0], args.data());
  return Fail(absl::StrCat("cannot run redis-server: ", std::strerror(errno),
                           "; install it with `apt-get install redis-server`"));
}

int CmdStart(const StartFlags& f, const GlobalOptions& g) {
  const std::string home = DroverHome();
  if (auto s = MakeDirs(home, 0700); !s.ok()) return Fail(std::string(s.message()));
  std::string token_file = g.token_file.empty() ? home + "/token" : g.token_file;
  if (f.redis_server) {
    if (f.head || !f.address.empty()) {
      return Fail("--redis-server runs Redis alone: start the head with another `drover "
                  "start --head`", kUsageError);
    }
    return StartRedisServer(f, home);
  }
  if (f.head == !f.address.empty()) {
    return Fail("say what to start: `drover start --head --port P` on the head machine, or "
                "`drover start --address HEAD:PORT` on each worker machine", kUsageError);
  }
  auto memory = ParseMemoryFlag("--memory", f.memory);
  if (!memory.ok()) return Fail(memory.status(), kUsageError);
  if (f.head) {
    const std::string bin = FindDroverBinary("drover-scheduler");
    if (bin.empty()) return Fail("cannot find drover-scheduler; set DROVER_BIN_DIR");
    auto token = LoadOrCreateTokenFile(token_file);
    if (!token.ok()) return Fail(std::string(token.status().message()));
    std::vector<std::string> argv = {bin, "--bind", f.bind.empty() ? "0.0.0.0" : f.bind,
                                     "--port", absl::StrCat(f.port), "--token-file", token_file,
                                     "--ready-file", ClusterFile()};
    if (!f.redis.empty()) {
      argv.push_back("--redis");
      argv.push_back(f.redis);
      if (!f.redis_password_file.empty()) {
        // Started beside its Redis (a service manager starts both at once), the head may
        // come first: `drover start --redis-server` creates the file as it starts.
        const std::string& pw = f.redis_password_file;
        if (!WaitFor([&] { return ::access(pw.c_str(), F_OK) == 0; }, absl::Seconds(30))) {
          return Fail(absl::StrCat("--redis-password-file ", pw, ": no such file after 30 s; "
                                   "`drover start --redis-server` creates it, or write the "
                                   "password of your Redis there (mode 600)"));
        }
        argv.insert(argv.end(), {"--redis-password-file", pw});
      }
    }
    if (!f.advertise.empty()) {
      argv.push_back("--advertise");
      argv.push_back(f.advertise);
    }
    const std::string tls_dir = home + "/tls";
    if (f.tls) argv.insert(argv.end(), {"--tls-dir", tls_dir});
    std::string here = FirstNonLoopbackAddress();
    std::cerr << "drover: starting the head; on every other machine copy " << token_file
              << " (mode 600)"
              << (f.tls ? absl::StrCat(" and ", tls_dir, "/ca.crt (the cluster CA's "
                                       "certificate; the CA's key stays here)")
                        : std::string())
              << " and run:\n  drover start --address " << (here.empty() ? Hostname() : here)
              << ":" << (f.port ? absl::StrCat(f.port) : std::string("PORT"))
              << " --token-file TOKEN" << (f.tls ? " --tls --tls-ca CA.crt" : "") << "\n";
    return ExecOrFail(argv);
  }
  auto hp = ParseHostPort(f.address);
  if (!hp.ok()) return Fail(hp.status(), kUsageError);
  const std::string bin = FindDroverBinary("drover-agent");
  if (bin.empty()) return Fail("cannot find drover-agent; set DROVER_BIN_DIR");
  std::vector<std::string> argv = {bin, "--scheduler", f.address, "--token-file", token_file,
                                   "--port", absl::StrCat(f.port)};
  if (f.num_gpus >= 0) argv.insert(argv.end(), {"--num-gpus", absl::StrCat(f.num_gpus)});
  if (!f.gpu_ids.empty()) argv.insert(argv.end(), {"--gpu-ids", absl::StrJoin(f.gpu_ids, ",")});
  if (!f.dir.empty()) argv.insert(argv.end(), {"--dir", f.dir});
  if (f.num_cpus > 0) argv.insert(argv.end(), {"--num-cpus", absl::StrCat(f.num_cpus)});
  if (!f.node_ip.empty()) argv.insert(argv.end(), {"--node-ip", f.node_ip});
  if (!f.bind.empty()) argv.insert(argv.end(), {"--bind-ip", f.bind});
  if (*memory > 0) argv.insert(argv.end(), {"--memory-bytes", absl::StrCat(*memory)});
  for (const auto& r : f.resources) argv.insert(argv.end(), {"--resource", r});
  if (f.tls || !g.tls_ca.empty()) {
    // The agent asks the head for its certificate, checking the head against this CA.
    const std::string ca = g.tls_ca.empty() ? home + "/tls/ca.crt" : g.tls_ca;
    if (::access(ca.c_str(), R_OK) != 0) {
      return Fail(absl::StrCat("--tls: no cluster CA certificate at ", ca, ": copy the head's ",
                               "$DROVER_HOME/tls/ca.crt there, or pass --tls-ca FILE"),
                  kUsageError);
    }
    argv.insert(argv.end(), {"--tls-ca", ca});
  }
  return ExecOrFail(argv);
}

}  // namespace

void AddClusterCommands(CLI::App& app, GlobalOptions& g, int* rc) {
  static UpFlags up_flags;
  auto* up = app.add_subcommand(
      "up", "start a local cluster (scheduler + node agents); returns when it is ready");
  // Ranges are checked by CLI11 (an error exits with kUsageError, see main.cc); defaults
  // outside them (-1, 0) mean "not given".
  up->add_option("--nodes", up_flags.nodes, "node agents to start")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  up->add_option("--gpus-per-node", up_flags.gpus_per_node,
                 "GPUs each node declares (default: the GPUs found)")
      ->check(CLI::NonNegativeNumber);
  up->add_option("--cpus-per-node", up_flags.cpus_per_node, "CPUs each node offers (default: all)")
      ->check(CLI::PositiveNumber);
  up->add_option("--memory-per-node", up_flags.memory_per_node,
                 "memory each node offers (512M, 4G; default: all)");
  up->add_flag("--redis", up_flags.redis, "keep state in a local redis-server (survives restarts)");
  up->add_flag("--tls", up_flags.tls,
               "encrypt every connection with TLS (a cluster CA in $DROVER_HOME/tls, a "
               "certificate for each daemon)");
  up->add_option("--port", up_flags.port, "scheduler port (default: any free one)")
      ->check(CLI::Range(0, 65535));
  up->add_option("--node-timeout-ms", up_flags.node_timeout_ms, "declare silent nodes dead after")
      ->check(CLI::PositiveNumber);
  up->add_option("--kill-grace-ms", up_flags.kill_grace_ms, "SIGTERM-to-SIGKILL grace")
      ->check(CLI::NonNegativeNumber);
  up->add_option("--timeout", up_flags.timeout_s, "seconds to wait for the cluster to be ready")
      ->check(CLI::PositiveNumber);
  up->add_flag("--json", g.json, "print the cluster record as JSON");
  up->callback([&g, rc] { *rc = CmdUp(up_flags, g.json); });

  auto* down = app.add_subcommand("down", "stop the local cluster and every process it runs");
  down->add_flag("--json", g.json, "machine-readable output");
  down->callback([&g, rc] { *rc = CmdDown(g.json); });

  static StartFlags sf;
  auto* start = app.add_subcommand(
      "start", "run one daemon in the foreground: the head (--head) or a node agent (--address)");
  start->add_flag("--head", sf.head, "start the scheduler on this machine");
  start->add_flag("--tls", sf.tls,
                  "head: encrypt the cluster's connections with TLS (the cluster CA in "
                  "$DROVER_HOME/tls, made if missing); agent: join such a cluster (needs a "
                  "copy of the head's tls/ca.crt: $DROVER_HOME/tls/ca.crt or --tls-ca)");
  start->add_option("--port", sf.port, "port to listen on (head: clients and agents connect here)")
      ->check(CLI::Range(0, 65535));
  start->add_option("--bind", sf.bind, "IP to listen on (head default 0.0.0.0)");
  start->add_option("--redis", sf.redis, "head: HOST:PORT of Redis for durable state");
  start->add_option("--redis-password-file", sf.redis_password_file,
                    "head: the file (mode 600) with the password of that Redis; "
                    "--redis-server: where its password is kept (default "
                    "$DROVER_HOME/redis.password, generated if missing)");
  start->add_flag("--redis-server", sf.redis_server,
                  "run the head's Redis in the foreground: loopback (--bind to change), "
                  "--port (6391), append-only data in --dir ($DROVER_HOME/redis), a "
                  "generated password that only the head (--redis-password-file) knows");
  start->add_option("--advertise", sf.advertise,
                    "head: HOST:PORT agents and workers use to reach it (default: first "
                    "non-loopback address)");
  start->add_option("--num-gpus", sf.num_gpus, "agent: declare this many GPUs")
      ->check(CLI::NonNegativeNumber);
  start->add_option("--gpu-ids", sf.gpu_ids,
                    "agent: offer exactly these GPU device indices (2,3: those a batch "
                    "system such as Slurm assigned; workers get them in "
                    "CUDA_VISIBLE_DEVICES)")
      ->delimiter(',')
      ->check(CLI::NonNegativeNumber);
  start->add_option("--dir", sf.dir,
                    "redis server: its data directory; agent: state directory, where job logs are kept (default: a new "
                    "$DROVER_HOME/agent-<pid>); give a fixed one under a service manager");
  start->add_option("--num-cpus", sf.num_cpus, "agent: offer this many CPUs")
      ->check(CLI::PositiveNumber);
  start->add_option("--memory", sf.memory, "agent: offer this much memory (512M, 4G)");
  start->add_option("--resource", sf.resources, "agent: custom resource NAME=AMOUNT");
  start->add_option("--node-ip", sf.node_ip, "agent: address other nodes reach this one at");
  // The parent's --address is the head address for an agent.
  start->callback([&g, rc] {
    sf.address = g.address;
    *rc = CmdStart(sf, g);
  });
}

}  // namespace drover::cli
