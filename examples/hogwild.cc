// Hogwild training: N workers train one model in place. The weights of the MLP of
// examples/mlp.h live in a drover::SharedTensor on one node; each worker is a process
// of its own (an actor) on that node that runs SGD steps on its own stream of samples,
// reading and writing the shared weights without locks (torch.multiprocessing's
// Hogwild example, with the model's parameters in share_memory()).
//
//   bazel build //examples:hogwild
//   drover up --nodes 2
//   bazel-bin/examples/hogwild --workers 4 --steps 1500
//
// Flags: --workers N (4), --steps S per worker (1500), --batch B (16), --lr X (0.05),
// --seed S (1), --target L (0.02: the held-out loss the run must reach).
// Prints `initial_loss=`, `final_loss=`, `target=`, `reached=yes|no`,
// `worker_processes=`, `updates=` (the steps every worker took, summed) and `updates_per_s=`, and exits 0 iff the target was
// reached.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "drover/drover.h"
#include "examples/mlp.h"

namespace ex = drover::examples;

// One worker: a process of its own (an actor) on the weights' node.
class Worker {
 public:
  // `steps` SGD steps on the shared weights, in place. Returns how many steps it took,
  // its start and end (ns since the epoch) and its pid.
  std::vector<int64_t> Train(drover::SharedTensor weights, int64_t worker, int64_t steps, int64_t batch, double lr,
                             uint64_t seed) {
    absl::StatusOr<absl::Span<float>> w = weights.span<float>();
    if (!w.ok()) throw std::runtime_error(std::string(w.status().message()));
    const int64_t start = absl::GetCurrentTimeNanos();
    ex::SgdSteps(w->data(), seed, worker, steps, batch, static_cast<float>(lr));
    return {steps, start, absl::GetCurrentTimeNanos(), ::getpid()};
  }
};
Worker* MakeWorker() { return new Worker(); }

DROVER_REMOTE(MakeWorker, &Worker::Train);

int main(int argc, char** argv) {
  if (absl::Status s = drover::Init(argc, argv); !s.ok()) {
    std::cerr << "drover::Init: " << s << "\n";
    return 1;
  }
  int64_t workers = 4, steps = 1500, batch = 16;
  double lr = 0.05, target = 0.02;
  uint64_t seed = 1;
  CLI::App app{"hogwild: N workers train one model in place on a SharedTensor"};
  app.add_option("--workers", workers)->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "SGD steps per worker")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch)->check(CLI::PositiveNumber);
  app.add_option("--lr", lr)->check(CLI::PositiveNumber);
  app.add_option("--seed", seed);
  app.add_option("--target", target, "held-out loss to reach")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  absl::StatusOr<drover::SharedTensor> weights = drover::SharedTensor::Create(drover::DType::kFloat32, {ex::kParams});
  if (!weights.ok()) {
    std::cerr << "SharedTensor::Create: " << weights.status() << "\n";
    return 1;
  }
  std::vector<float> init;
  ex::InitWeights(seed, init);
  absl::Span<float> w = *weights->span<float>();
  std::copy(init.begin(), init.end(), w.begin());
  const double initial = ex::EvalLoss(w.data(), seed, 2000);
  std::printf("hogwild: %lld workers on node %s, %lld steps each of %lld samples\n", static_cast<long long>(workers),
              weights->node_id().c_str(), static_cast<long long>(steps), static_cast<long long>(batch));

  std::vector<drover::ActorHandle<Worker>> pool;
  std::vector<drover::ObjectRef<std::vector<int64_t>>> runs;
  for (int64_t i = 0; i < workers; ++i) {
    pool.push_back(drover::Actor(MakeWorker).SetNodeAffinity(weights->node_id()).Remote());
    runs.push_back(pool.back().Task(&Worker::Train).Remote(*weights, i, steps, batch, lr, seed));
  }
  int64_t updates = 0, first = INT64_MAX, last = 0;
  std::set<int64_t> pids;
  for (auto& r : runs) {
    absl::StatusOr<std::vector<int64_t>> v = drover::Get(r);
    if (!v.ok()) {
      std::cerr << "a worker failed: " << v.status() << "\n";
      return 1;
    }
    updates += (*v)[0];
    first = std::min(first, (*v)[1]);
    last = std::max(last, (*v)[2]);
    pids.insert((*v)[3]);
  }
  const double final_loss = ex::EvalLoss(w.data(), seed, 2000);
  const double secs = static_cast<double>(last - first) / 1e9;
  std::printf(
      "initial_loss=%.6f\nfinal_loss=%.6f\ntarget=%.6f\nreached=%s\nworker_processes=%zu\nupdates=%lld\n"
      "updates_per_s=%.0f\n",
      initial, final_loss, target, final_loss <= target ? "yes" : "no", pids.size(), static_cast<long long>(updates),
      secs > 0 ? static_cast<double>(updates) / secs : 0.0);
  return final_loss <= target ? 0 : 1;
}
