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
// cluster's address and token in its environment (DROVER_* of the test's own
// environment removed); output goes to `base`.out and .err. Returns its pid.
pid_t StartDriver(const TestCluster& cluster, const std::string& binary,
                  const std::vector<std::string>& args, const std::string& base);
// Waits up to `timeout` for it (killing it after) and parses its output. A driver that
// did not finish in time is a test failure (with its output and the daemons' logs).
DriverRun FinishDriver(const TestCluster& cluster, pid_t pid, const std::string& base,
                       absl::Duration timeout);
// Both, with output files under the cluster's directory.
DriverRun RunDriver(const TestCluster& cluster, const std::string& binary,
                    const std::vector<std::string>& args, absl::Duration timeout = absl::Seconds(120));

// A fixture whose tests share one 2-node cluster (4 CPUs each), started before the
// binary's first test and stopped after its last. One such fixture per test binary.
class TwoNodeClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite();
  static void TearDownTestSuite();
  static TestCluster* cluster_;
};

}  // namespace drover::testing

#endif  // DROVER_TESTS_UTIL_DRIVER_PROGRAM_H_
