// The pipeline figures (drover::DataLoader, Queue, SharedTensor) on a real 2-node
// cluster started with the tests' TestCluster harness, each beside PyTorch doing the
// same work in the same run (bench/pipeline_torch.py under /usr/bin/python3):
//
//   BENCH preprocess_items     items/s of 20,000 items of 0.26 ms CPU work each through
//                              a DataLoader with 2 workers on one node; baseline: torch's
//                              DataLoader with 2 workers (and 0, printed beside)
//   BENCH preprocess_items_vs_one_core  the same rate against the work done serially
//                              on one core in this process; beside it, the share of
//                              the CPU the loader and its workers used that went into
//                              the items' work (what the figure would be on 2 idle
//                              cores, whatever else runs on the machine)
//   BENCH preprocess_small_items  the same for 40,000 items of 50 µs each: items so
//                              short that the loader must batch them per call
//   BENCH queue_tensor_64MiB   ms per item from a producer to a consumer on one node, a
//                              new 64 MiB tensor per item; baseline: torch.mp.Queue
//   BENCH queue_small_items    items/s of 1 KiB tensors, producer to consumer on one
//                              node; baseline: torch.mp.Queue
//   BENCH hogwild_steps        SGD updates/s of 2 workers on one shared model
//                              (examples/mlp.h); baseline: torch's Hogwild example, same
//                              model and workers
//
// Each line's ratio= is drover over torch (for times: torch's time over drover's):
// higher is better. `--only a,b` runs some; `--no-torch` skips the baselines.
// This binary is also its own worker: agents start it in worker mode.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/bench_util.h"
#include "drover/drover.h"
#include "examples/mlp.h"
#include "tests/util/test_cluster.h"

extern char** environ;

namespace {

int64_t ThreadCpuNs() {
  timespec ts;
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
}

// An item of the preprocessing figure.
struct WorkItem {
  int64_t index = 0;
  int64_t work_ns = 0;
  MSGPACK_DEFINE(index, work_ns);
};

// Its work: this much CPU time of the calling thread, then 64 floats (what the torch
// baseline's dataset returns).
absl::StatusOr<drover::Tensor> Work(WorkItem item, uint64_t) {
  const int64_t end = ThreadCpuNs() + item.work_ns;
  while (ThreadCpuNs() < end) {
  }
  return drover::Tensor::FromVector(std::vector<float>(64, static_cast<float>(item.index)));
}

// Minor page faults of the calling thread so far.
int64_t ThreadMinorFaults() {
  rusage u;
  ::getrusage(RUSAGE_THREAD, &u);
  return u.ru_minflt;
}

// Minor page faults of this process so far.
int64_t SelfMinorFaults() {
  rusage u;
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// What the producer of queue_tensor_64MiB spent, summed over its items.
struct ProducerCost {
  int64_t items = 0;
  int64_t minor_faults = 0;  // of the thread that allocates, fills and puts
  int64_t alloc_ns = 0;
  int64_t fill_ns = 0;
  int64_t put_ns = 0;  // includes waiting while the queue is full
  MSGPACK_DEFINE(items, minor_faults, alloc_ns, fill_ns, put_ns);
};

// Puts `items` new tensors of `numel` floats (written in place in the store, each
// filled as torch.full fills the baseline's); says where the time went.
absl::StatusOr<ProducerCost> ProduceTensors(drover::Queue<drover::Tensor> q, int64_t items, int64_t numel) {
  ProducerCost cost;
  const int64_t faults0 = ThreadMinorFaults();
  for (int64_t i = 0; i < items; ++i) {
    absl::Time t0 = absl::Now();
    // Written whole below: no zero-fill first (torch.full writes each byte once too).
    absl::StatusOr<drover::Tensor> t = drover::AllocateInStoreUninitialized(drover::DType::kFloat32, {numel});
    if (!t.ok()) return t.status();
    absl::Time t1 = absl::Now();
    absl::Span<float> v = *t->mutable_span<float>();
    std::fill(v.begin(), v.end(), static_cast<float>(i));
    absl::Time t2 = absl::Now();
    if (absl::Status s = q.Put(*t); !s.ok()) return s;
    cost.alloc_ns += absl::ToInt64Nanoseconds(t1 - t0);
    cost.fill_ns += absl::ToInt64Nanoseconds(t2 - t1);
    cost.put_ns += absl::ToInt64Nanoseconds(absl::Now() - t2);
  }
  cost.items = items;
  cost.minor_faults = ThreadMinorFaults() - faults0;
  if (absl::Status s = q.Close(); !s.ok()) return s;
  return cost;
}

// Puts `items` new 1 KiB tensors (small: they travel inline).
absl::Status ProduceSmall(drover::Queue<drover::Tensor> q, int64_t items) {
  for (int64_t i = 0; i < items; ++i) {
    absl::StatusOr<drover::Tensor> t = drover::Tensor::FromVector(std::vector<float>(256, static_cast<float>(i)));
    if (!t.ok()) return t.status();
    if (absl::Status s = q.Put(*t); !s.ok()) return s;
  }
  return q.Close();
}

// One Hogwild worker, a process of its own (an actor), as torch's are.
class HogwildWorker {
 public:
  // Steps, start and end (ns since the epoch).
  std::vector<int64_t> Train(drover::SharedTensor w, int64_t worker, int64_t steps, int64_t batch) {
    float* p = w.span<float>()->data();
    const int64_t start = absl::GetCurrentTimeNanos();
    drover::examples::SgdSteps(p, 1, worker, steps, batch, 0.05f);
    return {steps, start, absl::GetCurrentTimeNanos()};
  }
};
HogwildWorker* MakeHogwildWorker() { return new HogwildWorker(); }

}  // namespace

DROVER_REMOTE(Work, ProduceTensors, ProduceSmall, MakeHogwildWorker, &HogwildWorker::Train);

namespace drover::bench {
namespace {

using testing::TestCluster;


// Runs the torch script; returns its RESULT values by name (empty if it cannot run).
std::map<std::string, double> Torch(const std::string& script, const std::vector<std::string>& args) {
  std::map<std::string, double> out;
  int pipefd[2];
  if (::pipe(pipefd) != 0) return out;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
  posix_spawn_file_actions_addclose(&fa, pipefd[0]);
  std::vector<std::string> argv_s = {"/usr/bin/python3", script};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The baseline must not see this process's drover environment.
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) {
    if (std::strncmp(*e, "DROVER_", 7) != 0) env_s.push_back(*e);
  }
  env_s.push_back("OMP_NUM_THREADS=1");
  std::vector<char*> env;
  for (auto& e : env_s) env.push_back(e.data());
  env.push_back(nullptr);
  pid_t pid;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), env.data());
  posix_spawn_file_actions_destroy(&fa);
  ::close(pipefd[1]);
  if (rc != 0) {
    ::close(pipefd[0]);
    return out;
  }
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(pipefd[0], buf, sizeof(buf))) > 0;) text.append(buf, static_cast<size_t>(n));
  ::close(pipefd[0]);
  ::waitpid(pid, nullptr, 0);
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    double v;
    if (f.size() == 3 && f[0] == "RESULT" && absl::SimpleAtod(f[2], &v)) out[f[1]] = v;
  }
  return out;
}

