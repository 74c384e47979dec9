// The small model the examples train: an MLP (16 -> 32 tanh -> 1, float32 weights) fit
// with SGD to a deterministic synthetic regression task. Shared by ddp_train.cc
// (data-parallel), preprocess_to_ddp.cc (batches made by a DataLoader) and hogwild.cc
// (workers updating shared weights in place).
//
// Every random number is a pure function of its coordinates (seed, step, sample), so a
// sample can be made anywhere (any rank, any preprocessing task) and is bitwise the
// same; the forward and backward passes are float32, so a sample's gradient is too.
// Header-only; no state.
#ifndef DROVER_EXAMPLES_MLP_H_
#define DROVER_EXAMPLES_MLP_H_

#include <cmath>
#include <algorithm>
#include <cstdint>
#include <vector>

namespace drover::examples {

inline constexpr int kIn = 16;
inline constexpr int kHidden = 32;
// W1 [kHidden][kIn], b1 [kHidden], w2 [kHidden], b2.
inline constexpr int kW1 = 0;
inline constexpr int kB1 = kW1 + kHidden * kIn;
inline constexpr int kW2 = kB1 + kHidden;
inline constexpr int kB2 = kW2 + kHidden;
inline constexpr int kParams = kB2 + 1;

// splitmix64.
inline uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
// Uniform in [-1, 1).
inline float Uniform(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
  uint64_t h = Mix(Mix(Mix(Mix(seed) ^ a) ^ b) ^ c);
  return static_cast<float>(static_cast<double>(h >> 40) / static_cast<double>(1ull << 23) - 1.0);
}

// Sample `index` of step `step`: x uniform in [-1,1)^16, y a fixed smooth function of x
// plus a little noise.
inline void Sample(uint64_t seed, int64_t step, int64_t index, float* x, float* y) {
  double dot = 0, quad = 0;
  for (int j = 0; j < kIn; ++j) {
    x[j] = Uniform(seed, 1, static_cast<uint64_t>(step), static_cast<uint64_t>(index) * kIn + j);
    double a = Uniform(seed, 2, 0, j);  // the teacher's weights
    dot += a * x[j];
    quad += (j % 2 ? 0.1 : -0.1) * x[j] * x[j];
  }
  *y = static_cast<float>(std::sin(dot) + quad +
                          0.01 * Uniform(seed, 3, static_cast<uint64_t>(step), index));
}

inline void InitWeights(uint64_t seed, std::vector<float>& w) {
  w.assign(kParams, 0.0f);
  for (int i = 0; i < kHidden * kIn; ++i) {
    w[kW1 + i] = Uniform(seed, 4, 0, i) / std::sqrt(float(kIn));
  }
  for (int i = 0; i < kHidden; ++i) {
    w[kW2 + i] = Uniform(seed, 5, 0, i) / std::sqrt(float(kHidden));
  }
}

// The model's output for `x`, and its hidden activations into `h` (kHidden floats).
inline float Forward(const float* w, const float* x, float* h) {
  float out = w[kB2];
  for (int k = 0; k < kHidden; ++k) {
    float z = w[kB1 + k];
    for (int j = 0; j < kIn; ++j) z += w[kW1 + k * kIn + j] * x[j];
    h[k] = std::tanh(z);
    out += w[kW2 + k] * h[k];
  }
  return out;
}

// Adds d(0.5 * (f(x) - y)^2)/dw * scale to grad (Grad: double or float) and returns the
// sample's loss 0.5 * (f(x) - y)^2.
template <typename Grad>
double Accumulate(const float* w, const float* x, float y, double scale, Grad* grad) {
  float h[kHidden];
  const float err = Forward(w, x, h) - y;
  grad[kB2] += static_cast<Grad>(scale * err);
  for (int k = 0; k < kHidden; ++k) {
    grad[kW2 + k] += static_cast<Grad>(scale * (err * h[k]));
    float dz = err * w[kW2 + k] * (1.0f - h[k] * h[k]);
    grad[kB1 + k] += static_cast<Grad>(scale * dz);
    for (int j = 0; j < kIn; ++j) grad[kW1 + k * kIn + j] += static_cast<Grad>(scale * (dz * x[j]));
  }
  return 0.5 * static_cast<double>(err) * err;
}

// `steps` SGD steps of `batch` samples each on the weights at `w`, read and written in
// place (Hogwild: other workers may be updating the same weights meanwhile, without
// locks). Stream `stream` of `seed` gives this worker its own samples. Returns the mean
// loss of the last step.
inline double SgdSteps(float* w, uint64_t seed, int64_t stream, int64_t steps, int64_t batch, float lr) {
  std::vector<float> grad(kParams);
  float x[kIn], y;
  double loss = 0;
  const double scale = 1.0 / static_cast<double>(batch);
  for (int64_t s = 0; s < steps; ++s) {
    std::fill(grad.begin(), grad.end(), 0.0f);
    loss = 0;
    for (int64_t i = 0; i < batch; ++i) {
      Sample(seed, stream * (int64_t{1} << 32) + s, i, x, &y);
      loss += Accumulate(w, x, y, scale, grad.data());
    }
    for (int i = 0; i < kParams; ++i) w[i] -= lr * grad[i];
    loss *= scale;
  }
  return loss;
}

// The mean loss of `w` over `count` held-out samples (step -1 of `seed`).
inline double EvalLoss(const float* w, uint64_t seed, int64_t count) {
  float x[kIn], y, h[kHidden];
  double sum = 0;
  for (int64_t i = 0; i < count; ++i) {
    Sample(seed, -1, i, x, &y);
    const double err = Forward(w, x, h) - y;
    sum += 0.5 * err * err;
  }
  return sum / static_cast<double>(count);
}

}  // namespace drover::examples

#endif  // DROVER_EXAMPLES_MLP_H_
