// Data-parallel training in plain C++ over a drover collective group: a small MLP
// (examples/mlp.h: 16 -> 32 tanh -> 1, float32 weights) fit with SGD to a deterministic synthetic
// regression task. Every rank generates the same global batch for a step, takes its
// slice (by RANK), and the gradients are summed over the group every step, so N ranks
// follow the same trajectory as one process fed the same global batches.
//
//   drover run --nodes 2 --nproc-per-node 2 -- bazel-bin/examples/ddp_train
//       --steps 200 --checkpoint-dir /tmp/ckpt     (one command line)
//   bazel-bin/examples/ddp_train --steps 200        # one process, no cluster
//
// Checkpoints: rank 0 writes the weights and the step to <dir>/checkpoint.bin every
// --checkpoint-every steps (temp file + rename, so a reader never sees a torn file). At
// start rank 0 loads it if present and broadcasts weights and step to every rank, so
// only rank 0's node needs the directory. Sample i of step s is a pure function of
// (seed, s, i) and SGD has no other state, so a run resumed from step s continues
// exactly as the uninterrupted run would have.
//
// Flags (--name value or --name=value):
//   --steps N              total steps (default 200)
//   --checkpoint-every K   default 10; 0 disables writing checkpoints
//   --checkpoint-dir DIR   default $DROVER_CHECKPOINT_DIR; empty: no checkpoints
//   --lr X                 learning rate (default 0.05)
//   --global-batch B       samples per step over all ranks (default 64)
//   --seed S               data and initialisation seed (default 1)
//   --log-every N          print `step N loss X` every N steps (default 20)
//   --result-file PATH     rank 0 also writes its final lines there, after `rank=`,
//                          `generation=` and `start_step=` (the step it began or resumed
//                          at); a `{rank}` in PATH is replaced and every rank writes one
//   --die-at-step S --die-rank R [--die-generation G] [--die-stamp PATH]
//                          rank R of generation G (TORCHELASTIC_RESTART_COUNT, default 0)
//                          raises SIGKILL before computing step S; with --die-stamp it
//                          first writes the wall-clock time in ms there. For tests.
//
// Output of rank 0 at the end: `final_loss=<%.9g>` (the mean loss of the last step),
// `final_weights_checksum=<%.9g>` (sum of the weights, in double) and
// `final_weights=<w0,w1,...>` (every weight, %.9g: exact for float32).
//
// With WORLD_SIZE unset or 1 no group is created. Otherwise the group comes from the job
// environment (drover::CollectiveGroup::FromEnvironment); a failed collective (a peer
// died) is reported and the process exits 1, leaving the restart to drover.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "drover/collective.h"
#include "examples/mlp.h"

namespace {

using drover::CollectiveGroup;
using drover::DType;
using drover::ReduceOp;
using namespace drover::examples;  // NOLINT(build/namespaces): the model (mlp.h)

int g_rank = 0;

[[noreturn]] void Die(const std::string& msg) {
  std::fprintf(stderr, "ddp_train rank %d: %s\n", g_rank, msg.c_str());
  std::fflush(stderr);
  std::exit(1);
}

struct Flags {
  int64_t steps = 200;
  int64_t checkpoint_every = 10;
  std::string checkpoint_dir;
  double lr = 0.05;
  int64_t global_batch = 64;
  uint64_t seed = 1;
  int64_t log_every = 20;
  std::string result_file;
  int64_t die_at_step = -1;
  int64_t die_rank = -1;
  int64_t die_generation = 0;
  std::string die_stamp;
};

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  if (const char* d = std::getenv("DROVER_CHECKPOINT_DIR")) f.checkpoint_dir = d;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string name = a, value;
    bool has_value = false;
    if (size_t eq = a.find('='); eq != std::string::npos) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
      has_value = true;
    }
    auto next = [&]() -> std::string {
      if (has_value) return value;
      if (i + 1 >= argc) Die(absl::StrCat(name, " needs a value"));
      return argv[++i];
    };
    auto as_int = [&](int64_t* out) {
      std::string v = next();
      if (!absl::SimpleAtoi(v, out)) Die(absl::StrCat(name, ": not an integer: '", v, "'"));
    };
    if (name == "--steps") as_int(&f.steps);
    else if (name == "--checkpoint-every") as_int(&f.checkpoint_every);
    else if (name == "--checkpoint-dir") f.checkpoint_dir = next();
    else if (name == "--lr") {
      std::string v = next();
      if (!absl::SimpleAtod(v, &f.lr)) Die(absl::StrCat("--lr: not a number: '", v, "'"));
    } else if (name == "--global-batch") as_int(&f.global_batch);
    else if (name == "--seed") {
      std::string v = next();
      if (!absl::SimpleAtoi(v, &f.seed)) Die(absl::StrCat("--seed: not an integer: '", v, "'"));
    } else if (name == "--log-every") as_int(&f.log_every);
    else if (name == "--result-file") f.result_file = next();
    else if (name == "--die-at-step") as_int(&f.die_at_step);
    else if (name == "--die-rank") as_int(&f.die_rank);
    else if (name == "--die-generation") as_int(&f.die_generation);
    else if (name == "--die-stamp") f.die_stamp = next();
    else Die(absl::StrCat("unknown flag '", a, "' (see the comment at the top of ddp_train.cc)"));
  }
  if (f.steps < 0 || f.global_batch <= 0 || f.checkpoint_every < 0 || f.log_every < 0) {
    Die("--steps, --checkpoint-every and --log-every must be >= 0, --global-batch > 0");
  }
  return f;
}

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  int64_t out;
  if (v == nullptr || !*v) return fallback;
  if (!absl::SimpleAtoi(v, &out)) Die(absl::StrCat(name, " is not an integer: '", v, "'"));
  return out;
}

