// A real drover cluster for integration tests: drover-scheduler and N drover-agent
// processes on loopback (optionally each agent in its own network namespace), and
// optionally a private redis-server. Everything lives under one directory the test
// owns; the destructor stops every process it started and reaps it.
//
// Binaries come from the test's runfiles (data deps on //scheduler:drover-scheduler,
// //node_agent:drover-agent, //node_agent:drover-launch, //cli:drover; the agent brings
// //object_store:drover-object-store).
// Not thread-safe: use from the test's main thread.
#ifndef DROVER_TESTS_UTIL_TEST_CLUSTER_H_
#define DROVER_TESTS_UTIL_TEST_CLUSTER_H_

#include <signal.h>
#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "drover/client.h"
#include "tests/util/redis_server.h"
#include "tests/util/test_util.h"

namespace drover::testing {

struct TestClusterOptions {
  int nodes = 2;
  // GPUs each agent declares (--num-gpus); -1: the agents discover them (NVML, e.g. the
  // stand-in //node_agent:libfake_nvml.so named by DROVER_NVML_LIBRARY).
  int gpus_per_node = 0;
  double cpus_per_node = 8;
  bool redis = false;
  // With redis: the server requires a generated password (as `drover up --redis` sets
  // one up) and the scheduler reads it from --redis-password-file.
  bool redis_password = true;
  // Generous: a loaded 2-core CI machine must not declare a live node dead.
  int64_t node_timeout_ms = 5000;
  int64_t heartbeat_ms = 200;
  int64_t kill_grace_ms = 1000;
  // If non-empty, agent i runs inside `ip netns exec netns[i]` and binds there.
  std::vector<std::string> netns;
  // With netns: the scheduler's address as seen from inside the namespaces. If set, the
  // scheduler also advertises it (so address() and the DROVER_SCHEDULER_ADDRESS workers
  // get are on this host), on a port picked before it starts.
  std::string scheduler_host;
  // Agents host an object store (as drover-agent does by default), with this many
  // bytes of shared memory each; false runs them with --no-object-store. Needs the
  // data dep //object_store:drover-object-store (it sits next to the agent).
  bool object_store = true;
  uint64_t object_store_memory = 256ull << 20;
  // The daemons serve /metrics (and the scheduler its dashboard) on a free port; false
  // runs them with --metrics-port -1 (to measure what serving them costs).
  bool metrics = true;
  // A TLS cluster: the scheduler makes a CA in <dir>/tls (--tls-dir), the agents get
  // their certificates from it (--tls-ca), and client(), RunCli and RunJob use TLS.
  bool tls = false;
  // More flags for drover-scheduler.
  std::vector<std::string> scheduler_args;
};

class TestCluster {
 public:
  static absl::StatusOr<std::unique_ptr<TestCluster>> Start(TestClusterOptions options);
  ~TestCluster();

  const std::string& address() const { return address_; }
  const std::string& token_file() const { return token_file_; }
  // The cluster CA's certificate; empty unless options.tls.
  const std::string& tls_ca() const { return tls_ca_; }
  const std::string& dir() const { return dir_; }
  Client& client() { return *client_; }
  pid_t agent_pid(int i) const { return agents_[i]; }
  // The node id agent i registered as (agents register in any order).
  std::string agent_node_id(int i) const;
  pid_t scheduler_pid() const { return scheduler_; }

  // Sends `sig` to agent i and reaps it if it exits.
  void SignalAgent(int i, int sig);
  // Starts agent i again (after SignalAgent stopped it) with the same directory and
  // flags, and waits (at most `timeout`) until it has registered.
  absl::Status RestartAgent(int i, absl::Duration timeout = absl::Seconds(30));
  // The cluster's redis-server (null without TestClusterOptions::redis).
  RedisServer* redis() { return redis_.get(); }
  // Stops the scheduler with `sig` (SIGKILL: it runs no code; SIGTERM: it shuts down
  // cleanly) and starts a new one on the same port and state.
  absl::Status RestartScheduler(int sig = SIGKILL);
  // RestartScheduler in two halves, for a test that acts while the scheduler is away.
  void StopScheduler(int sig = SIGKILL);
  absl::Status StartSchedulerAgain();
  // The scheduler now runs as `pid`, started by someone else (`drover up` bringing the
  // head back in place, on the same port, ready file and state): it is stopped with
  // the rest of the cluster like one this cluster started.
  void AdoptScheduler(pid_t pid) { scheduler_ = pid; }

  // Runs the `drover` CLI against this cluster (DROVER_ADDRESS, DROVER_TOKEN_FILE and,
  // with TLS, DROVER_TLS_CA set; `extra_env` entries replace them); returns its exit
  // code and fills what it printed.
  int RunCli(const std::vector<std::string>& args, std::string* out = nullptr,
             std::string* err = nullptr, const std::vector<std::string>& extra_env = {});

  // Tails of every daemon's log, for failure messages.
  std::string DaemonLogs() const;

  // A gang of `nproc` processes running `command`, `nproc_per_node` per node (0: any),
  // one CPU each, packed.
  static JobSpec JobOf(const std::vector<std::string>& command, int nproc,
                       int nproc_per_node = 0);
  // Submits `spec` and waits until the job ends. The job's record whatever its state; an
  // error (with the daemons' logs) if it could not be submitted or did not end within
  // `timeout`.
  absl::StatusOr<JobInfo> RunJob(const JobSpec& spec, absl::Duration timeout);

 private:
  TestCluster() = default;
  absl::Status StartScheduler(int port);
  absl::Status StartAgent(int i);

  TestClusterOptions options_;
  std::string dir_;
  std::string token_file_;
  std::string tls_ca_;
  std::string address_;
  pid_t scheduler_ = -1;
  std::vector<pid_t> agents_;
  std::unique_ptr<RedisServer> redis_;
  std::unique_ptr<Client> client_;
};

// Runs `argv` with the caller's environment plus `env`
// (KEY=VALUE entries, which replace inherited ones); output goes through files in
// `scratch_dir`. Returns the exit code (128 + signal if killed).
int RunProgram(const std::vector<std::string>& argv, const std::vector<std::string>& env,
               const std::string& scratch_dir, std::string* out, std::string* err);
// The same with the `drover` CLI (argv[0]) prepended.
int RunDrover(const std::vector<std::string>& args, const std::vector<std::string>& env,
              const std::string& scratch_dir, std::string* out, std::string* err);

// Pids of live processes whose environment has DROVER_JOB_ID=<job_id>.
std::vector<pid_t> ProcessesOfJob(const std::string& job_id);

}  // namespace drover::testing

#endif  // DROVER_TESTS_UTIL_TEST_CLUSTER_H_
