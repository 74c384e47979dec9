// deploy/slurm/drover.sbatch against a real Slurm: Debian's munged, slurmctld and two
// slurmd (nodes n1 and n2, both on this machine, each with 2 CPUs and 2 GPUs backed by
// device files the test makes), started by the test in a directory of its own with a
// munge key it creates, and stopped at the end. sbatch runs the script exactly as a
// user would; the test checks the drover job's output (its ranks on both nodes, with
// the GPU Slurm assigned), the exit code, and that nothing is left behind, also when
// the allocation is cancelled under a running job.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/files.h"
#include "common/net.h"
#include "common/spawn.h"
#include "gtest/gtest.h"
#include "tests/util/test_cluster.h"

namespace drover::testing {
namespace {

constexpr int kNodes = 2;

// A Slurm cluster of its own: munged, slurmctld and one slurmd per node, as children
// of the test, configured by a slurm.conf in `dir`. Needs root (slurmd runs jobs as
// their user, munged checks its key's owner) and Debian's slurmctld, slurmd, munge
// and slurm-client packages (scripts/setup.sh installs them).
class LocalSlurm {
 public:
  static absl::StatusOr<std::unique_ptr<LocalSlurm>> Start() {
    for (const char* bin : {"/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd",
                            "/usr/bin/sbatch", "/usr/bin/scontrol", "/usr/bin/sinfo"}) {
      if (access(bin, X_OK) != 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            bin, " is missing: install slurmctld, slurmd, munge and slurm-client "
                 "(scripts/setup.sh does)"));
      }
    }
    if (geteuid() != 0) {
      return absl::FailedPreconditionError("a local Slurm needs root (slurmd, munged)");
    }
    auto s = std::unique_ptr<LocalSlurm>(new LocalSlurm());
    char tmpl[] = "/tmp/drover-slurm-XXXXXX";  // short: socket paths live below it
    if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp");
    s->dir_ = tmpl;
    absl::Status st = s->Configure();
    if (st.ok()) st = s->StartDaemons();
    if (!st.ok()) return absl::Status(st.code(), absl::StrCat(st.message(), "\n", s->Logs()));
    return s;
  }

  ~LocalSlurm() {
    std::string out, err;
    if (up_) Run({"scancel", "--full", "--user", "root"}, &out, &err);
    // Daemons in reverse order, each with SIGTERM and a bounded wait.
    for (auto it = pids_.rbegin(); it != pids_.rend(); ++it) {
      kill(*it, SIGTERM);
      int status;
      if (!WaitFor([&] { return waitpid(*it, &status, WNOHANG) == *it; }, absl::Seconds(20))) {
        kill(*it, SIGKILL);
        waitpid(*it, &status, 0);
      }
    }
    (void)!system(("rm -rf '" + dir_ + "'").c_str());
  }

  const std::string& dir() const { return dir_; }

  // Runs a Slurm client command (sbatch, scontrol, ...) against this cluster, with the
  // test's environment plus `env`.
  int Run(const std::vector<std::string>& argv, std::string* out, std::string* err,
          const std::vector<std::string>& env = {}) {
    std::vector<std::string> e = {"SLURM_CONF=" + dir_ + "/slurm.conf"};
    e.insert(e.end(), env.begin(), env.end());
    return RunProgram(argv, e, dir_, out, err);
  }

  // `scontrol show job` of `id` as KEY -> VALUE.
  std::map<std::string, std::string> Job(const std::string& id) {
    std::string out, err;
    std::map<std::string, std::string> fields;
    if (Run({"scontrol", "show", "job", "--oneliner", id}, &out, &err) != 0) return fields;
    for (absl::string_view kv : absl::StrSplit(out, ' ', absl::SkipWhitespace())) {
      auto eq = kv.find('=');
      if (eq != absl::string_view::npos) {
        fields[std::string(kv.substr(0, eq))] =
            std::string(absl::StripTrailingAsciiWhitespace(kv.substr(eq + 1)));
      }
    }
    return fields;
  }

