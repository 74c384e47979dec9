// Helpers shared by the benchmarks in bench/.
#ifndef DROVER_BENCH_BENCH_UTIL_H_
#define DROVER_BENCH_BENCH_UTIL_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace drover::bench {

// "Intel(R) Xeon(R) Processor @ 2.50GHz" from /proc/cpuinfo, for the machine line.
std::string CpuModel();

// The median and the p-th percentile (0..1, nearest rank) of `v`; 0 if empty.
double Median(std::vector<double> v);
double Percentile(std::vector<double> v, double p);

// The runfiles tree of this binary: RUNFILES_DIR (bazel run), TEST_SRCDIR (bazel test),
// else <this executable>.runfiles or <argv0>.runfiles — the first that contains
// drover/<probe>. Returns it (without "/drover"), or "" if none does.
std::string FindRunfilesRoot(const char* argv0, const std::string& probe);

// Failing: Die prints "bench/<name>: <msg>" (the name given to SetBenchName) on stderr
// and exits 1; Must returns the value or dies saying what failed.
void SetBenchName(const std::string& name);
[[noreturn]] void Die(const std::string& msg);
template <typename T>
T Must(absl::StatusOr<T> v, const std::string& what) {
  if (!v.ok()) Die(what + ": " + v.status().ToString());
  return *std::move(v);
}

// For a benchmark that starts a TestCluster under `bazel run`: points the test harness
// at this binary's runfiles (TEST_SRCDIR, TEST_WORKSPACE) and a fresh scratch directory
// under /tmp (TEST_TMPDIR), which it returns; dies saying how to run it if there are no
// runfiles.
std::string SetUpClusterRun(const char* argv0);
// Removes that scratch directory (unless `keep`).
void FinishClusterRun(const std::string& tmp, bool keep);
// "machine: 2 CPUs, AMD EPYC, 24105 MiB RAM".
std::string MachineLine();

// Prints one line of results and flushes (the figures appear as they are measured).
void Line(const std::string& line);

}  // namespace drover::bench

#endif  // DROVER_BENCH_BENCH_UTIL_H_
