// collective: CPU collectives of //collective:group against raw Gloo, on a local cluster.
//
//   bazel run -c opt //bench:collective [-- --reps N --keep]
//
// Starts drover-scheduler and two drover-agents (two nodes on this machine) through the
// tests' TestCluster harness and runs //bench:collective_worker as drover jobs:
//   - 2 ranks on one node: allreduce_1MiB, allreduce_64MiB (float32 sum; the group picks
//     the shared-memory path) and barrier;
//   - 2 nodes x 2 ranks: allreduce_64MiB_2nodes (the group picks the hierarchical path).
// The baseline is raw Gloo between the same processes in the same run (ring allreduce,
// gloo::barrier), alternated rep by rep with ours; each figure is the median of --reps
// reps. Allreduce figures are bus bandwidth, 2 (n-1)/n * bytes / time, in GB/s (ratio
// > 1 is better); barrier is latency in µs (ratio < 1 is better):
//   BENCH <name> <value> <unit> baseline=<value> ratio=<ours/baseline>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_util.h"
#include "drover/client.h"
#include "tests/util/test_cluster.h"

namespace drover::bench {
namespace {

using testing::Runfile;
using testing::TestCluster;

[[noreturn]] void Die(const std::string& msg) {
  std::cerr << "collective: " << msg << "\n";
  std::exit(1);
}

// Points the harness's Runfile() (TEST_SRCDIR/TEST_WORKSPACE) at this binary's runfiles.
void SetUpRunfiles(const char* argv0) {
  std::string root = FindRunfilesRoot(argv0, "scheduler");
  if (root.empty()) Die("cannot find the runfiles; run it with `bazel run -c opt //bench:collective`");
  ::setenv("TEST_SRCDIR", root.c_str(), 1);
  ::setenv("TEST_WORKSPACE", "drover", 1);
}

struct Result {
  std::string figure;
  int ranks = 0;
  double bytes = 0, ours_s = 0, raw_s = 0;
};

std::vector<Result> RunJob(TestCluster& c, const std::string& out, const std::string& figures,
                           int nproc, int ppn, int reps) {
  std::filesystem::create_directories(out);
  std::vector<std::string> command = {Runfile("bench/collective_worker"), "--out=" + out,
                                      "--figures=" + figures, absl::StrCat("--reps=", reps)};
  // Experiments: the shared-memory tuning knobs of this process reach the workers.
  for (const char* knob : {"DROVER_SHM_CHUNK_BYTES", "DROVER_SHM_SPIN_US", "DROVER_SHM_YIELD_US",
                           "DROVER_SHM_RAILS"}) {
    if (const char* v = std::getenv(knob); v && *v) {
      command.push_back(absl::StrCat("--env=", knob, "=", v));
    }
  }
  auto done = c.RunJob(TestCluster::JobOf(command, nproc, ppn), absl::Minutes(10));
  if (!done.ok()) Die(done.status().ToString());
  if (done->state != JobState::kSucceeded) {
    Die(absl::StrCat(done->job_id, " ", JobStateName(done->state), ": ",
                     done->reason, "\n", c.DaemonLogs()));
  }
  std::set<std::string> nodes;
  for (const auto& p : done->placement) nodes.insert(p.node_id);
  std::cout << "  job " << done->job_id << ": " << nproc << " ranks on " << nodes.size()
            << " node(s)\n";
  std::ifstream in(out + "/results.txt");
  std::vector<Result> results;
  Result r;
  while (in >> r.figure >> r.ranks >> r.bytes >> r.ours_s >> r.raw_s) results.push_back(r);
  if (results.empty()) Die("no results in " + out + "/results.txt");
  return results;
}

void Print(const Result& r) {
  std::string line;
  if (r.bytes > 0) {
    auto busbw = [&](double s) { return 2.0 * (r.ranks - 1) / r.ranks * r.bytes / s / 1e9; };
    double o = busbw(r.ours_s), b = busbw(r.raw_s);
    line = absl::StrFormat("BENCH %s %.2f GB/s baseline=%.2f ratio=%.2f", r.figure, o, b, o / b);
    std::cout << line << "\n"
              << absl::StrFormat("  (%s: %d ranks, ours %.3f ms, raw Gloo ring %.3f ms per op)",
                                 r.figure, r.ranks, r.ours_s * 1e3, r.raw_s * 1e3)
              << std::endl;
  } else {
    double o = r.ours_s * 1e6, b = r.raw_s * 1e6;
    line = absl::StrFormat("BENCH %s %.2f us baseline=%.2f ratio=%.3f", r.figure, o, b, o / b);
    std::cout << line << "\n"
              << absl::StrFormat("  (%s: %d ranks, raw Gloo = gloo::barrier)", r.figure, r.ranks)
              << std::endl;
  }
}

int Main(int argc, char** argv) {
  int reps = 7;
  bool keep = false;
  CLI::App app{"collective: CPU collectives of //collective:group against raw Gloo"};
  app.add_option("--reps", reps, "Repetitions per figure (the median is printed)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--keep", keep, "Keep the cluster's directory");
  CLI11_PARSE(app, argc, argv);
  signal(SIGPIPE, SIG_IGN);
  SetUpRunfiles(argv[0]);
  char tmpl[] = "/tmp/drover-bench-collective-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) Die(absl::StrCat("mkdtemp: ", std::strerror(errno)));
  const std::string tmp = tmpl;
  ::setenv("TEST_TMPDIR", tmp.c_str(), 1);
  std::cout << "drover collective benchmark: 2-node local cluster, float32 sum, median of "
            << reps << " reps (ours and raw Gloo alternated)\n"
            << "machine: " << ::sysconf(_SC_NPROCESSORS_ONLN) << " CPUs, " << CpuModel() << ", "
            << (static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE) >> 20)
            << " MiB RAM\n"
            << std::flush;
  {
    testing::TestClusterOptions o;
    o.nodes = 2;
    o.object_store = false;
    auto cluster = TestCluster::Start(o);
    if (!cluster.ok()) Die("cannot start the cluster: " + cluster.status().ToString());
    TestCluster& c = **cluster;
    for (const auto& r : RunJob(c, tmp + "/one-node", "allreduce_1MiB,allreduce_64MiB,barrier",
                                2, 2, reps)) {
      Print(r);
    }
    for (const auto& r : RunJob(c, tmp + "/two-nodes", "allreduce_64MiB_2nodes", 4, 2, reps)) {
      Print(r);
    }
  }
  if (keep) {
    std::cout << "kept " << tmp << "\n";
  } else {
    std::error_code ec;
    std::filesystem::remove_all(tmp, ec);
  }
  return 0;
}

}  // namespace
}  // namespace drover::bench

int main(int argc, char** argv) { return drover::bench::Main(argc, argv); }