  // Waits until job `id` has ended (any final state); its scontrol fields.
  std::map<std::string, std::string> WaitEnded(const std::string& id, absl::Duration timeout) {
    std::map<std::string, std::string> job;
    WaitFor(
        [&] {
          job = Job(id);
          const std::string& state = job["JobState"];
          return !state.empty() && state != "PENDING" && state != "RUNNING" &&
                 state != "CONFIGURING" && state != "COMPLETING";
        },
        timeout);
    return job;
  }

  std::string Logs() const {
    std::string out;
    for (const char* f : {"slurmctld.log", "slurmctld.out", "slurmd-n1.log", "slurmd-n1.out",
                          "slurmd-n2.log", "slurmd-n2.out", "munged.log", "munged.out"}) {
      absl::StrAppend(&out, "--- ", f, ":\n", TailFile(dir_ + "/" + f, 0, 3000), "\n");
    }
    return out;
  }

 private:
  LocalSlurm() = default;

  absl::Status Configure() {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    auto ctld = PickFreePort("127.0.0.1");
    if (!ctld.ok()) return ctld.status();
    for (const char* sub : {"/state", "/spool", "/dev", "/munge"}) {
      absl::Status st = MakeDirs(dir_ + sub, 0700);
      if (!st.ok()) return st;
    }
    // munged wants its socket's directories searchable by all.
    chmod(dir_.c_str(), 0755);
    chmod((dir_ + "/munge").c_str(), 0755);
    // GPUs: character devices with NVIDIA's major number, as /dev/nvidia0.. (never
    // opened: Slurm hands out their indices; it ignores plain files).
    for (int i = 0; i < 2; ++i) {
      std::string dev = absl::StrCat(dir_, "/dev/nvidia", i);
      if (mknod(dev.c_str(), S_IFCHR | 0600, makedev(195, i)) != 0) {
        return absl::InternalError(absl::StrCat("mknod ", dev, ": ", std::strerror(errno)));
      }
    }
    std::string key(1024, '\0');
    for (auto& c : key) c = static_cast<char>(rand());
    absl::Status st = WriteFileAtomic(dir_ + "/munge/munge.key", key, 0400);
    if (!st.ok()) return st;
    std::string nodes;
    for (int i = 1; i <= kNodes; ++i) {
      auto port = PickFreePort("127.0.0.1");
      if (!port.ok()) return port.status();
      absl::StrAppend(&nodes, "NodeName=n", i, " NodeHostname=", host,
                      " NodeAddr=127.0.0.1 Port=", *port,
                      " CPUs=2 RealMemory=1000 Gres=gpu:2 State=UNKNOWN\n");
    }
    const std::string conf = absl::StrCat(
        "ClusterName=drovertest\n", "SlurmctldHost=", host, "(127.0.0.1)\n",
        "SlurmctldPort=", *ctld, "\n", "SlurmUser=root\nSlurmdUser=root\n",
        "AuthType=auth/munge\nCredType=cred/munge\n", "AuthInfo=socket=", dir_,
        "/munge/socket\n", "StateSaveLocation=", dir_, "/state\n", "SlurmdSpoolDir=", dir_,
        "/spool/%n\n", "SlurmctldPidFile=", dir_, "/slurmctld.pid\n", "SlurmdPidFile=", dir_,
        "/slurmd-%n.pid\n", "SlurmctldLogFile=", dir_, "/slurmctld.log\n", "SlurmdLogFile=",
        dir_, "/slurmd-%n.log\n",
        "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
        "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n"
        "JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n"
        "JobCompType=jobcomp/none\nMpiDefault=none\nSwitchType=switch/none\n"
        "ReturnToService=2\nGresTypes=gpu\nKillWait=30\nMinJobAge=300\n",
        nodes, "PartitionName=test Nodes=n[1-", kNodes, "] Default=YES MaxTime=INFINITE State=UP\n");
    st = WriteFileAtomic(dir_ + "/slurm.conf", conf, 0644);
    if (!st.ok()) return st;
    return WriteFileAtomic(dir_ + "/gres.conf",
                           absl::StrCat("NodeName=n[1-", kNodes, "] Name=gpu File=", dir_,
                                        "/dev/nvidia[0-1]\n"),
                           0644);
  }

