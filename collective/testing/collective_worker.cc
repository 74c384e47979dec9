// A process of a drover job that exercises a collective group built from its
// environment. Each rank's input is a deterministic function of (rank, index), so every
// rank computes the expected result locally and compares.
//
//   collective_worker --mode=check               every operation and dtype
//   collective_worker --mode=check_allreduce     every allreduce op and dtype, counts <= 1M
//   collective_worker --mode=timeout --out=DIR   the last rank never joins an allreduce;
//                                                the others must fail in time, naming it
//   collective_worker --mode=kill --victim=R --out=DIR
//                                                ranks loop allreduce; rank R SIGKILLs
//                                                itself inside one; the others report the
//                                                error they got (DIR/rankN.txt), exit 3
//   collective_worker --mode=die_holding_shm --out=DIR
//                                                rank 0 dies holding the node's segment
//   collective_worker --mode=bench [--mib=64]    allreduce time, group vs raw Gloo ring
//   --algorithm=auto|gloo|shm|hierarchical       GroupOptions::algorithm (default auto)
// Exits 0 on success; on a mismatch prints what differed and exits 1.
#include <signal.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collective/group.h"
#include "collective/group_internal.h"
#include "collective/kv_store.h"
#include "common/shm_names.h"
#include "gloo/allreduce.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/types.h"

namespace drover::collective {
namespace {

int g_rank = -1;

[[noreturn]] void Die(const std::string& msg) {
  std::fprintf(stderr, "collective_worker rank %d: %s\n", g_rank, msg.c_str());
  std::fflush(stderr);
  std::exit(1);
}

void Check(const absl::Status& s, const std::string& what) {
  if (!s.ok()) Die(absl::StrCat(what, ": ", s.ToString()));
}

// Small integers: exact in every dtype (sums of 4 ranks stay < 256 and < 2048).
double Input(int rank, size_t i) { return static_cast<double>((rank * 7 + i * 3) % 11 + rank); }

template <typename T>
T FromDouble(double v) { return static_cast<T>(v); }
template <>
gloo::float16 FromDouble<gloo::float16>(double v) { return gloo::cpu_float2half_rn(static_cast<float>(v)); }
template <typename T>
double ToDouble(T v) { return static_cast<double>(v); }
template <>
double ToDouble<gloo::float16>(gloo::float16 v) { return gloo::cpu_half2float(v); }

template <typename T>
std::vector<T> Make(int rank, size_t n, size_t offset = 0) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = FromDouble<T>(Input(rank, offset + i));
  return v;
}

template <typename T>
double Reduce(ReduceOp op, int size, size_t i) {
  double acc = Input(0, i);
  for (int r = 1; r < size; ++r) {
    double x = Input(r, i);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: acc += x; break;
      case ReduceOp::kMax: acc = std::max(acc, x); break;
      case ReduceOp::kMin: acc = std::min(acc, x); break;
    }
  }
  if (op == ReduceOp::kAvg) {
    if (std::is_integral<T>::value) return std::trunc(acc / size);
    return acc / size;
  }
  return acc;
}

template <typename T>
void Expect(const std::vector<T>& got, size_t i, double want, const std::string& what) {
  double g = ToDouble(got[i]);
  double tol = std::is_same<T, gloo::float16>::value ? 1e-2 * std::max(1.0, std::fabs(want))
                                                     : 1e-6 * std::max(1.0, std::fabs(want));
  if (std::fabs(g - want) > tol) {
    Die(absl::StrCat(what, ": element ", i, " is ", g, ", expected ", want));
  }
}