// CPU seconds used so far by this process and by the processes of `job` (its workers).
double CpuSeconds(const std::string& job) {
  rusage self{};
  ::getrusage(RUSAGE_SELF, &self);
  double secs = static_cast<double>(self.ru_utime.tv_sec + self.ru_stime.tv_sec) +
                static_cast<double>(self.ru_utime.tv_usec + self.ru_stime.tv_usec) / 1e6;
  const double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
  for (pid_t pid : testing::ProcessesOfJob(job)) {
    std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::vector<std::string> f = absl::StrSplit(stat.substr(close + 2), ' ');
    double utime = 0, stime = 0;
    // Fields 14 and 15 of /proc/<pid>/stat (utime, stime), counted after "pid (comm) ".
    if (f.size() > 12 && absl::SimpleAtod(f[11], &utime) && absl::SimpleAtod(f[12], &stime)) {
      secs += (utime + stime) / tick;
    }
  }
  return secs;
}

std::string Ratio(double ours, double base) { return base > 0 ? absl::StrFormat("%.2f", ours / base) : "n/a"; }

struct Flags {
  int64_t items = 20000;
  int64_t work_us = 260;
  int64_t small_work_items = 40000;  // of 50 µs each
  int64_t tensor_items = 12;
  int64_t tensor_warmup = 8;
  int64_t small_items = 20000;
  int64_t hogwild_steps = 3000;
  int prefetch = LoaderOptions().prefetch;
  bool torch = true;
  std::vector<std::string> only;
  bool Wants(const std::string& name) const {
    return only.empty() || std::find(only.begin(), only.end(), name) != only.end();
  }
};

