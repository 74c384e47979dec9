// Preprocessing on the cluster feeding data-parallel training: every rank of a 2-node
// DDP job (C++, over a drover CollectiveGroup) gets its batches from a drover
// DataLoader whose workers (tasks on both nodes) make them: samples of the synthetic
// regression task of examples/mlp.h with a little seeded augmentation, written straight
// into the store of the node that makes them (drover::AllocateInStore), read in place
// by a rank on that node or pulled once to the other: never copied more than once per
// node.
//
//   bazel build //examples:preprocess_to_ddp
//   drover up --nodes 2
//   drover run --nodes 2 --nproc-per-node 1 -- bazel-bin/examples/preprocess_to_ddp --steps 60
//   bazel-bin/examples/preprocess_to_ddp --steps 60 --local --ranks 2    # the same batches, one process
//
// The second line makes every rank's batch in this one process, serially, with the same
// function and seeds, and sums the ranks' gradients as the 2-rank allreduce does, so it
// ends with exactly the same loss and weights (`final_loss=`, `final_weights_checksum=`).
//
// Flags: --steps N (60), --global-batch B (64), --lr X (0.05), --seed S (1),
// --workers W (2, loader workers per rank), --prefetch P (4), --local, --ranks R (with
// --local: the ranks to simulate, default 2), --result-file PATH (rank 0 writes its
// final lines there too).
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "drover/drover.h"
#include "examples/mlp.h"

namespace ex = drover::examples;

// One rank's batch of one step: samples [lo, hi) of the global batch.
struct BatchSpec {
  int64_t step = 0;
  int64_t lo = 0;
  int64_t hi = 0;
  uint64_t data_seed = 0;
  MSGPACK_DEFINE(step, lo, hi, data_seed)
};

// Preprocessing: the batch as a float32 [hi - lo, 17] tensor (16 inputs, the target),
// each input jittered by a noise of the item's seed (the "augmentation").
absl::StatusOr<drover::Tensor> MakeBatch(BatchSpec spec, uint64_t seed) {
  const int64_t rows = spec.hi - spec.lo;
  // In a process with a runtime the batch is written into this node's store; else (the
  // --local reference) into this process's memory: the same bytes either way.
  absl::StatusOr<drover::Tensor> t = drover::IsInitialized()
                                         ? drover::AllocateInStore(drover::DType::kFloat32, {rows, ex::kIn + 1})
                                         : drover::Tensor::Empty(drover::DType::kFloat32, {rows, ex::kIn + 1});
  if (!t.ok()) return t.status();
  float* out = t->mutable_span<float>()->data();
  for (int64_t r = 0; r < rows; ++r) {
    float* x = out + r * (ex::kIn + 1);
    ex::Sample(spec.data_seed, spec.step, spec.lo + r, x, x + ex::kIn);
    for (int j = 0; j < ex::kIn; ++j) x[j] += 0.01f * ex::Uniform(seed, 7, static_cast<uint64_t>(r), j);
  }
  return t;
}

DROVER_REMOTE(MakeBatch);

namespace {

struct Flags {
  int64_t steps = 60, global_batch = 64, workers = 2, prefetch = 4, ranks = 2;
  double lr = 0.05;
  uint64_t seed = 1;
  bool local = false;
  std::string result_file;
};

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v == nullptr || *v == '\0' ? fallback : std::atoll(v);
}

// Rank r's batches, step by step, and the loader seed that makes them.
std::vector<BatchSpec> SpecsOf(const Flags& f, int64_t rank, int64_t world) {
  std::vector<BatchSpec> out;
  for (int64_t s = 0; s < f.steps; ++s) {
    out.push_back(BatchSpec{s, f.global_batch * rank / world, f.global_batch * (rank + 1) / world, f.seed});
  }
  return out;
}
uint64_t LoaderSeed(const Flags& f, int64_t rank) { return f.seed * 1000 + static_cast<uint64_t>(rank); }

// Adds the batch's gradient (of the mean loss over the global batch) to grad; returns
// the batch's summed loss over the global batch size.
double Accumulate(const std::vector<float>& w, const drover::Tensor& batch, double scale, std::vector<double>& grad) {
  const float* rows = *batch.data<float>();
  double loss = 0;
  for (int64_t r = 0; r < batch.shape()[0]; ++r) {
    const float* x = rows + r * (ex::kIn + 1);
    loss += ex::Accumulate(w.data(), x, x[ex::kIn], scale, grad.data());
  }
  return loss * scale;
}

void Finish(const Flags& f, const std::vector<float>& w, double loss, int64_t world) {
  double checksum = 0;
  for (float v : w) checksum += v;
  const std::string result = absl::StrFormat("ranks=%d\nfinal_loss=%.9g\nfinal_weights_checksum=%.9g\n", world, loss, checksum);
  std::printf("%s", result.c_str());
  std::fflush(stdout);
  if (!f.result_file.empty()) {
    FILE* out = std::fopen(f.result_file.c_str(), "w");
    if (out != nullptr) {
      std::fputs(result.c_str(), out);
      std::fclose(out);
    }
  }
}

