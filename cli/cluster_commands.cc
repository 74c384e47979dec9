// drover up | down | start
//
// `up` starts a whole local cluster (scheduler + N agents, optionally redis-server) as
// background daemons and records them in $DROVER_HOME/cluster.json; `down` stops
// what that file lists. `start` runs one daemon in the foreground for real
// multi-machine clusters (one head, one agent per machine).
#include <signal.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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
// `pid` is not (or no longer) the daemon `program`.
void Terminate(pid_t pid, absl::string_view program, absl::Duration grace) {
  if (!RunsDaemon(pid, program)) return;
  ::kill(pid, SIGTERM);
  if (!WaitFor([pid] { return !Alive(pid); }, grace)) {
    ::kill(pid, SIGKILL);
    WaitFor([pid] { return !Alive(pid); }, absl::Seconds(5));
  }
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

struct UpFlags {
  int nodes = 1;
  int gpus_per_node = -1;     // -1: the GPUs found
  double cpus_per_node = 0;   // 0: all
  std::string memory_per_node;
  bool redis = false;
  int port = 0;
  int64_t node_timeout_ms = 10000;
  int64_t kill_grace_ms = 5000;
  int timeout_s = 60;
};

int CmdUp(const UpFlags& f, bool json) {
  auto memory = ParseMemoryFlag("--memory-per-node", f.memory_per_node);
  if (!memory.ok()) return Fail(memory.status(), kUsageError);
  const std::string home = DroverHome();
  const std::string dir = home + "/cluster";
  if (auto existing = ReadClusterFile(); existing.ok()) {
    if (RunsDaemon(existing->scheduler_pid, kSchedulerProgram)) {
      return Fail(absl::StrCat("a cluster is already running here (scheduler pid ",
                               existing->scheduler_pid, " at ",
                               existing->address.empty() ? "?" : existing->address,
                               "); stop it with `drover down` first"));
    }
  }
  if (auto s = MakeDirs(dir, 0700); !s.ok()) return Fail(std::string(s.message()));
  ::chmod(home.c_str(), 0700);
  const std::string token_file = home + "/token";
  auto token = LoadOrCreateTokenFile(token_file);
  if (!token.ok()) return Fail(std::string(token.status().message()));

  nlohmann::json record;
  record["token_file"] = token_file;
  record["dir"] = dir;
  record["agent_pids"] = nlohmann::json::array();
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
  if (f.redis) {
    auto port = PickFreePort("127.0.0.1");
    if (!port.ok()) return Fail(std::string(port.status().message()));
    show("drover: starting redis-server");
    SpawnOptions o;
    o.argv = {"redis-server", "--port", absl::StrCat(*port), "--bind", "127.0.0.1", "--dir", dir,
              "--appendonly", "yes", "--save", "", "--daemonize", "no"};
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
    so.argv.push_back("--redis");
    so.argv.push_back(redis_address);
  }
  so.stdout_path = so.stderr_path = dir + "/scheduler.log";
  so.new_session = true;
  show("drover: starting the scheduler");
  auto spid = Spawn(so);
  if (!spid.ok()) return abort_up(std::string(spid.status().message()));
  record["scheduler_pid"] = *spid;
  if (!save().ok()) return abort_up("cannot write " + ClusterFile());
  std::string address;
  bool ok = WaitFor(
      [&] {
        auto text = ReadFile(ready);
        if (text.ok()) {
          absl::StatusOr<ClusterRecord> r = ParseClusterRecord(*text, ready);
          if (r.ok()) address = r->address;
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
  if (!save().ok()) return abort_up("cannot write " + ClusterFile());
  say("drover: scheduler at " + address);

  for (int i = 0; i < f.nodes; ++i) {
    SpawnOptions ao;
    std::string node_dir = absl::StrCat(dir, "/agent-", i);
    ao.argv = {agent_bin, "--scheduler", address, "--token-file", token_file, "--dir", node_dir,
               "--kill-grace-ms", absl::StrCat(f.kill_grace_ms)};
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
  }
  if (!save().ok()) return abort_up("cannot write " + ClusterFile());

  auto client = Client::Connect({address, token_file});
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

int CmdDown(bool json) {
  auto record = ReadClusterFile();
  if (!record.ok()) {
    if (absl::IsNotFound(record.status())) {
      return Fail(absl::StrCat("no local cluster recorded in ", ClusterFile(),
                               "; nothing to stop (start one with `drover up`)"));
    }
    return Fail(record.status());
  }
  int stopped = 0;
  // Agents first: each stops its workers (SIGTERM, grace, SIGKILL) before exiting.
  for (pid_t pid : record->agent_pids) {
    stopped += RunsDaemon(pid, kAgentProgram);
    Terminate(pid, kAgentProgram, absl::Seconds(30));
  }
  stopped += RunsDaemon(record->scheduler_pid, kSchedulerProgram);
  Terminate(record->scheduler_pid, kSchedulerProgram, absl::Seconds(10));
  stopped += RunsDaemon(record->redis_pid, kRedisProgram);
  Terminate(record->redis_pid, kRedisProgram, absl::Seconds(10));
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

int CmdStart(const StartFlags& f, const GlobalOptions& g) {
  const std::string home = DroverHome();
  if (auto s = MakeDirs(home, 0700); !s.ok()) return Fail(std::string(s.message()));
  std::string token_file = g.token_file.empty() ? home + "/token" : g.token_file;
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
    }
    if (!f.advertise.empty()) {
      argv.push_back("--advertise");
      argv.push_back(f.advertise);
    }
    std::string here = FirstNonLoopbackAddress();
    std::cerr << "drover: starting the head; on every other machine copy " << token_file
              << " (mode 600) and run:\n  drover start --address "
              << (here.empty() ? Hostname() : here) << ":"
              << (f.port ? absl::StrCat(f.port) : std::string("PORT")) << " --token-file TOKEN\n";
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
  start->add_option("--port", sf.port, "port to listen on (head: clients and agents connect here)")
      ->check(CLI::Range(0, 65535));
  start->add_option("--bind", sf.bind, "IP to listen on (head default 0.0.0.0)");
  start->add_option("--redis", sf.redis, "head: HOST:PORT of Redis for durable state");
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
                    "agent: state directory, where job logs are kept (default: a new "
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