// Checkpoint file: "DDPCKPT1", int64 step, int64 params, double loss of the last step,
// float[params], uint64 FNV-1a of everything before it.
constexpr char kMagic[8] = {'D', 'D', 'P', 'C', 'K', 'P', 'T', '1'};

uint64_t Fnv(const std::string& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string CheckpointPath(const std::string& dir) { return dir + "/checkpoint.bin"; }

void WriteCheckpoint(const std::string& dir, int64_t step, double loss,
                     const std::vector<float>& w) {
  std::string bytes(kMagic, sizeof(kMagic));
  int64_t n = kParams;
  bytes.append(reinterpret_cast<const char*>(&step), sizeof(step));
  bytes.append(reinterpret_cast<const char*>(&n), sizeof(n));
  bytes.append(reinterpret_cast<const char*>(&loss), sizeof(loss));
  bytes.append(reinterpret_cast<const char*>(w.data()), w.size() * sizeof(float));
  uint64_t sum = Fnv(bytes);
  bytes.append(reinterpret_cast<const char*>(&sum), sizeof(sum));
  std::string tmp = absl::StrCat(CheckpointPath(dir), ".tmp.", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) Die(absl::StrCat("open ", tmp, ": ", std::strerror(errno)));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t k = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) Die(absl::StrCat("write ", tmp, ": ", std::strerror(errno)));
    done += static_cast<size_t>(k);
  }
  if (::fsync(fd) != 0) Die(absl::StrCat("fsync ", tmp, ": ", std::strerror(errno)));
  ::close(fd);
  if (::rename(tmp.c_str(), CheckpointPath(dir).c_str()) != 0) {
    Die(absl::StrCat("rename ", tmp, ": ", std::strerror(errno)));
  }
}

// Returns the checkpoint's step (0 if there is none) and fills w and loss.
int64_t LoadCheckpoint(const std::string& dir, std::vector<float>& w, double* loss) {
  std::string path = CheckpointPath(dir);
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    if (errno == ENOENT) return 0;
    Die(absl::StrCat("open ", path, ": ", std::strerror(errno)));
  }
  std::string bytes;
  char buf[4096];
  size_t k;
  while ((k = std::fread(buf, 1, sizeof(buf), f)) > 0) bytes.append(buf, k);
  std::fclose(f);
  const size_t want = sizeof(kMagic) + 24 + kParams * sizeof(float) + 8;
  if (bytes.size() != want || bytes.compare(0, sizeof(kMagic), kMagic, sizeof(kMagic)) != 0) {
    Die(absl::StrCat(path, " is not a checkpoint of this model (", bytes.size(), " bytes, want ",
                     want, ")"));
  }
  uint64_t sum;
  std::memcpy(&sum, bytes.data() + want - 8, 8);
  if (sum != Fnv(bytes.substr(0, want - 8))) Die(absl::StrCat(path, ": checksum mismatch"));
  int64_t step, n;
  std::memcpy(&step, bytes.data() + 8, 8);
  std::memcpy(&n, bytes.data() + 16, 8);
  if (n != kParams) Die(absl::StrCat(path, " holds ", n, " parameters, the model has ", kParams));
  std::memcpy(loss, bytes.data() + 24, 8);
  w.resize(kParams);
  std::memcpy(w.data(), bytes.data() + 32, kParams * sizeof(float));
  return step;
}

