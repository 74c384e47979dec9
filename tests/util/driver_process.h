// A task program run as a driver of a TestCluster, in the background: it inherits the
// test's environment without DROVER_* variables, gets the cluster's address, token and
// a DROVER_HOME of its own, and writes its output to files the test reads while it
// runs ("key=value" lines). The destructor kills it if it still runs.
// Not thread-safe: use from the test's main thread.
#ifndef DROVER_TESTS_UTIL_DRIVER_PROCESS_H_
#define DROVER_TESTS_UTIL_DRIVER_PROCESS_H_

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "tests/util/test_cluster.h"

namespace drover::testing {

class DriverProcess {
 public:
  // Runs `argv` (argv[0]: the program) with `env` (KEY=VALUE) added.
  DriverProcess(const TestCluster& cluster, const std::vector<std::string>& argv,
                const std::vector<std::string>& env = {});
  ~DriverProcess();
  DriverProcess(const DriverProcess&) = delete;
  DriverProcess& operator=(const DriverProcess&) = delete;

  // Its key=value lines so far (the last value of a repeated key).
  std::map<std::string, std::string> Output() const;
  // Waits (bounded) until it printed `key`; its value, or "" if it never did.
  std::string WaitFor(const std::string& key, absl::Duration timeout = absl::Seconds(120));
  // Its exit code once it ended (128 + signal), or -1 if it still runs after `timeout`.
  int Wait(absl::Duration timeout = absl::Seconds(60));
  // What it printed on stdout and stderr, for failure messages.
  std::string Logs() const;

 private:
  std::string base_;  // <base>.out, <base>.err
  pid_t pid_ = -1;
};

}  // namespace drover::testing

#endif  // DROVER_TESTS_UTIL_DRIVER_PROCESS_H_