// Counts: 1 and 2 (fewer than the ranks of a node), 1000, odd counts not divisible by 2
// or 3 (several shared-memory steps for the wider dtypes), and one spanning several 4 MiB
// shared-memory chunks for every dtype; those above max_count are left out.
template <typename T>
void CheckAllReduce(Group& g, DataType type, ReduceOp op, size_t max_count = SIZE_MAX) {
  const int n = g.size(), r = g.rank();
  const std::string tn = DataTypeName(type);
  for (size_t count : {size_t{1}, size_t{2}, size_t{1000}, size_t{(1 << 18) + 3},
                       size_t{(5 << 20) + 7}}) {
    if (count > max_count) continue;
    auto buf = Make<T>(r, count);
    std::string what = absl::StrCat("AllReduce ", tn, " ", ReduceOpName(op), " count ", count);
    Check(g.AllReduce(buf.data(), count, type, op), what);
    for (size_t i = 0; i < count; ++i) Expect(buf, i, Reduce<T>(op, n, i), what);
  }
}

template <typename T>
void CheckAllReduceOps(Group& g, DataType type, size_t max_count) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
    CheckAllReduce<T>(g, type, op, max_count);
  }
}

template <typename T>
void CheckType(Group& g, DataType type) {
  const int n = g.size(), r = g.rank();
  const std::string tn = DataTypeName(type);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
    CheckAllReduce<T>(g, type, op);
    const size_t per = 301;
    auto in = Make<T>(r, per * n);
    std::vector<T> out(per);
    std::string what = absl::StrCat("ReduceScatter ", tn, " ", ReduceOpName(op));
    Check(g.ReduceScatter(in.data(), out.data(), per, type, op), what);
    for (size_t i = 0; i < per; ++i) Expect(out, i, Reduce<T>(op, n, r * per + i), what);
  }
  for (int root = 0; root < n; ++root) {
    const size_t count = 777;
    auto buf = r == root ? Make<T>(root, count) : std::vector<T>(count);
    std::string what = absl::StrCat("Broadcast ", tn, " root ", root);
    Check(g.Broadcast(buf.data(), count, type, root), what);
    for (size_t i = 0; i < count; ++i) Expect(buf, i, Input(root, i), what);
  }
  {
    const size_t per = 517;
    auto in = Make<T>(r, per);
    std::vector<T> out(per * n);
    std::string what = absl::StrCat("AllGather ", tn);
    Check(g.AllGather(in.data(), out.data(), per, type), what);
    for (int src = 0; src < n; ++src) {
      for (size_t i = 0; i < per; ++i) Expect(out, src * per + i, Input(src, i), what);
    }
  }
}

void CheckSendRecv(Group& g) {
  const int n = g.size(), r = g.rank();
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  const size_t bytes = 12345;
  std::vector<uint8_t> out(bytes), in(bytes);
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(r * 31 + i);
  // Even ranks send first, odd ranks receive first: no cycle of blocked senders.
  for (uint32_t tag : {0u, 9u}) {
    if (r % 2 == 0) {
      Check(g.Send(out.data(), bytes, right, tag), "Send");
      Check(g.Recv(in.data(), bytes, left, tag), "Recv");
    } else {
      Check(g.Recv(in.data(), bytes, left, tag), "Recv");
      Check(g.Send(out.data(), bytes, right, tag), "Send");
    }
    for (size_t i = 0; i < bytes; ++i) {
      if (in[i] != static_cast<uint8_t>(left * 31 + i)) {
        Die(absl::StrCat("Recv from ", left, " tag ", tag, ": byte ", i, " is ", in[i]));
      }
    }
  }
}

