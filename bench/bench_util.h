// Helpers shared by the benchmarks in bench/.
#ifndef DROVER_BENCH_BENCH_UTIL_H_
#define DROVER_BENCH_BENCH_UTIL_H_

#include <string>
#include <vector>

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

}  // namespace drover::bench

#endif  // DROVER_BENCH_BENCH_UTIL_H_
