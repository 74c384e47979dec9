// Helpers shared by the benchmarks in bench/.
#ifndef DROVER_BENCH_BENCH_UTIL_H_
#define DROVER_BENCH_BENCH_UTIL_H_

#include <string>

namespace drover::bench {

// "Intel(R) Xeon(R) Processor @ 2.50GHz" from /proc/cpuinfo, for the machine line.
std::string CpuModel();

}  // namespace drover::bench

#endif  // DROVER_BENCH_BENCH_UTIL_H_
