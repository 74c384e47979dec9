// Runs a task program (a binary that is its own driver and, started by the agents, its
// own workers) as a plain driver of a TestCluster and reads what it printed: the
// "key=value" lines such programs print for their test (a value continues on the lines
// after it until the next key, for multi-line messages such as stderr tails).
// Not thread-safe: use from the test's main thread.
#ifndef DROVER_TESTS_UTIL_DRIVER_PROGRAM_H_
#define DROVER_TESTS_UTIL_DRIVER_PROGRAM_H_

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/util/test_cluster.h"

namespace drover::testing {

struct DriverRun {
  int code = -1;  // exit code, 128 + signal if killed
  std::string out;
  std::string err;
  std::map<std::string, std::string> kv;
  // The value of `key`, or "<missing KEY>".
  std::string Get(const std::string& key) const;
  // Everything it printed, for failure messages.
  std::string All() const { return out + err; }
};

// Starts `binary args...` (a runfile path such as "tests/pipeline_program", or an
// absolute path) with the
// cluster's address, token and (TLS clusters) CA in its environment (DROVER_* of the
// test's own environment removed) and `env` (KEY=VALUE) added; output goes to
// `base`.out and .err. Returns its pid.
pid_t StartDriver(const TestCluster& cluster, const std::string& binary,
                  const std::vector<std::string>& args, const std::string& base,
                  const std::vector<std::string>& env = {});
// What the driver writing to `base` printed so far (`code` stays -1).
DriverRun ReadDriverOutput(const std::string& base);
// Waits up to `timeout` for it (killing it after) and parses its output. A driver that
// did not finish in time is a test failure (with its output and the daemons' logs).
DriverRun FinishDriver(const TestCluster& cluster, pid_t pid, const std::string& base,
                       absl::Duration timeout);
// Both, with output files under the cluster's directory.
DriverRun RunDriver(const TestCluster& cluster, const std::string& binary,
                    const std::vector<std::string>& args, absl::Duration timeout = absl::Seconds(120));

// A driver left running while the test looks at the cluster (it holds its job until
// told, say by a file): what it printed so far, a key it prints, its end. The
// destructor kills it if it still runs.
class BackgroundDriver {
 public:
  BackgroundDriver(const TestCluster& cluster, const std::string& binary,
                   const std::vector<std::string>& args, const std::vector<std::string>& env = {});
  ~BackgroundDriver();
  BackgroundDriver(const BackgroundDriver&) = delete;
  BackgroundDriver& operator=(const BackgroundDriver&) = delete;

  // What it printed so far.
  DriverRun Output() const { return ReadDriverOutput(base_); }
  // Waits (bounded) until it printed `key`; its value, or "" if it never did.
  std::string WaitFor(const std::string& key, absl::Duration timeout = absl::Seconds(120));
  // Waits for it to end (FinishDriver).
  DriverRun Finish(absl::Duration timeout = absl::Seconds(60));

 private:
  const TestCluster& cluster_;
  std::string base_;
  pid_t pid_ = -1;
};

// A fixture whose tests share one 2-node cluster (4 CPUs each), started before the
// binary's first test and stopped after its last. One such fixture per test binary; a
// derived fixture's own SetUpTestSuite may start it with other options (TLS, GPUs,
// scheduler flags).
class TwoNodeClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { StartCluster(TwoNodes()); }
  static void TearDownTestSuite();
  // 2 nodes with 4 CPUs each; a derived fixture's SetUpTestSuite changes what it needs.
  static TestClusterOptions TwoNodes();
  static void StartCluster(const TestClusterOptions& options);
  static TestCluster* cluster_;
};

}  // namespace drover::testing

#endif  // DROVER_TESTS_UTIL_DRIVER_PROGRAM_H_
