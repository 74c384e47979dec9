// A rank of the collective benchmark (//bench:collective runs it as a drover job).
//
//   collective_worker --out=DIR --figures=allreduce_1MiB,allreduce_64MiB,barrier [--reps=7]
//
// Builds the group from the environment with GroupOptions::algorithm kAuto (shared
// memory on one node, hierarchical across nodes) and, between the same processes, a raw
// Gloo context (its own full mesh, rendezvous through the scheduler's KV). For each
// figure it alternates, rep by rep, a timed batch of operations on the group and the
// same batch on raw Gloo (ring allreduce, resp. gloo::barrier), each batch after a
// barrier. Rank 0 writes one line per figure to DIR/results.txt:
//   <figure> <ranks> <bytes> <ours seconds per op, median of reps> <raw seconds, median>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collective/group.h"
#include "collective/group_internal.h"
#include "collective/kv_store.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/transport/tcp/device.h"

namespace drover::collective {
namespace {

using ::drover::bench::Median;

int g_rank = -1;

[[noreturn]] void Die(const std::string& msg) {
  std::fprintf(stderr, "bench collective_worker rank %d: %s\n", g_rank, msg.c_str());
  std::exit(1);
}

void Check(const absl::Status& s, const std::string& what) {
  if (!s.ok()) Die(absl::StrCat(what, ": ", s.ToString()));
}

int Main(int argc, char** argv) {
  std::string out_dir, figures = "allreduce_1MiB,allreduce_64MiB,barrier";
  int reps = 7;
  std::vector<std::string> env;
  CLI::App app{"collective_worker: a rank of the collective benchmark"};
  app.add_option("--out", out_dir, "Directory for results.txt (rank 0 writes it)")->required();
  app.add_option("--figures", figures, "Comma-separated figures");
  app.add_option("--reps", reps, "Repetitions per figure")->check(CLI::PositiveNumber);
  app.add_option("--env", env, "NAME=VALUE set before the group is made (tuning knobs)");
  CLI11_PARSE(app, argc, argv);
  for (const std::string& e : env) {
    const size_t eq = e.find('=');
    if (eq == std::string::npos || eq == 0) Die("--env wants NAME=VALUE, got '" + e + "'");
    setenv(e.substr(0, eq).c_str(), e.substr(eq + 1).c_str(), 1);
  }
  auto options = GroupOptionsFromEnvironment("bench");
  Check(options.status(), "GroupOptionsFromEnvironment");
  g_rank = options->rank;
  options->timeout = absl::Seconds(60);
  auto group = NewGroup(*options);
  Check(group.status(), "NewGroup");
  Group& g = **group;

  auto kv = internal::ConnectKv(*options);
  Check(kv.status(), "kv");
  GlooKvStore store(kv->get(), MakeGroupPrefix("raw-gloo-bench", options->generation, 0));
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(g.rank(), g.size());
  ctx->setTimeout(std::chrono::seconds(60));
  ctx->connectFullMesh(store, dev);
  auto raw_barrier = [&] {
    gloo::BarrierOptions o(ctx);
    gloo::barrier(o);
  };

  std::string report;
  for (const std::string& figure : std::vector<std::string>(absl::StrSplit(figures, ','))) {
    size_t bytes = 0;
    int iters = 0;
    if (figure == "allreduce_1MiB") bytes = 1 << 20, iters = 50;
    else if (figure == "allreduce_64MiB" || figure == "allreduce_64MiB_2nodes")
      bytes = 64 << 20, iters = 5;
    else if (figure == "barrier") iters = 2000;
    else Die("unknown figure " + figure);
    const size_t count = bytes / 4;
    std::vector<float> buf(std::max<size_t>(count, 1), 0.0f);
    std::function<void()> ours, raw;
    if (bytes > 0) {
      ours = [&] {
        Check(g.AllReduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum), "AllReduce");
      };
      raw = [&] {
        gloo::AllreduceOptions o(ctx);
        o.setOutput<float>(buf.data(), count);
        o.setReduceFunction(
            static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
        o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
        gloo::allreduce(o);
      };
    } else {
      ours = [&] { Check(g.Barrier(), "Barrier"); };
      raw = raw_barrier;
    }
    auto batch = [&](const std::function<void()>& op, const std::function<void()>& sync) {
      sync();
      absl::Time t0 = absl::Now();
      for (int i = 0; i < iters; ++i) op();
      return absl::ToDoubleSeconds(absl::Now() - t0) / iters;
    };
    auto ours_sync = [&] { Check(g.Barrier(), "Barrier"); };
    // Warm-up: connections, pages, caches.
    batch(ours, ours_sync);
    batch(raw, raw_barrier);
    std::vector<double> o, r;
    for (int rep = 0; rep < reps; ++rep) {
      o.push_back(batch(ours, ours_sync));
      r.push_back(batch(raw, raw_barrier));
    }
    report += absl::StrCat(figure, " ", g.size(), " ", bytes, " ", Median(o), " ", Median(r),
                           "\n");
  }
  Check(g.Barrier(), "final Barrier");
  if (g.rank() == 0) {
    std::string tmp = out_dir + "/.results.txt";
    std::ofstream(tmp) << report;
    std::rename(tmp.c_str(), (out_dir + "/results.txt").c_str());
  }
  return 0;
}

}  // namespace
}  // namespace drover::collective

int main(int argc, char** argv) { return drover::collective::Main(argc, argv); }