int RunCheck(GroupOptions options) {
  auto group = NewGroup(options);
  Check(group.status(), "NewGroup");
  Group& g = **group;
  // Misuse is INVALID_ARGUMENT and leaves the group usable.
  float x = 0;
  absl::Status bad = g.Broadcast(&x, 1, DataType::kFloat32, g.size());
  if (bad.code() != absl::StatusCode::kInvalidArgument) Die("bad root: " + bad.ToString());
  CheckType<float>(g, DataType::kFloat32);
  CheckType<double>(g, DataType::kFloat64);
  CheckType<gloo::float16>(g, DataType::kFloat16);
  CheckType<int32_t>(g, DataType::kInt32);
  CheckType<int64_t>(g, DataType::kInt64);
  CheckType<uint8_t>(g, DataType::kUint8);
  CheckSendRecv(g);
  Check(g.Barrier(), "Barrier");
  // A second group and a second instance of the first meet on their own keys.
  GroupOptions second = options;
  second.name = "second";
  auto g2 = NewGroup(second);
  Check(g2.status(), "NewGroup second");
  auto g3 = NewGroup(options);
  Check(g3.status(), "NewGroup again");
  for (Group* each : {g2->get(), g3->get()}) {
    int64_t v = g.rank() + 1;
    Check(each->AllReduce(&v, 1, DataType::kInt64, ReduceOp::kSum), "AllReduce on " + each->name());
    if (v != int64_t{g.size()} * (g.size() + 1) / 2) Die(absl::StrCat("sum of ranks is ", v));
  }
  std::printf("rank %d: all operations and dtypes match\n", g.rank());
  return 0;
}

// AllReduce only (every op and dtype, counts up to ~1 MiB to keep it quick): for layouts
// where only its path differs.
int RunCheckAllReduce(GroupOptions options) {
  auto group = NewGroup(options);
  Check(group.status(), "NewGroup");
  Group& g = **group;
  const size_t max_count = 1 << 20;
  CheckAllReduceOps<float>(g, DataType::kFloat32, max_count);
  CheckAllReduceOps<double>(g, DataType::kFloat64, max_count);
  CheckAllReduceOps<gloo::float16>(g, DataType::kFloat16, max_count);
  CheckAllReduceOps<int32_t>(g, DataType::kInt32, max_count);
  CheckAllReduceOps<int64_t>(g, DataType::kInt64, max_count);
  CheckAllReduceOps<uint8_t>(g, DataType::kUint8, max_count);
  Check(g.Barrier(), "Barrier");
  std::printf("rank %d: every allreduce matches\n", g.rank());
  return 0;
}

// Local rank 0 dies (SIGKILL, by its own hand) between creating the node's shared-memory
// segment and unlinking it: a thread of its own, woken by inotify when the segment
// appears in /dev/shm (before rank 0 can publish it, so before any other rank maps it
// and the barrier lets rank 0 unlink it), writes its name to DIR/segment.txt and
// raises SIGKILL. The other ranks wait until the job is stopped.
int RunDieHoldingShm(GroupOptions options, const std::string& out_dir) {
  options.algorithm = Algorithm::kShm;
  options.timeout = absl::Seconds(120);
  if (options.rank != 0) {
    (void)NewGroup(options);  // never made: rank 0 dies first
    absl::SleepFor(absl::Seconds(300));
    return 0;
  }
  char prefix[96];
  if (drover::CollectiveSegmentPrefix(drover::PidNamespaceId(),
                                      drover::CollectiveSegmentOwner(), prefix,
                                      sizeof(prefix)) < 0) {
    Die("segment prefix");
  }
  const std::string mine = absl::StrCat(prefix + 1, getpid(), "-");
  const int in = inotify_init1(IN_CLOEXEC);
  if (in < 0 || inotify_add_watch(in, "/dev/shm", IN_CREATE) < 0) Die("inotify on /dev/shm");
  std::thread([in, mine, out_dir] {
    alignas(inotify_event) char buf[4096];
    for (;;) {
      ssize_t n = read(in, buf, sizeof(buf));
      if (n <= 0) continue;
      for (char* p = buf; p < buf + n;) {
        auto* e = reinterpret_cast<inotify_event*>(p);
        if (e->len > 0 && absl::StartsWith(e->name, mine)) {
          std::ofstream(out_dir + "/segment.txt") << e->name << std::flush;
          raise(SIGKILL);
        }
        p += sizeof(inotify_event) + e->len;
      }
    }
  }).detach();
  auto group = NewGroup(options);
  Die(absl::StrCat("rank 0 outlived its segment's creation: ", group.status().ToString()));
}