  absl::Status Daemon(std::vector<std::string> argv, const std::string& log) {
    SpawnOptions o;
    o.argv = std::move(argv);
    for (char** e = environ; *e; ++e) o.env.push_back(*e);
    o.env.push_back("SLURM_CONF=" + dir_ + "/slurm.conf");
    o.stdout_path = o.stderr_path = dir_ + "/" + log;
    o.new_process_group = true;
    auto pid = Spawn(o);
    if (!pid.ok()) return pid.status();
    pids_.push_back(*pid);
    return absl::OkStatus();
  }

  absl::Status StartDaemons() {
    const std::string m = dir_ + "/munge";
    absl::Status st = Daemon({"/usr/sbin/munged", "--foreground", "--force",
                              "--socket=" + m + "/socket", "--key-file=" + m + "/munge.key",
                              "--log-file=" + dir_ + "/munged.log", "--pid-file=" + m + "/pid",
                              "--seed-file=" + m + "/seed"},
                             "munged.out");
    if (!st.ok()) return st;
    if (!WaitFor([&] { return access((m + "/socket").c_str(), F_OK) == 0; })) {
      return absl::UnavailableError("munged did not start");
    }
    st = Daemon({"/usr/sbin/slurmctld", "-D", "-i"}, "slurmctld.out");
    for (int i = 1; st.ok() && i <= kNodes; ++i) {
      st = Daemon({"/usr/sbin/slurmd", "-D", "-N", absl::StrCat("n", i)},
                  absl::StrCat("slurmd-n", i, ".out"));
    }
    if (!st.ok()) return st;
    std::string out, err;
    bool died = false;
    if (!WaitFor(
            [&] {
              for (pid_t p : pids_) died |= waitpid(p, nullptr, WNOHANG) == p;
              return died || (Run({"sinfo", "--noheader", "--format=%T %D"}, &out, &err) == 0 &&
                              absl::StripAsciiWhitespace(out) == absl::StrCat("idle ", kNodes));
            },
            absl::Seconds(60)) ||
        died) {
      return absl::UnavailableError(
          absl::StrCat(died ? "a Slurm daemon exited" : "the nodes did not become idle", ": ",
                       out, err));
    }
    up_ = true;
    return absl::OkStatus();
  }

  std::string dir_;
  std::vector<pid_t> pids_;
  bool up_ = false;  // slurmctld answers
};

// Live processes whose command line or environment mentions `needle`.
std::vector<std::string> ProcessesMentioning(const std::string& needle) {
  std::vector<std::string> found;
  DIR* d = opendir("/proc");
  if (d == nullptr) return found;
  while (dirent* e = readdir(d)) {
    const int pid = atoi(e->d_name);
    if (pid <= 0 || pid == getpid()) continue;
    auto stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
    if (!stat.ok() || absl::StrContains(stat->substr(stat->rfind(')')), ") Z")) continue;
    std::string cmd = ReadFile(absl::StrCat("/proc/", pid, "/cmdline")).value_or("");
    std::string env = ReadFile(absl::StrCat("/proc/", pid, "/environ")).value_or("");
    if (absl::StrContains(cmd, needle) || absl::StrContains(env, needle)) {
      std::replace(cmd.begin(), cmd.end(), '\0', ' ');
      found.push_back(absl::StrCat(pid, ": ", cmd));
    }
  }
  closedir(d);
  return found;
}

class SlurmTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto s = LocalSlurm::Start();
    ASSERT_TRUE(s.ok()) << s.status();
    slurm_ = s->release();
  }
  static void TearDownTestSuite() {
    delete slurm_;
    slurm_ = nullptr;
  }

  // sbatch of drover.sbatch with `args` (sbatch options, then the script's), as a user
  // with drover in PATH; the job id.
  std::string Submit(const std::vector<std::string>& sbatch_options,
                     const std::vector<std::string>& program, const std::string& output,
                     const std::vector<std::string>& env = {}) {
    std::vector<std::string> argv = {"sbatch", "--parsable", "--output=" + output};
    argv.insert(argv.end(), sbatch_options.begin(), sbatch_options.end());
    argv.push_back(Runfile("deploy/slurm/drover.sbatch"));
    argv.insert(argv.end(), program.begin(), program.end());
    const std::string bin = Runfile("cli/drover");
    std::string out, err;
    std::vector<std::string> full_env = {
        "PATH=" + bin.substr(0, bin.rfind('/')) + ":" + getenv("PATH"),
        // Where the script's node-local directories go ($TMPDIR/drover-<job>).
        "TMPDIR=" + slurm_->dir()};
    full_env.insert(full_env.end(), env.begin(), env.end());
    const int rc = slurm_->Run(argv, &out, &err, full_env);
    EXPECT_EQ(rc, 0) << out << err;
    return std::string(absl::StripAsciiWhitespace(out));
  }

  static LocalSlurm* slurm_;
};

LocalSlurm* SlurmTest::slurm_ = nullptr;

TEST_F(SlurmTest, RunsADroverJobOnEveryNodeWithTheGpusSlurmAssigned) {
  // Another job holds GPU 0 of each node: ours gets GPU 1 there.
  std::string out, err;
  ASSERT_EQ(slurm_->Run({"sbatch", "--parsable", "--nodes=2", "--gres=gpu:1",
                         "--output=/dev/null", "--wrap", "sleep 600"},
                        &out, &err),
            0)
      << err;
  const std::string holder(absl::StripAsciiWhitespace(out));
  ASSERT_TRUE(WaitFor([&] { return slurm_->Job(holder)["JobState"] == "RUNNING"; },
                      absl::Seconds(30)))
      << slurm_->Logs();

  const std::string output = slurm_->dir() + "/run.out";
  const std::string id =
      Submit({"--nodes=2", "--gres=gpu:1"},
             {"drover", "run", "--nodes", "2", "--nproc-per-node", "1", "--gpus-per-proc", "1",
              "--", "sh", "-c", "echo rank=$RANK gpus=$CUDA_VISIBLE_DEVICES node=$DROVER_NODE_ID"},
             output);
  auto job = slurm_->WaitEnded(id, absl::Seconds(120));
  const std::string text = ReadFile(output).value_or("(no output)");
  EXPECT_EQ(job["JobState"], "COMPLETED") << text << slurm_->Logs();
  EXPECT_EQ(job["ExitCode"], "0:0") << text;
  EXPECT_TRUE(absl::StrContains(text, "2 nodes ready")) << text;
  std::smatch m0, m1;
  ASSERT_TRUE(std::regex_search(text, m0, std::regex("\\[rank0\\]: rank=0 gpus=1 node=(\\S+)")))
      << text;
  ASSERT_TRUE(std::regex_search(text, m1, std::regex("\\[rank1\\]: rank=1 gpus=1 node=(\\S+)")))
      << text;
  EXPECT_NE(m0[1].str(), m1[1].str()) << "one rank per Slurm node";
  // Everything stopped and removed.
  const std::string work = absl::StrCat(slurm_->dir(), "/drover-", id);
  EXPECT_TRUE(ProcessesMentioning(work).empty()) << absl::StrJoin(ProcessesMentioning(work), "\n");
  EXPECT_NE(access(work.c_str(), F_OK), 0) << work << " is left behind";

  // The program's exit code is the batch job's.
  const std::string failing = Submit({"--nodes=1"}, {"drover", "run", "--", "sh", "-c", "exit 3"},
                                     slurm_->dir() + "/fail.out");
  job = slurm_->WaitEnded(failing, absl::Seconds(120));
  EXPECT_EQ(job["ExitCode"], "3:0") << ReadFile(slurm_->dir() + "/fail.out").value_or("");
  ASSERT_EQ(slurm_->Run({"scancel", holder}, &out, &err), 0) << err;
}

