// Ensemble inference: one actor per GPU of the cluster, each holding its model on its
// own device for its whole life; batches fanned out to them, results gathered in order.
//
//   bazel build //examples:ensemble_inference
//   drover up --nodes 2 --gpus-per-node 2
//   bazel-bin/examples/ensemble_inference --batches 64
//
// It prints one line per model (where it runs) and then "predictions=N checksum=X";
// the checksum does not depend on how many models there are or where they run.
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "drover/drover.h"

// A batch of `rows` samples of 64 features, made from its index (no data files needed).
drover::Tensor MakeBatch(int64_t index, int64_t rows) {
  std::vector<float> x(static_cast<size_t>(rows * 64));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((index * 131 + static_cast<int64_t>(i)) % 97) / 97.0f;
  return *drover::Tensor::FromVector(x, {rows, 64});
}

// A linear classifier with fixed weights (the same in every replica): scores per row.
class Classifier {
 public:
  explicit Classifier(int64_t seed) : w_(64 * 10) {
    for (size_t i = 0; i < w_.size(); ++i) w_[i] = static_cast<float>((seed + static_cast<int64_t>(i)) % 13) / 13.0f - 0.5f;
    const char* gpus = std::getenv("CUDA_VISIBLE_DEVICES");
    const char* node = std::getenv("DROVER_NODE_ID");
    where_ = absl::StrCat(node != nullptr ? node : "?", " gpu ", gpus != nullptr && *gpus ? gpus : "none");
  }
  // The predicted class of every row.
  std::vector<int32_t> Predict(drover::Tensor batch) {
    auto x = *batch.span<float>();
    const int64_t rows = batch.shape()[0];
    std::vector<int32_t> out(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      int best = 0;
      float best_score = -1e30f;
      for (int c = 0; c < 10; ++c) {
        float s = 0;
        for (int k = 0; k < 64; ++k) s += x[static_cast<size_t>(r * 64 + k)] * w_[static_cast<size_t>(k * 10 + c)];
        if (s > best_score) {
          best_score = s;
          best = c;
        }
      }
      out[static_cast<size_t>(r)] = best;
    }
    return out;
  }
  std::string Where() const { return where_; }

 private:
  std::vector<float> w_;
  std::string where_;
};

Classifier* MakeClassifier(int64_t seed) { return new Classifier(seed); }

DROVER_REMOTE(MakeClassifier, &Classifier::Predict, &Classifier::Where);

int main(int argc, char** argv) {
  if (absl::Status s = drover::Init(argc, argv); !s.ok()) {
    std::cerr << "drover::Init: " << s << "\n";
    return 1;
  }
  int64_t batches = 32, rows = 256;
  bool verify = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--verify") verify = true;
    if (i + 1 >= argc) continue;
    if (std::string(argv[i]) == "--batches") batches = std::atoll(argv[i + 1]);
    if (std::string(argv[i]) == "--rows") rows = std::atoll(argv[i + 1]);
  }
  // One model per GPU of the cluster (at least one, on CPU, if it has none).
  auto cluster = drover::ResolveCluster("", "");
  int gpus = 0;
  if (cluster.ok()) {
    if (auto client = drover::Client::Connect(*cluster); client.ok()) {
      if (auto status = (*client)->Status(); status.ok()) {
        for (const auto& n : status->nodes) {
          if (n.state == drover::NodeState::kAlive) gpus += n.total.gpus;
        }
      }
    }
  }
  const int models = std::max(gpus, 1);
  std::vector<drover::ActorHandle<Classifier>> ensemble;
  for (int i = 0; i < models; ++i) {
    drover::Resources r;
    r.cpus = 0.5;
    r.gpus = gpus > 0 ? 1 : 0;
    ensemble.push_back(drover::Actor(MakeClassifier).SetResources(r).Remote(int64_t{7}));
  }
  for (auto& m : ensemble) {
    auto where = drover::Get(m.Task(&Classifier::Where).Remote(), absl::Minutes(2));
    if (!where.ok()) {
      std::cerr << "model: " << where.status() << "\n";
      return 1;
    }
    std::cout << "model " << m.id() << " on " << *where << "\n";
  }
  const absl::Time start = absl::Now();
  std::vector<drover::ObjectRef<std::vector<int32_t>>> results;
  for (int64_t b = 0; b < batches; ++b) {
    // The batch goes into the store once; the model reads it in place on its node.
    auto batch = drover::Put(MakeBatch(b, rows));
    results.push_back(ensemble[static_cast<size_t>(b) % ensemble.size()].Task(&Classifier::Predict).Remote(batch));
  }
  int64_t predictions = 0, checksum = 0;
  for (auto& r : results) {
    auto p = drover::Get(r, absl::Minutes(2));
    if (!p.ok()) {
      std::cerr << "predict: " << p.status() << "\n";
      return 1;
    }
    for (int32_t c : *p) checksum = (checksum * 31 + c) % 1000000007;
    predictions += static_cast<int64_t>(p->size());
  }
  const double secs = absl::ToDoubleSeconds(absl::Now() - start);
  std::cout << absl::StrFormat("models=%d predictions=%d checksum=%d (%.0f rows/s)\n", models,
                               predictions, checksum, predictions / secs);
  if (verify) {
    // The same predictions made here, by one model, in this process.
    Classifier local(7);
    int64_t want = 0;
    for (int64_t b = 0; b < batches; ++b) {
      for (int32_t c : local.Predict(MakeBatch(b, rows))) want = (want * 31 + c) % 1000000007;
    }
    std::cout << (want == checksum ? "verified" : absl::StrCat("MISMATCH: one local model gives ", want)) << "\n";
    return want == checksum ? 0 : 1;
  }
  return 0;
}