int RunTimeout(GroupOptions options, const std::string& out_dir) {
  auto group = NewGroup(options);
  Check(group.status(), "NewGroup");
  Group& g = **group;
  const int silent = g.size() - 1;
  // Every rank stays alive until every rank but the silent one has reported: a rank that
  // gave up first and exited would close its connections, and its peers would see a
  // broken connection (UNAVAILABLE) instead of running into their own timeout.
  auto wait_for_reports = [&] {
    absl::Time give_up = absl::Now() + absl::Seconds(120);
    for (int r = 0; r < silent; ++r) {
      std::string path = absl::StrCat(out_dir, "/rank", r, ".txt");
      while (access(path.c_str(), F_OK) != 0) {
        if (absl::Now() > give_up) Die("the other ranks never reported");
        absl::SleepFor(absl::Milliseconds(10));
      }
    }
  };
  if (g.rank() == silent) {
    wait_for_reports();  // never joins the allreduce
    return 0;
  }
  std::vector<float> buf(1000, 1.0f);
  absl::Time start = absl::Now();
  absl::Status s = g.AllReduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
  absl::Duration took = absl::Now() - start;
  absl::Status again = g.Barrier();
  std::string report = absl::StrCat("code=", absl::StatusCodeToString(s.code()),
                                    " took_ms=", absl::ToInt64Milliseconds(took),
                                    "\nmessage=", s.message(), "\nlater=", again.ToString(), "\n");
  std::string tmp = absl::StrCat(out_dir, "/.rank", g.rank());
  std::ofstream(tmp) << report;
  std::rename(tmp.c_str(), absl::StrCat(out_dir, "/rank", g.rank(), ".txt").c_str());
  wait_for_reports();
  if (s.code() != absl::StatusCode::kDeadlineExceeded) Die("expected DEADLINE_EXCEEDED: " + s.ToString());
  if (!absl::StrContains(s.message(), "AllReduce")) Die("error does not name the op: " + s.ToString());
  if (took > options.timeout + absl::Seconds(3)) Die(absl::StrCat("took ", absl::FormatDuration(took)));
  if (again.code() != absl::StatusCode::kFailedPrecondition) Die("later call: " + again.ToString());
  return 0;
}

void WriteReport(const std::string& out_dir, int rank, const std::string& report) {
  std::string tmp = absl::StrCat(out_dir, "/.rank", rank);
  std::ofstream(tmp) << report;
  std::rename(tmp.c_str(), absl::StrCat(out_dir, "/rank", rank, ".txt").c_str());
}

int RunKill(GroupOptions options, int victim, const std::string& out_dir) {
  auto group = NewGroup(options);
  Check(group.status(), "NewGroup");
  Group& g = **group;
  std::vector<float> buf(1 << 20, 1.0f);  // 4 MiB
  std::atomic<bool> inside{false};
  for (int i = 0;; ++i) {
    if (g.rank() == victim && i == 3) {
      // Dies while this thread is inside the next allreduce (the others are in it too).
      std::thread([&] {
        while (!inside.load()) std::this_thread::yield();
        absl::SleepFor(absl::Milliseconds(1));
        WriteReport(out_dir, g.rank(),
                    absl::StrCat("killed_at_ms=", absl::ToUnixMillis(absl::Now()), "\n"));
        raise(SIGKILL);
      }).detach();
    }
    inside.store(true);
    const absl::Time start = absl::Now();
    absl::Status s = g.AllReduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
    inside.store(false);
    if (s.ok()) continue;
    const absl::Time now = absl::Now();
    absl::Status again = g.Barrier();
    WriteReport(out_dir, g.rank(),
                absl::StrCat("code=", absl::StatusCodeToString(s.code()),
                             "\nfailed_at_ms=", absl::ToUnixMillis(now),
                             "\nwaited_ms=", absl::ToInt64Milliseconds(now - start),
                             "\nmessage=", s.message(), "\nlater=", again.ToString(), "\n"));
    std::fprintf(stderr, "rank %d: %s\n", g.rank(), s.ToString().c_str());
    return 3;
  }
}