// The preprocessing figures of `name`: `items` items of `work_us` CPU µs each.
void Preprocess(const Flags& f, const std::string& node, const std::string& script, const std::string& name,
                int64_t items, int64_t work_us) {
  const int64_t work_ns = work_us * 1000;
  // One core: the same work serially, here (before and after the loader's run, so a
  // change of the machine's load meanwhile shows less).
  auto serial = [&] {
    const int64_t n = std::max<int64_t>(1, items / 10);
    absl::Time s = absl::Now();
    for (int64_t i = 0; i < n; ++i) (void)Work(WorkItem{i, work_ns}, 0);
    return static_cast<double>(n) / absl::ToDoubleSeconds(absl::Now() - s);
  };
  const double one_core_before = serial();
  LoaderOptions o{.num_workers = 2, .prefetch = f.prefetch, .node_id = node, .progress = LoaderOptions::Progress::kOff,
                  .name = name};
  // Items/s of a loader over `n` items, and the CPU seconds it and its workers used
  // meanwhile (measured while the workers live: they stop with the loader).
  auto run = [&](int64_t n) {
    std::vector<WorkItem> inputs;
    for (int64_t i = 0; i < n; ++i) inputs.push_back(WorkItem{i, work_ns});
    auto loader = Must(DataLoader<Tensor>::Create(std::move(inputs), Work, o), "DataLoader");
    const double cpu0 = CpuSeconds(JobId());
    absl::Time t0 = absl::Now();
    int64_t got = 0;
    for (;;) {
      absl::StatusOr<Tensor> v = loader.Next();
      if (absl::IsOutOfRange(v.status())) break;
      if (!v.ok()) Die(v.status().ToString());
      ++got;
    }
    const double rate = static_cast<double>(got) / absl::ToDoubleSeconds(absl::Now() - t0);
    return std::make_pair(rate, CpuSeconds(JobId()) - cpu0);
  };
  run(200);  // warm: the binary is on the node, the page cache holds it
  const auto [ours, cpu] = run(items);
  const double one_core = (one_core_before + serial()) / 2;
  // The load of other programs moves the wall-clock figures; what share of the CPU the
  // loader's processes used went into the items' work does not move with it.
  const double efficiency = static_cast<double>(items) * static_cast<double>(work_ns) / 1e9 / cpu;
  std::map<std::string, double> t2, t0;
  if (f.torch) {
    t2 = Torch(script, {"dataloader", "--items", absl::StrCat(items), "--work-us", absl::StrCat(work_us), "--workers", "2"});
    t0 = Torch(script, {"dataloader", "--items", absl::StrCat(items / 4), "--work-us", absl::StrCat(work_us), "--workers", "0"});
  }
  const double torch2 = t2.count("dataloader_2_workers") ? t2["dataloader_2_workers"] : 0;
  const double torch0 = t0.count("dataloader_0_workers") ? t0["dataloader_0_workers"] : 0;
  Line(absl::StrFormat("BENCH %s %.0f items/s baseline=%.0f ratio=%s torch_0_workers=%.0f", name, ours, torch2,
                       Ratio(ours, torch2), torch0));
  Line(absl::StrFormat("BENCH %s_vs_one_core %.0f items/s baseline=%.0f ratio=%s", name, ours, one_core,
                       Ratio(ours, one_core)));
  Line(absl::StrFormat("  (work / CPU used by the driver and its workers: %.3f, so %.2fx one core on 2 idle cores)",
                       efficiency, 2 * efficiency));
}


