// deploy/systemd: the units pass `systemd-analyze verify`, say what the deployment needs
// (restart on failure, LimitNOFILE, the token file, the environment file, Redis for the
// head), and their exact command lines run a working cluster: each ExecStart= is
// expanded as systemd does (Environment=, then EnvironmentFile= with the example
// drover.env; ${VAR} one argument, $VAR split at whitespace) and run with a service's
// clean environment. Only paths move into the test's directory (/usr/local/bin/drover,
// /var/lib/drover, /var/lib/drover-redis, /etc/drover) and ports become free ones.
// No systemd runs here (PID 1 is not systemd), so the test plays its part: start,
// SIGKILL and restart as Restart=on-failure would, SIGTERM to the main process as
// KillMode=mixed does.
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/files.h"
#include "common/net.h"
#include "common/spawn.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/util/test_cluster.h"

namespace drover::testing {
namespace {

// The [Service] (and [Unit]) settings of a unit file: key -> every value, in order.
using Settings = std::multimap<std::string, std::string>;

Settings ParseUnit(const std::string& text) {
  Settings out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#' || line[0] == ';' || line[0] == '[') continue;
    auto eq = line.find('=');
    if (eq == absl::string_view::npos) continue;
    out.emplace(std::string(line.substr(0, eq)), std::string(line.substr(eq + 1)));
  }
  return out;
}

std::string One(const Settings& s, const std::string& key) {
  auto it = s.find(key);
  return it == s.end() ? "" : it->second;
}

// Words of a command line or an Environment= value: whitespace-separated, double
// quotes group (and vanish), as systemd splits them.
std::vector<std::string> SplitWords(absl::string_view s) {
  std::vector<std::string> words;
  std::string word;
  bool quoted = false, any = false;
  for (char c : s) {
    if (c == '"') {
      quoted = !quoted;
      any = true;
    } else if (!quoted && (c == ' ' || c == '\t')) {
      if (any) words.push_back(word);
      word.clear();
      any = false;
    } else {
      word.push_back(c);
      any = true;
    }
  }
  if (any) words.push_back(word);
  return words;
}

// The environment systemd gives the service: Environment= assignments, then the
// EnvironmentFile= (whose values win), over systemd's own PATH.
std::map<std::string, std::string> ServiceEnv(const Settings& unit, const std::string& env_file) {
  std::map<std::string, std::string> env = {
      {"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}};
  auto range = unit.equal_range("Environment");
  for (auto it = range.first; it != range.second; ++it) {
    for (const std::string& kv : SplitWords(it->second)) {
      auto eq = kv.find('=');
      if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  }
  for (absl::string_view line : absl::StrSplit(env_file, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    auto eq = line.find('=');
    if (eq != absl::string_view::npos) {
      env[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
    }
  }
  return env;
}

// ExecStart= as systemd runs it: "$VAR" as a word of its own splits into zero or more
// arguments; "${VAR}" anywhere is replaced by the value, as one argument.
std::vector<std::string> ExecArgv(const std::string& exec,
                                  const std::map<std::string, std::string>& env) {
  auto value = [&env](const std::string& name) {
    auto it = env.find(name);
    return it == env.end() ? std::string() : it->second;
  };
  std::vector<std::string> argv;
  for (const std::string& word : SplitWords(exec)) {
    if (std::regex_match(word, std::regex("\\$[A-Za-z_][A-Za-z0-9_]*"))) {
      for (auto& w : absl::StrSplit(value(word.substr(1)), ' ', absl::SkipWhitespace())) {
        argv.emplace_back(w);
      }
      continue;
    }
    std::string out;
    std::smatch m;
    std::string rest = word;
    const std::regex braced("\\$\\{([A-Za-z_][A-Za-z0-9_]*)\\}");
    while (std::regex_search(rest, m, braced)) {
      out += m.prefix().str() + value(m[1].str());
      rest = m.suffix().str();
    }
    argv.push_back(out + rest);
  }
  return argv;
}

class SystemdUnitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/drover-sd-XXXXXX";  // short: the agent's sockets live below it
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    for (const char* sub : {"/state", "/redis", "/etc"}) ASSERT_TRUE(MakeDirs(dir_ + sub).ok());
  }
  void TearDown() override {
    for (auto& [name, pid] : pids_) {
      if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
    }
    (void)!system(("rm -rf '" + dir_ + "'").c_str());
  }

  // A unit's text with its paths moved into the test's directory.
  std::string UnitText(const std::string& name) {
    auto text = ReadFile(Runfile("deploy/systemd/" + name));
    EXPECT_TRUE(text.ok()) << name;
    return Moved(text.value_or(""));
  }
  std::string Moved(std::string text) {
    return absl::StrReplaceAll(text, {{"/usr/local/bin/drover", Runfile("cli/drover")},
                                      {"/var/lib/drover-redis", dir_ + "/redis"},
                                      {"/var/lib/drover", dir_ + "/state"},
                                      {"/etc/drover", dir_ + "/etc"}});
  }

  // Starts `unit` with its own command line and environment; its output goes to
  // <dir>/<unit>.log.
  pid_t Start(const std::string& unit) {
    Settings s = ParseUnit(UnitText(unit));
    SpawnOptions o;
    o.argv = ExecArgv(One(s, "ExecStart"), ServiceEnv(s, env_file_));
    for (const auto& [k, v] : ServiceEnv(s, env_file_)) o.env.push_back(k + "=" + v);
    o.stdout_path = o.stderr_path = dir_ + "/" + unit + ".log";
    auto pid = Spawn(o);
    EXPECT_TRUE(pid.ok()) << pid.status();
    pids_[unit] = pid.value_or(-1);
    return pids_[unit];
  }
  // SIGTERM (what systemd sends the main process) and its exit status.
  int Stop(const std::string& unit, absl::Duration timeout) {
    pid_t pid = pids_[unit];
    pids_[unit] = -1;
    kill(pid, SIGTERM);
    int status = 0;
    if (!WaitFor([&] { return waitpid(pid, &status, WNOHANG) == pid; }, timeout)) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    return status;
  }
  std::string Log(const std::string& unit) {
    return ReadFile(dir_ + "/" + unit + ".log").value_or("(no log)");
  }
  int Cli(const std::vector<std::string>& args, std::string* out, std::string* err) {
    // On the head as its operator would: the cluster the head recorded in its home.
    return RunDrover(args,
                     {"DROVER_HOME=" + dir_ + "/state", "DROVER_ADDRESS=", "DROVER_TOKEN_FILE="},
                     dir_, out, err);
  }

  std::string dir_;
  std::string env_file_;
  std::map<std::string, pid_t> pids_;
};

TEST_F(SystemdUnitsTest, UnitsVerifyAndSayWhatTheDeploymentNeeds) {
  const std::vector<std::string> units = {"drover-scheduler.service", "drover-agent.service",
                                          "drover-redis.service"};
  for (const auto& u : units) ASSERT_TRUE(WriteFileAtomic(dir_ + "/" + u, UnitText(u)).ok());
  if (access("/usr/bin/systemd-analyze", X_OK) == 0) {
    std::vector<std::string> argv = {"/usr/bin/systemd-analyze", "verify"};
    for (const auto& u : units) argv.push_back(dir_ + "/" + u);
    std::string out, err;
    EXPECT_EQ(RunProgram(argv, {}, dir_, &out, &err), 0) << out << err;
    EXPECT_EQ(err, "") << "systemd-analyze verify complains";
  } else {
    std::printf("systemd-analyze is not installed: units not verified by systemd\n");
  }
  for (const char* u : {"drover-scheduler.service", "drover-agent.service"}) {
    Settings s = ParseUnit(UnitText(u));
    EXPECT_EQ(One(s, "Restart"), "on-failure") << u;
    int64_t nofile = 0;
    EXPECT_TRUE(absl::SimpleAtoi(One(s, "LimitNOFILE"), &nofile)) << u;
    EXPECT_GE(nofile, 65536) << u << ": below what the agent asks for (resources.cc)";
    EXPECT_TRUE(absl::StrContains(One(s, "EnvironmentFile"), "/etc/drover.env")) << u;
    EXPECT_TRUE(absl::StrContains(One(s, "ExecStart"), "--token-file ${DROVER_TOKEN_FILE}")) << u;
    EXPECT_EQ(One(s, "KillMode"), "mixed") << u;
  }
  Settings head = ParseUnit(UnitText("drover-scheduler.service"));
  EXPECT_TRUE(absl::StrContains(One(head, "After"), "drover-redis.service"));
  EXPECT_TRUE(absl::StrContains(One(head, "Wants"), "drover-redis.service"));
  EXPECT_TRUE(absl::StrContains(One(head, "ExecStart"), "--redis ${DROVER_REDIS}"));
  EXPECT_TRUE(absl::StrContains(One(head, "ExecStart"),
                                "--redis-password-file ${DROVER_REDIS_PASSWORD_FILE}"));
  Settings redis = ParseUnit(UnitText("drover-redis.service"));
  EXPECT_TRUE(absl::StrContains(One(redis, "ExecStart"), "drover start --redis-server"))
      << "Redis gets its generated password (and append-only data) from drover";
  EXPECT_TRUE(absl::StrContains(One(redis, "ExecStart"),
                                "--redis-password-file ${DROVER_REDIS_PASSWORD_FILE}"));
}

TEST_F(SystemdUnitsTest, CommandLinesRunACluster) {
  auto port = PickFreePort("127.0.0.1");
  auto redis_port = PickFreePort("127.0.0.1");
  ASSERT_TRUE(port.ok() && redis_port.ok());
  // The example drover.env with this test's ports and a small agent.
  auto example = ReadFile(Runfile("deploy/systemd/drover.env"));
  ASSERT_TRUE(example.ok());
  env_file_ = Moved(*example);
  auto set = [this](const std::string& key, const std::string& value) {
    env_file_ = std::regex_replace(env_file_, std::regex("(^|\n)" + key + "=[^\n]*"),
                                   "$1" + key + "=" + value);
  };
  set("DROVER_HEAD", absl::StrCat("127.0.0.1:", *port));
  set("DROVER_PORT", absl::StrCat(*port));
  set("DROVER_REDIS", absl::StrCat("127.0.0.1:", *redis_port));
  set("DROVER_REDIS_PORT", absl::StrCat(*redis_port));
  set("DROVER_HEAD_ARGS", absl::StrCat("--bind 127.0.0.1 --advertise 127.0.0.1:", *port));
  set("DROVER_AGENT_ARGS", "--num-cpus 2 --num-gpus 2");
  ASSERT_TRUE(absl::StrContains(env_file_, absl::StrCat("DROVER_PORT=", *port))) << env_file_;
  ASSERT_TRUE(WriteFileAtomic(dir_ + "/etc/drover.env", env_file_).ok());
  // What LimitNOFILE= gives the services (inherited by the children).
  Settings agent_unit = ParseUnit(UnitText("drover-agent.service"));
  rlimit rl;
  rl.rlim_cur = rl.rlim_max = std::stoul(One(agent_unit, "LimitNOFILE"));
  const bool limit_set = setrlimit(RLIMIT_NOFILE, &rl) == 0;

  ASSERT_GT(Start("drover-redis.service"), 0);
  ASSERT_GT(Start("drover-scheduler.service"), 0);
  // Units start at once (After= does not wait for readiness): an agent on the head's
  // machine that starts before the head has written the token exits, and systemd's
  // Restart=on-failure starts it again. The test starts it once, after the token.
  const std::string token = dir_ + "/state/token";
  ASSERT_TRUE(WaitFor([&] { return ::access(token.c_str(), R_OK) == 0; }, absl::Seconds(30)))
      << Log("drover-scheduler.service");
  ASSERT_GT(Start("drover-agent.service"), 0);
  std::string out, err;
  auto alive_nodes = [&] {
    if (Cli({"status", "--json"}, &out, &err) != 0) return -1;
    auto j = nlohmann::json::parse(out, nullptr, false);
    int alive = 0;
    for (auto& n : j["nodes"]) alive += n["state"] == "ALIVE";
    return alive;
  };
  ASSERT_TRUE(WaitFor([&] { return alive_nodes() == 1; }, absl::Seconds(30)))
      << out << err << Log("drover-scheduler.service") << Log("drover-agent.service")
      << Log("drover-redis.service");
  // Redis refuses whoever lacks the password; none of it is on a command line.
  auto password = ReadFile(dir_ + "/state/redis.password");
  ASSERT_TRUE(password.ok()) << Log("drover-redis.service");
  std::string cmdline;
  for (const char* u : {"drover-redis.service", "drover-scheduler.service"}) {
    cmdline += ReadFile(absl::StrCat("/proc/", pids_[u], "/cmdline")).value_or("");
  }
  EXPECT_FALSE(absl::StrContains(cmdline, absl::StripAsciiWhitespace(*password))) << cmdline;
  std::string noauth;
  RunProgram({"redis-cli", "-p", absl::StrCat(*redis_port), "hlen", "drover:jobs"}, {}, dir_,
             &noauth, &err);
  EXPECT_TRUE(absl::StrContains(noauth + err, "NOAUTH")) << noauth << err;
  auto status = nlohmann::json::parse(out);
  EXPECT_TRUE(absl::StartsWith(status["state_backend"].get<std::string>(),
                               absl::StrCat("redis 127.0.0.1:", *redis_port)))
      << out;
  EXPECT_EQ(status["nodes"][0]["total"]["gpus"], 2);
  if (limit_set) {
    EXPECT_FALSE(absl::StrContains(out, "open-file limit")) << out;
  }
  ASSERT_EQ(Cli({"run", "--", "sh", "-c", "echo from-systemd"}, &out, &err), 0)
      << err << Log("drover-agent.service");
  EXPECT_TRUE(absl::StrContains(out, "[rank0]: from-systemd")) << out;
  // The agent keeps its logs in the fixed directory the unit gives it (not agent-<pid>).
  EXPECT_EQ(access((dir_ + "/state/agent/logs").c_str(), F_OK), 0) << Log("drover-agent.service");
  ASSERT_EQ(Cli({"jobs", "--json"}, &out, &err), 0) << err;
  const std::string job_id = nlohmann::json::parse(out)["jobs"][0]["job_id"];

  // A crash: systemd (Restart=on-failure) starts the same command again. The job is
  // still known (Redis) and the agent registers with the new scheduler.
  kill(pids_["drover-scheduler.service"], SIGKILL);
  waitpid(pids_["drover-scheduler.service"], nullptr, 0);
  ASSERT_GT(Start("drover-scheduler.service"), 0);
  ASSERT_TRUE(WaitFor([&] { return alive_nodes() == 1; }, absl::Seconds(30)))
      << out << err << Log("drover-scheduler.service");
  ASSERT_EQ(Cli({"job", job_id, "--json"}, &out, &err), 0) << err;
  EXPECT_EQ(nlohmann::json::parse(out)["state"], "SUCCEEDED") << out;

  // systemctl stop: SIGTERM to the main process of each; all exit 0 well within
  // TimeoutStopSec.
  for (const char* u : {"drover-agent.service", "drover-scheduler.service",
                        "drover-redis.service"}) {
    const int st = Stop(u, absl::Seconds(30));
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
        << u << " did not stop cleanly (status " << st << "):\n" << Log(u);
  }
}

}  // namespace
}  // namespace drover::testing