[[noreturn]] void Die(const std::string& msg) {
  std::fprintf(stderr, "preprocess_to_ddp: %s\n", msg.c_str());
  std::exit(1);
}

// The reference: every rank's batches made here, the ranks' gradients summed as a
// `ranks`-way allreduce sums them (rank by rank, in double).
int RunLocal(const Flags& f) {
  std::vector<float> w;
  ex::InitWeights(f.seed, w);
  double loss = std::nan("");
  const double scale = 1.0 / static_cast<double>(f.global_batch);
  std::vector<std::vector<BatchSpec>> specs;
  for (int64_t r = 0; r < f.ranks; ++r) specs.push_back(SpecsOf(f, r, f.ranks));
  for (int64_t s = 0; s < f.steps; ++s) {
    std::vector<double> sum(ex::kParams + 1, 0.0);
    for (int64_t r = 0; r < f.ranks; ++r) {
      std::vector<double> buf(ex::kParams + 1, 0.0);
      absl::StatusOr<drover::Tensor> batch = MakeBatch(specs[r][s], drover::ItemSeed(LoaderSeed(f, r), s));
      if (!batch.ok()) Die(std::string(batch.status().message()));
      buf[ex::kParams] = Accumulate(w, *batch, scale, buf);
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += buf[i];
    }
    for (int i = 0; i < ex::kParams; ++i) w[i] -= static_cast<float>(f.lr * sum[i]);
    loss = sum[ex::kParams];
  }
  Finish(f, w, loss, f.ranks);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (drover::RunningAsWorker()) drover::Init(argc, argv).IgnoreError();  // serves, never returns
  Flags f;
  CLI::App app{"preprocess_to_ddp: DataLoader tasks on the cluster feed a DDP job"};
  app.add_option("--steps", f.steps)->check(CLI::PositiveNumber);
  app.add_option("--global-batch", f.global_batch)->check(CLI::PositiveNumber);
  app.add_option("--lr", f.lr)->check(CLI::PositiveNumber);
  app.add_option("--seed", f.seed);
  app.add_option("--workers", f.workers, "loader workers per rank")->check(CLI::PositiveNumber);
  app.add_option("--prefetch", f.prefetch)->check(CLI::PositiveNumber);
  app.add_flag("--local", f.local, "make every rank's batches in this process (the reference)");
  app.add_option("--ranks", f.ranks, "with --local: ranks to simulate")->check(CLI::PositiveNumber);
  app.add_option("--result-file", f.result_file);
  CLI11_PARSE(app, argc, argv);
  if (f.local) return RunLocal(f);

  const int64_t world = EnvInt("WORLD_SIZE", 1);
  const int64_t rank = EnvInt("RANK", 0);
  if (absl::Status s = drover::Init(argc, argv); !s.ok()) Die(absl::StrCat("drover::Init: ", s.ToString()));
  std::unique_ptr<drover::CollectiveGroup> group;
  if (world > 1) {
    auto g = drover::CollectiveGroup::FromEnvironment("ddp");
    if (!g.ok()) Die(absl::StrCat("CollectiveGroup::FromEnvironment: ", g.status().ToString()));
    group = std::move(*g);
  }
  drover::LoaderOptions o;
  o.num_workers = static_cast<int>(f.workers);
  o.prefetch = static_cast<int>(f.prefetch);
  o.seed = LoaderSeed(f, rank);
  o.name = absl::StrCat("rank", rank);
  o.resources.cpus = 0.5;  // the default is 1 CPU, nothing else
  auto loader = drover::DataLoader<drover::Tensor>::Create(SpecsOf(f, rank, world), MakeBatch, o);
  if (!loader.ok()) Die(absl::StrCat("DataLoader: ", loader.status().ToString()));

  std::vector<float> w;
  ex::InitWeights(f.seed, w);
  double loss = std::nan("");
  const double scale = 1.0 / static_cast<double>(f.global_batch);
  int64_t in_place = 0;
  for (int64_t s = 0; s < f.steps; ++s) {
    absl::StatusOr<drover::Tensor> batch = loader->Next();
    if (!batch.ok()) Die(absl::StrCat("batch of step ", s, ": ", batch.status().ToString()));
    in_place += batch->in_store() ? 1 : 0;
    std::vector<double> buf(ex::kParams + 1, 0.0);
    buf[ex::kParams] = Accumulate(w, *batch, scale, buf);
    if (group) {
      absl::Status st = group->AllReduce(buf.data(), buf.size(), drover::DType::kFloat64, drover::ReduceOp::kSum);
      if (!st.ok()) Die(absl::StrCat("AllReduce at step ", s, ": ", st.ToString()));
    }
    for (int i = 0; i < ex::kParams; ++i) w[i] -= static_cast<float>(f.lr * buf[i]);
    loss = buf[ex::kParams];
  }
  std::printf("rank %lld: %lld batches, %lld read in place from a store\n", static_cast<long long>(rank),
              static_cast<long long>(f.steps), static_cast<long long>(in_place));
  if (rank == 0) Finish(f, w, loss, world);
  if (group && !group->Barrier().ok()) Die("Barrier failed");
  return 0;
}
