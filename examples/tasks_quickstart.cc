// Tasks and actors in a few lines: the README's quickstart, runnable.
//
//   bazel build //examples:tasks_quickstart
//   drover up --nodes 2 --gpus-per-node 1          # GPUs may be declared on a CPU machine
//   bazel-bin/examples/tasks_quickstart             # a plain program: its own driver job
//   drover run -- bazel-bin/examples/tasks_quickstart   # or as a process of a job
//
// The program is also its own worker: the agents start this same binary (shipped to
// them as a content-addressed package) with an environment in which drover::Init serves
// tasks instead of returning. So drover::Init comes first in main.
#include <cstdlib>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "drover/drover.h"

// An image: a float32 tensor [3, 32, 32] with a recognisable pattern.
drover::Tensor LoadImage() {
  std::vector<float> pixels(3 * 32 * 32);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<float>(i % 256);
  return *drover::Tensor::FromVector(pixels, {3, 32, 32});
}

// Scales every pixel: a new tensor (the argument is read in place from the store).
absl::StatusOr<drover::Tensor> Normalize(drover::Tensor img, float scale) {
  auto in = img.span<float>();
  if (!in.ok()) return in.status();
  auto out = drover::Tensor::Empty(drover::DType::kFloat32, img.shape());
  if (!out.ok()) return out.status();
  auto o = *out->mutable_span<float>();
  for (size_t i = 0; i < in->size(); ++i) o[i] = (*in)[i] * scale;
  return *out;
}

int64_t Sum(std::vector<int64_t> xs) { return std::accumulate(xs.begin(), xs.end(), int64_t{0}); }

// A model held by an actor: loaded once, on the GPU the actor owns for its whole life.
class Model {
 public:
  explicit Model(std::string path) : path_(std::move(path)) {
    const char* gpus = std::getenv("CUDA_VISIBLE_DEVICES");
    device_ = gpus != nullptr && *gpus != '\0' ? absl::StrCat("cuda:", gpus) : "cpu";
  }
  // Mean pixel per channel: a stand-in for inference.
  std::vector<float> Predict(drover::Tensor batch) {
    auto px = *batch.span<float>();
    const int64_t channels = batch.shape()[0];
    const size_t per = px.size() / static_cast<size_t>(channels);
    std::vector<float> out(static_cast<size_t>(channels));
    for (int64_t c = 0; c < channels; ++c) {
      double s = 0;
      for (size_t i = 0; i < per; ++i) s += px[static_cast<size_t>(c) * per + i];
      out[static_cast<size_t>(c)] = static_cast<float>(s / static_cast<double>(per));
    }
    return out;
  }
  std::string Device() const { return device_ + " weights=" + path_; }

 private:
  std::string path_;
  std::string device_;
};

Model* MakeModel(std::string path) { return new Model(std::move(path)); }

DROVER_REMOTE(Normalize, Sum, MakeModel, &Model::Predict, &Model::Device);

int main(int argc, char** argv) {
  if (absl::Status s = drover::Init(argc, argv); !s.ok()) {
    std::cerr << "drover::Init: " << s << "\n";
    return 1;
  }
  drover::ObjectRef<drover::Tensor> img = drover::Put(LoadImage());
  drover::Resources one_cpu;  // C++17: no designated initializers ({.cpus = 1} is C++20)
  one_cpu.cpus = 1;
  auto out = drover::Task(Normalize).SetResources(one_cpu).Remote(img, 0.5f);
  absl::StatusOr<drover::Tensor> t = drover::Get(out);  // zero copy from the node's store
  if (!t.ok()) {
    std::cerr << "Normalize: " << t.status() << "\n";
    return 1;
  }
  std::cout << "normalized " << t->Describe() << ", first pixel " << (*t->span<float>())[1] << "\n";

  std::vector<drover::ObjectRef<int64_t>> parts;  // many tasks
  for (int64_t i = 0; i < 16; ++i) parts.push_back(drover::Task(Sum).Remote(std::vector<int64_t>{i, i, i}));
  auto ready = drover::Wait(parts, /*num_ready=*/4, absl::Seconds(10));
  std::cout << ready.ready.size() << " of " << parts.size() << " sums ready first\n";
  auto sums = drover::Get(parts);
  if (!sums.ok()) {
    std::cerr << "Sum: " << sums.status() << "\n";
    return 1;
  }
  std::cout << "sum of sums " << std::accumulate(sums->begin(), sums->end(), int64_t{0}) << "\n";

  drover::Resources one_gpu;
  one_gpu.gpus = 1;
  auto model = drover::Actor(MakeModel).SetResources(one_gpu).Remote("w.bin");
  if (absl::Status ready = model.WaitReady(absl::Seconds(30)); !ready.ok()) {
    // E.g. "actor ... is not ready: needs 1 CPU, 1 GPU on one node; the most any node
    // has is 2 CPUs and 0 GPUs; waiting for a node that has it".
    std::cerr << "the model actor did not start: " << ready.message()
              << "\n(give the cluster GPUs, e.g. `drover up --gpus-per-node 1`: declared GPUs "
                 "work on a machine without one)\n";
    return 1;
  }
  auto pred = model.Task(&Model::Predict).Remote(out);  // refs as arguments
  auto device = drover::Get(model.Task(&Model::Device).Remote());
  auto p = drover::Get(pred);
  if (!p.ok() || !device.ok()) {
    std::cerr << "Model: " << (p.ok() ? device.status() : p.status()) << "\n";
    return 1;
  }
  std::cout << "model on " << *device << " predicts " << (*p)[0] << " " << (*p)[1] << " " << (*p)[2]
            << "\n";
  return 0;
}