void Check(const absl::Status& s, const std::string& what) {
  if (!s.ok()) Die(absl::StrCat(what, " failed: ", s.ToString()));
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags = ParseFlags(argc, argv);
  const int world = static_cast<int>(EnvInt("WORLD_SIZE", 1));
  const int rank = static_cast<int>(EnvInt("RANK", 0));
  g_rank = rank;
  const int64_t generation =
      EnvInt("TORCHELASTIC_RESTART_COUNT", EnvInt("DROVER_GENERATION", 0));
  if (world < 1 || rank < 0 || rank >= world) {
    Die(absl::StrCat("RANK ", rank, " is not in [0, WORLD_SIZE=", world, ")"));
  }

  std::unique_ptr<CollectiveGroup> group;
  if (world > 1) {
    auto g = CollectiveGroup::FromEnvironment("ddp");
    Check(g.status(), "CollectiveGroup::FromEnvironment");
    group = std::move(*g);
  }

  // Start: fresh weights, or rank 0's checkpoint, made the same on every rank.
  std::vector<float> w;
  InitWeights(flags.seed, w);
  int64_t start = 0;
  // The mean loss of the last step taken (NaN before the first).
  double loss = std::nan("");
  if (rank == 0 && !flags.checkpoint_dir.empty()) {
    if (::mkdir(flags.checkpoint_dir.c_str(), 0755) != 0 && errno != EEXIST) {
      Die(absl::StrCat("mkdir ", flags.checkpoint_dir, ": ", std::strerror(errno)));
    }
    start = LoadCheckpoint(flags.checkpoint_dir, w, &loss);
  }
  if (group) {
    Check(group->Broadcast(&start, 1, DType::kInt64, 0), "Broadcast(step)");
    Check(group->Broadcast(&loss, 1, DType::kFloat64, 0), "Broadcast(loss)");
    Check(group->Broadcast(w.data(), w.size(), DType::kFloat32, 0), "Broadcast(weights)");
  }
  if (rank == 0) {
    std::printf("ddp_train: %d rank(s), generation %lld, %s step %lld of %lld\n", world,
                static_cast<long long>(generation), start > 0 ? "resuming from" : "starting at",
                static_cast<long long>(start), static_cast<long long>(flags.steps));
    std::fflush(stdout);
  }

  // This rank's slice of every global batch.
  const int64_t lo = flags.global_batch * rank / world;
  const int64_t hi = flags.global_batch * (rank + 1) / world;
  const double scale = 1.0 / static_cast<double>(flags.global_batch);
  // The gradient of the mean loss over the global batch, then the summed loss.
  std::vector<double> buf(kParams + 1);
  float x[kIn], y;
  for (int64_t step = start; step < flags.steps; ++step) {
    if (step == flags.die_at_step && rank == flags.die_rank &&
        generation == flags.die_generation) {
      if (!flags.die_stamp.empty()) {
        FILE* f = std::fopen(flags.die_stamp.c_str(), "w");
        if (f != nullptr) {
          std::fprintf(f, "%lld\n", static_cast<long long>(absl::ToUnixMillis(absl::Now())));
          std::fclose(f);
        }
      }
      std::fprintf(stderr, "ddp_train rank %d: killing myself at step %lld (--die-at-step)\n",
                   rank, static_cast<long long>(step));
      std::fflush(stderr);
      ::raise(SIGKILL);
    }
    std::fill(buf.begin(), buf.end(), 0.0);
    double local_loss = 0;
    for (int64_t i = lo; i < hi; ++i) {
      Sample(flags.seed, step, i, x, &y);
      local_loss += Accumulate(w.data(), x, y, scale, buf.data());
    }
    buf[kParams] = local_loss * scale;
    if (group) {
      Check(group->AllReduce(buf.data(), buf.size(), DType::kFloat64, ReduceOp::kSum),
            absl::StrCat("AllReduce at step ", step));
    }
    for (int i = 0; i < kParams; ++i) w[i] -= static_cast<float>(flags.lr * buf[i]);
    loss = buf[kParams];
    const int64_t done = step + 1;
    if (rank == 0 && flags.log_every > 0 &&
        (done % flags.log_every == 0 || done == 1 || done == flags.steps)) {
      std::printf("step %lld loss %.6g\n", static_cast<long long>(done), loss);
      std::fflush(stdout);
    }
    if (rank == 0 && !flags.checkpoint_dir.empty() && flags.checkpoint_every > 0 &&
        done % flags.checkpoint_every == 0) {
      WriteCheckpoint(flags.checkpoint_dir, done, loss, w);
    }
  }

  double checksum = 0;
  std::string weights;
  for (int i = 0; i < kParams; ++i) {
    checksum += w[i];
    absl::StrAppend(&weights, i ? "," : "", absl::StrFormat("%.9g", w[i]));
  }
  const std::string result = absl::StrFormat(
      "final_loss=%.9g\nfinal_weights_checksum=%.9g\nfinal_weights=%s\n", loss, checksum,
      weights);
  if (rank == 0) {
    std::printf("%s", result.c_str());
    std::fflush(stdout);
  }
  std::string result_file = flags.result_file;
  const size_t placeholder = result_file.find("{rank}");
  if (placeholder != std::string::npos) {
    result_file.replace(placeholder, 6, absl::StrCat(rank));
  } else if (rank != 0) {
    result_file.clear();
  }
  if (!result_file.empty()) {
    std::string tmp = absl::StrCat(result_file, ".tmp.", ::getpid());
    FILE* f = std::fopen(tmp.c_str(), "w");
    if (f == nullptr) Die(absl::StrCat("open ", tmp, ": ", std::strerror(errno)));
    std::fprintf(f, "rank=%d\ngeneration=%lld\nstart_step=%lld\n%s", rank,
                 static_cast<long long>(generation), static_cast<long long>(start),
                 result.c_str());
    std::fclose(f);
    if (::rename(tmp.c_str(), result_file.c_str()) != 0) {
      Die(absl::StrCat("rename ", tmp, ": ", std::strerror(errno)));
    }
  }
  // Leave together: no rank exits (closing its connections) while another still needs it.
  if (group) Check(group->Barrier(), "Barrier");
  return 0;
}