void QueueTensor(const Flags& f, const std::string& node, const std::string& script) {
  const int64_t numel = int64_t{64} << 20 >> 2;  // 64 MiB of float32
  auto one_run = [&](int64_t items) {
    auto q = Must(Queue<Tensor>::Create({.capacity = 2}), "Queue");
    absl::Time t0 = absl::Now();
    auto producer = Task(ProduceTensors).SetNodeAffinity(node).Remote(q, items, numel);
    int64_t got = 0;
    for (;;) {
      absl::StatusOr<Tensor> t = q.Get(absl::Minutes(2));
      if (absl::IsOutOfRange(t.status())) break;
      if (!t.ok()) Die(t.status().ToString());
      if ((*t->span<float>())[numel - 1] != static_cast<float>(got)) Die("a 64 MiB item arrived wrong");
      ++got;
    }
    const double ms = absl::ToDoubleMilliseconds(absl::Now() - t0) / static_cast<double>(got);
    ProducerCost cost = Must(Get(producer), "the producer");
    (void)q.Destroy();
    return std::make_pair(ms, cost);
  };
  // Warm: the producer's worker, and every region of the arena the steady state reuses
  // (up to capacity + 3 items live at once: queued, being filled, being read, being
  // freed). Pages of a region the producer's process has not written yet cost a fault
  // each (16,384 per item); the line below the figure counts them.
  one_run(f.tensor_warmup);
  const int64_t consumer_faults0 = SelfMinorFaults();
  const auto [ours, cost] = one_run(f.tensor_items);
  const double consumer_faults =
      static_cast<double>(SelfMinorFaults() - consumer_faults0) / static_cast<double>(f.tensor_items);
  std::map<std::string, double> t;
  if (f.torch) t = Torch(script, {"queue_tensor", "--mib", "64", "--items", absl::StrCat(f.tensor_items)});
  const double base = t.count("queue_tensor_ms") ? t["queue_tensor_ms"] : 0;
  Line(absl::StrFormat("BENCH queue_tensor_64MiB %.2f ms baseline=%.2f ratio=%s", ours, base,
                       base > 0 ? absl::StrFormat("%.2f", base / ours) : "n/a"));
  // Where an item's time went: a reused arena takes no page faults in steady state, so
  // the fill runs at memory bandwidth; faults here mean fresh pages per item.
  const double n = static_cast<double>(std::max<int64_t>(1, cost.items));
  std::cout << absl::StrFormat(
                   "  (producer per item: alloc %.2f ms, fill %.2f ms (%.1f GB/s), put %.2f ms, "
                   "%.0f minor faults; consumer %.0f minor faults per item)",
                   cost.alloc_ns / n / 1e6, cost.fill_ns / n / 1e6,
                   cost.fill_ns > 0 ? n * static_cast<double>(numel * 4) / cost.fill_ns : 0.0,
                   cost.put_ns / n / 1e6, cost.minor_faults / n, consumer_faults)
            << std::endl;
}

void QueueSmall(const Flags& f, const std::string& node, const std::string& script) {
  auto one_run = [&](int64_t items) {
    auto q = Must(Queue<Tensor>::Create({.capacity = 64}), "Queue");
    absl::Time t0 = absl::Now();
    auto producer = Task(ProduceSmall).SetNodeAffinity(node).Remote(q, items);
    int64_t got = 0;
    for (;;) {
      absl::StatusOr<Tensor> t = q.Get(absl::Minutes(2));
      if (absl::IsOutOfRange(t.status())) break;
      if (!t.ok()) Die(t.status().ToString());
      ++got;
    }
    if (absl::Status st = Get(producer); !st.ok()) Die(st.ToString());
    (void)q.Destroy();
    return static_cast<double>(got) / absl::ToDoubleSeconds(absl::Now() - t0);
  };
  one_run(500);
  const double ours = one_run(f.small_items);
  std::map<std::string, double> t;
  if (f.torch) t = Torch(script, {"queue_small", "--items", absl::StrCat(f.small_items)});
  const double base = t.count("queue_small_items_per_s") ? t["queue_small_items_per_s"] : 0;
  Line(absl::StrFormat("BENCH queue_small_items %.0f items/s baseline=%.0f ratio=%s", ours, base, Ratio(ours, base)));
  // One put and one get from this process, each a round trip to the queue's host: what
  // the host's own server costs (an actor call would cost about the same, but could not
  // wait for an item without blocking the put that brings it).
  auto q = Must(Queue<int64_t>::Create({.capacity = 4}), "Queue");
  std::vector<double> put_us, get_us;
  for (int i = 0; i < 2000; ++i) {
    absl::Time t0 = absl::Now();
    if (!q.Put(i).ok()) Die("put");
    absl::Time t1 = absl::Now();
    if (!q.Get().ok()) Die("get");
    put_us.push_back(absl::ToDoubleMicroseconds(t1 - t0));
    get_us.push_back(absl::ToDoubleMicroseconds(absl::Now() - t1));
  }
  (void)q.Destroy();
  Line(absl::StrFormat("  (one put %.1f us, one get %.1f us, p50)", Median(put_us), Median(get_us)));
}