// DROVER_TLS=1: the head makes a CA, the agents on both nodes get certificates from it
// (its certificate reaches them beside the token), and the job's processes see the CA.
TEST_F(SlurmTest, DroverTlsMakesATlsCluster) {
  const std::string output = slurm_->dir() + "/tls.out";
  const std::string id =
      Submit({"--nodes=2"},
             {"drover", "run", "--nodes", "2", "--nproc-per-node", "1", "--", "sh", "-c",
              "echo rank=$RANK ca=${DROVER_TLS_CA:+yes}"},
             output, {"DROVER_TLS=1"});
  auto job = slurm_->WaitEnded(id, absl::Seconds(120));
  const std::string text = ReadFile(output).value_or("(no output)");
  EXPECT_EQ(job["JobState"], "COMPLETED") << text << slurm_->Logs();
  EXPECT_TRUE(absl::StrContains(text, "[rank0]: rank=0 ca=yes")) << text;
  EXPECT_TRUE(absl::StrContains(text, "[rank1]: rank=1 ca=yes")) << text;
}

TEST_F(SlurmTest, EndingTheAllocationStopsTheProgramTheAgentsAndTheirWorkers) {
  const std::string ready = slurm_->dir() + "/workers-up";
  const std::string output = slurm_->dir() + "/cancel.out";
  // A long drover job whose workers run on both nodes, under a program that would wait.
  const std::string id = Submit(
      {"--nodes=2"},
      {"sh", "-c",
       "drover submit --nodes 2 --nproc-per-node 1 -- sleep 600 && "
       "until drover jobs | grep -q RUNNING; do sleep 0.1; done && touch " + ready +
           " && sleep 600"},
      output);
  ASSERT_TRUE(WaitFor([&] { return access(ready.c_str(), F_OK) == 0; }, absl::Seconds(120)))
      << ReadFile(output).value_or("(no output)") << slurm_->Logs();
  const std::string work = absl::StrCat(slurm_->dir(), "/drover-", id);
  // The head, two agents, their stores, the two workers, the program.
  EXPECT_GE(ProcessesMentioning(work).size(), 6u)
      << absl::StrJoin(ProcessesMentioning(work), "\n");

  std::string out, err;
  ASSERT_EQ(slurm_->Run({"scancel", id}, &out, &err), 0) << err;
  auto job = slurm_->WaitEnded(id, absl::Seconds(120));
  EXPECT_EQ(job["JobState"], "CANCELLED") << slurm_->Logs();
  EXPECT_TRUE(WaitFor([&] { return ProcessesMentioning(work).empty(); }, absl::Seconds(30)))
      << absl::StrJoin(ProcessesMentioning(work), "\n");
  EXPECT_TRUE(WaitFor([&] { return access(work.c_str(), F_OK) != 0; }, absl::Seconds(30)))
      << work << " is left behind\n" << ReadFile(output).value_or("");
  // The script heard the signal first, or the program did (Slurm signals the step's
  // processes one by one) and the script stopped the cluster when it ended.
  const std::string said = ReadFile(output).value_or("");
  EXPECT_TRUE(absl::StrContains(said, "stopping the program and the cluster") ||
              absl::StrContains(said, "the program exited with 143; stopping the cluster"))
      << said;
}

}  // namespace
}  // namespace drover::testing