int RunBench(GroupOptions options, int mib, int iters, const std::string& out_dir) {
  auto group = NewGroup(options);
  Check(group.status(), "NewGroup");
  Group& g = **group;
  const size_t count = size_t(mib) << 18;  // floats
  std::vector<float> buf(count, 1.0f);
  auto time_it = [&](const std::function<void()>& op) {
    op();  // warm-up
    Check(g.Barrier(), "Barrier");
    absl::Time start = absl::Now();
    for (int i = 0; i < iters; ++i) op();
    return absl::ToDoubleMilliseconds(absl::Now() - start) / iters;
  };
  double group_ms = time_it([&] {
    Check(g.AllReduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum), "AllReduce");
  });
  // Raw Gloo between the same processes: its own context, rendezvous through our store.
  auto kv = internal::ConnectKv(options);
  Check(kv.status(), "kv");
  GlooKvStore store(kv->get(), MakeGroupPrefix("raw-gloo-bench", options.generation, 0));
  gloo::transport::tcp::attr attr;
  if (!options.interface.empty()) attr.iface = options.interface; else attr.hostname = "127.0.0.1";
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(g.rank(), g.size());
  ctx->connectFullMesh(store, dev);
  double raw_ms = time_it([&] {
    gloo::AllreduceOptions opts(ctx);
    opts.setOutput<float>(buf.data(), count);
    opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    gloo::allreduce(opts);
  });
  const double bytes = double(count) * 4;
  const double busbw = 2.0 * (g.size() - 1) / g.size() * bytes / (group_ms / 1e3) / 1e9;
  std::string line = absl::StrCat("BENCH allreduce_", mib, "MiB ranks=", g.size(),
                                  " group_ms=", group_ms, " raw_gloo_ms=", raw_ms,
                                  " group_busbw_GBps=", busbw, "\n");
  std::printf("rank %d: %s", g.rank(), line.c_str());
  if (!out_dir.empty() && g.rank() == 0) std::ofstream(out_dir + "/bench.txt") << line;
  return 0;
}

}  // namespace
}  // namespace drover::collective

int main(int argc, char** argv) {
  using namespace drover::collective;
  std::string mode = "check", out_dir, algorithm = "auto";
  int timeout_ms = 30000, mib = 64, iters = 10, victim = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&](const char* flag) -> const char* {
      size_t n = std::strlen(flag);
      return a.compare(0, n, flag) == 0 ? argv[i] + n : nullptr;
    };
    if (const char* v = val("--mode=")) mode = v;
    else if (const char* v = val("--out=")) out_dir = v;
    else if (const char* v = val("--timeout_ms=")) timeout_ms = std::atoi(v);
    else if (const char* v = val("--mib=")) mib = std::atoi(v);
    else if (const char* v = val("--iters=")) iters = std::atoi(v);
    else if (const char* v = val("--algorithm=")) algorithm = v;
    else if (const char* v = val("--victim=")) victim = std::atoi(v);
    else Die("unknown flag " + a);
  }
  auto options = GroupOptionsFromEnvironment(mode);
  Check(options.status(), "GroupOptionsFromEnvironment");
  g_rank = options->rank;
  options->timeout = absl::Milliseconds(timeout_ms);
  if (algorithm == "auto") options->algorithm = Algorithm::kAuto;
  else if (algorithm == "gloo") options->algorithm = Algorithm::kGloo;
  else if (algorithm == "shm") options->algorithm = Algorithm::kShm;
  else if (algorithm == "hierarchical") options->algorithm = Algorithm::kHierarchical;
  else Die("unknown algorithm " + algorithm);
  if (mode == "check") return RunCheck(*options);
  if (mode == "check_allreduce") return RunCheckAllReduce(*options);
  if (mode == "timeout") return RunTimeout(*options, out_dir);
  if (mode == "kill") return RunKill(*options, victim, out_dir);
  if (mode == "bench") return RunBench(*options, mib, iters, out_dir);
  if (mode == "die_holding_shm") return RunDieHoldingShm(*options, out_dir);
  Die("unknown mode " + mode);
}
