// Small helpers every test shares: scratch directory, runfiles, waiting on conditions.
#ifndef DROVER_TESTS_UTIL_TEST_UTIL_H_
#define DROVER_TESTS_UTIL_TEST_UTIL_H_

#include <functional>
#include <map>
#include <string>

#include "absl/time/time.h"

namespace drover::testing {

// $TEST_TMPDIR (Bazel's per-test scratch directory), or /tmp outside Bazel.
std::string TestTmpDir();

// Path of a runfile of this workspace, e.g. Runfile("node_agent/drover-launch").
// Works under `bazel test` (TEST_SRCDIR), `bazel run` (RUNFILES_DIR or
// /proc/self/exe + ".runfiles"), and falls back to the relative path.
std::string Runfile(const std::string& path);

// Checks `pred` every 5 ms until it holds or `timeout` passes; returns its last value.
// Tests wait on conditions with deadlines, never on fixed sleeps.
bool WaitFor(const std::function<bool()>& pred, absl::Duration timeout = absl::Seconds(10));

// KEY=VALUE lines of a file (such as `env > file`), as a map; empty if unreadable.
std::map<std::string, std::string> ReadEnvFile(const std::string& path);

}  // namespace drover::testing

#endif  // DROVER_TESTS_UTIL_TEST_UTIL_H_