void HogwildSteps(const Flags& f, const std::string& node, const std::string& script) {
  const int64_t workers = 2, batch = 16;
  auto one_run = [&](int64_t steps) {
    auto w = Must(SharedTensor::Create(DType::kFloat32, {examples::kParams}), "SharedTensor");
    std::vector<float> init;
    examples::InitWeights(1, init);
    std::copy(init.begin(), init.end(), w.span<float>()->begin());
    std::vector<ActorHandle<HogwildWorker>> pool;
    std::vector<ObjectRef<std::vector<int64_t>>> runs;
    for (int64_t i = 0; i < workers; ++i) {
      pool.push_back(Actor(MakeHogwildWorker).SetNodeAffinity(node).Remote());
      runs.push_back(pool.back().Task(&HogwildWorker::Train).Remote(w, i, steps, batch));
    }
    int64_t n = 0, first = INT64_MAX, last = 0;
    for (auto& r : runs) {
      std::vector<int64_t> v = Must(Get(r), "a Hogwild worker");
      n += v[0];
      first = std::min(first, v[1]);
      last = std::max(last, v[2]);
    }
    for (auto& a : pool) (void)Kill(a);
    return static_cast<double>(n) / (static_cast<double>(last - first) / 1e9);
  };
  one_run(100);
  const double ours = one_run(f.hogwild_steps);
  std::map<std::string, double> t;
  if (f.torch) {
    t = Torch(script, {"hogwild", "--workers", absl::StrCat(workers), "--steps", absl::StrCat(f.hogwild_steps),
                       "--batch", absl::StrCat(batch)});
  }
  const double base = t.count("hogwild_updates_per_s") ? t["hogwild_updates_per_s"] : 0;
  Line(absl::StrFormat("BENCH hogwild_steps %.0f updates/s baseline=%.0f ratio=%s", ours, base, Ratio(ours, base)));
}

int Main(int argc, char** argv) {
  Flags f;
  bool keep = false;
  CLI::App app{"pipeline: DataLoader, Queue and SharedTensor against PyTorch doing the same work"};
  app.add_option("--items", f.items, "items of the preprocessing figure")->check(CLI::PositiveNumber);
  app.add_option("--work-us", f.work_us, "CPU time per item, µs")->check(CLI::PositiveNumber);
  app.add_option("--prefetch", f.prefetch, "the DataLoader's prefetch (default: its own)")->check(CLI::PositiveNumber);
  app.add_option("--small-work-items", f.small_work_items, "items of the 50 µs preprocessing figure")
      ->check(CLI::PositiveNumber);
  app.add_option("--tensor-items", f.tensor_items, "64 MiB items")->check(CLI::PositiveNumber);
  app.add_option("--tensor-warmup", f.tensor_warmup, "64 MiB items put and read before the timed ones")
      ->check(CLI::PositiveNumber);
  app.add_option("--small-items", f.small_items, "1 KiB items")->check(CLI::PositiveNumber);
  app.add_option("--hogwild-steps", f.hogwild_steps, "steps per Hogwild worker")->check(CLI::PositiveNumber);
  app.add_flag("!--no-torch", f.torch, "skip the PyTorch baselines");
  app.add_flag("--keep", keep, "keep the cluster's directory");
  app.add_option("--only", f.only, "run only these figures (comma-separated names)")->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  SetBenchName("pipeline");
  signal(SIGPIPE, SIG_IGN);
  const std::string tmp = SetUpClusterRun(argv[0]);
  const std::string script = std::string(std::getenv("TEST_SRCDIR")) + "/drover/bench/pipeline_torch.py";

  std::cout << "drover pipeline benchmark: 2-node local cluster (4 CPUs, 1 GiB store each)\n" << MachineLine() << "\n"
            << std::flush;
  {
    testing::TestClusterOptions o;
    o.nodes = 2;
    o.cpus_per_node = 4;
    o.object_store_memory = 1ull << 30;
    std::unique_ptr<TestCluster> c = Must(TestCluster::Start(o), "cannot start the cluster");
    ::setenv("DROVER_ADDRESS", c->address().c_str(), 1);
    ::setenv("DROVER_TOKEN_FILE", c->token_file().c_str(), 1);
    if (absl::Status s = Init(argc, argv); !s.ok()) Die(absl::StrCat("Init: ", s.ToString()));
    const std::string node = NodeId();  // "one node": this driver's
    std::cout << "driver job " << JobId() << " on " << node << "\n\n" << std::flush;
    if (f.Wants("preprocess_items")) Preprocess(f, node, script, "preprocess_items", f.items, f.work_us);
    // Items so short that a call per item would cost more than the work.
    if (f.Wants("preprocess_small_items")) {
      Preprocess(f, node, script, "preprocess_small_items", f.small_work_items, 50);
    }
    if (f.Wants("queue_tensor_64MiB")) QueueTensor(f, node, script);
    if (f.Wants("queue_small_items")) QueueSmall(f, node, script);
    if (f.Wants("hogwild_steps")) HogwildSteps(f, node, script);
    Shutdown();
  }
  FinishClusterRun(tmp, keep);
  return 0;
}

}  // namespace
}  // namespace drover::bench

int main(int argc, char** argv) {
  // A worker started by an agent serves tasks here and never returns.
  if (drover::RunningAsWorker()) drover::Init(argc, argv).IgnoreError();
  return drover::bench::Main(argc, argv);
}
