// object_store: the object store's figures, each beside a baseline taken in the same run.
//
//   bazel run -c opt //bench:object_store [-- --quick] [-- --only NAME[,NAME]]
//
// Starts a real drover-object-store (3 GiB arena, --prefault) and measures, after
// warm-up, the median of several runs per figure, interleaved run by run with the
// baseline:
//   put_1MiB, put_64MiB, put_1GiB   put bandwidth (GB/s) of a float32 tensor object
//                                   (Client::Put with the DRTN header as metadata: the
//                                   data memcpy'd into the arena, sealed and visible to
//                                   other clients when it returns; 1 MiB goes through the
//                                   client's lease, larger ones Create + Seal) vs memcpy
//                                   of the same bytes into touched memory
//   put_1MiB_create_seal            the same 1 MiB put as Create + memcpy + Seal (two
//                                   round trips: the path before leases), same runs
//   get_1KiB, get_1GiB              Get + read of the first byte + release (µs) vs one
//                                   64-byte round trip on a Unix socket between two
//                                   processes (this one and an echo helper)
//   small_put_get                   put+get pairs of 1 KiB objects per second (batched:
//                                   PutMany + GetMany + ReleaseMany) vs synchronous
//                                   64-byte Unix-socket round trips per second
//   small_put_get_sync              the same one pair at a time (Put, Get, release)
//   pull_1GiB                       ObjectTransfer::Fetch of 1 GiB between two node
//                                   processes (bench/object_store_node: each a
//                                   pre-touched heap LocalObjects that reuses freed
//                                   space; directory in a real drover-scheduler) vs raw loopback TCP of 1 GiB
//                                   between the same two processes (GB/s, receiver side)
//   pull_1GiB_grpc                  the same pull with the raw-TCP data path off (the
//                                   data in gRPC messages: the fallback path)
//   pull_1GiB_tls                   the pull in a TLS cluster (a second scheduler with
//                                   --tls-dir, two nodes with certificates from it: the
//                                   raw path is a TLS connection) vs pull_1GiB, same runs
//   tls_tcp_1GiB                    1 GiB over one TLS connection between the TLS
//                                   nodes (handshake included) vs raw loopback TCP
// Each figure prints one line
//   BENCH <name> <value> <unit> baseline=<value> ratio=<ours/baseline>
// Everything it starts is stopped before it exits.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/bench_util.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "object_store/client.h"
#include "object_store/tensor.h"

extern char** environ;

namespace drover::bench {
namespace {

namespace os = object_store;

constexpr uint64_t kKiB = 1024, kMiB = kKiB * 1024, kGiB = kMiB * 1024;

struct Flags {
  bool quick = false;
  std::set<std::string> only;
  bool Want(const std::string& name) const { return only.empty() || only.count(name) > 0; }
};

[[noreturn]] void Die(const std::string& msg) {
  std::cerr << "object_store bench: " << msg << std::endl;
  std::exit(1);
}

std::string runfiles;

void SetUpRunfiles(const char* argv0) {
  std::string root = FindRunfilesRoot(argv0, "object_store");
  if (root.empty()) Die("cannot find the runfiles; run it with `bazel run -c opt //bench:object_store`");
  runfiles = root + "/drover/";
}

double Sec(absl::Duration d) { return absl::ToDoubleSeconds(d); }

// A child process with its stdin and stdout on pipes (line protocol), stderr inherited.
class Child {
 public:
  explicit Child(const std::vector<std::string>& args) {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) Die("pipe");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) Die(absl::StrCat("posix_spawn ", args[0], ": ", std::strerror(rc)));
    close(in[0]);
    close(out[1]);
    to_ = in[1];
    from_ = fdopen(out[0], "r");
    name_ = args[0];
  }
  ~Child() { Stop(); }

  std::string ReadLine() {
    char* line = nullptr;
    size_t cap = 0;
    ssize_t n = getline(&line, &cap, from_);
    if (n <= 0) {
      free(line);
      Die(name_ + " exited unexpectedly");
    }
    std::string s(line, n);
    free(line);
    while (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  // Sends one command and returns the answer after "ok " ("" for a bare "ok"); dies
  // on "err".
  std::string Call(const std::string& cmd) {
    std::string line = cmd + "\n";
    if (write(to_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      Die("write to " + name_);
    }
    std::string reply = ReadLine();
    if (reply == "ok") return "";
    if (reply.rfind("ok ", 0) == 0) return reply.substr(3);
    Die(absl::StrCat(name_, ": '", cmd, "' -> ", reply));
  }
  void Stop() {
    if (pid_ <= 0) return;
    if (to_ >= 0) close(to_);
    to_ = -1;
    kill(pid_, SIGTERM);
    int st;
    while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
    if (from_) fclose(from_);
    from_ = nullptr;
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  int to_ = -1;
  FILE* from_ = nullptr;
  std::string name_;
};

// A started drover-object-store.
std::unique_ptr<Child> StartStore(const std::string& socket, uint64_t capacity) {
  auto c = std::make_unique<Child>(std::vector<std::string>{
      runfiles + "object_store/drover-object-store", "--socket", socket, "--capacity",
      absl::StrCat(capacity), "--prefault"});
  absl::Time deadline = absl::Now() + absl::Seconds(120);
  while (absl::Now() < deadline) {
    if (os::Client::Connect(socket).ok()) return c;
    absl::SleepFor(absl::Milliseconds(20));
  }
  Die("the object store at " + socket + " did not start");
}

// One raw 64-byte round trip on a connected Unix socket.
void EchoRoundTrip(int fd) {
  char buf[64] = {1};
  if (write(fd, buf, sizeof(buf)) != 64) Die("echo write");
  size_t got = 0;
  while (got < sizeof(buf)) {
    ssize_t n = read(fd, buf + got, sizeof(buf) - got);
    if (n <= 0) Die("echo read");
    got += static_cast<size_t>(n);
  }
}

int ConnectUnix(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", path.c_str());
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) Die("connect " + path);
  return fd;
}

void Report(std::vector<std::string>* lines, const std::string& name, double ours,
            const std::string& unit, double base, const std::vector<double>& ours_v,
            const std::vector<double>& base_v) {
  std::string line = absl::StrFormat("BENCH %s %.3g %s baseline=%.3g ratio=%.2f", name, ours,
                                     unit, base, base > 0 ? ours / base : 0);
  std::cout << line << "\n"
            << absl::StrFormat("  (%s: %d runs, p10 %.3g p90 %.3g; baseline p10 %.3g p90 %.3g)",
                               name, ours_v.size(), Percentile(ours_v, 0.1),
                               Percentile(ours_v, 0.9), Percentile(base_v, 0.1),
                               Percentile(base_v, 0.9))
            << std::endl;
  lines->push_back(line);
}

void Check(const absl::Status& s, const std::string& what) {
  if (!s.ok()) Die(what + ": " + s.ToString());
}

// --- put -------------------------------------------------------------------------

// `size` bytes at a 64-byte aligned address.
class AlignedBytes {
 public:
  explicit AlignedBytes(uint64_t size)
      : p_(static_cast<uint8_t*>(std::aligned_alloc(64, (size + 63) / 64 * 64))) {
    if (p_ == nullptr) Die(absl::StrCat("cannot allocate ", size, " bytes"));
  }
  ~AlignedBytes() { std::free(p_); }
  AlignedBytes(const AlignedBytes&) = delete;
  AlignedBytes& operator=(const AlignedBytes&) = delete;
  uint8_t* get() const { return p_; }
  uint8_t& operator[](uint64_t i) const { return p_[i]; }

 private:
  uint8_t* p_;
};

void BenchPut(os::Client& store, os::Client& reader, const std::string& name, uint64_t size,
              int runs, bool with_create_seal, std::vector<std::string>* lines) {
  // Source and memcpy destination: allocated and touched once.
  // 64-byte aligned, as tensor allocators give (PyTorch's CPU allocator, Eigen, ours):
  // the arena's data is 64-aligned too, so the put and the baseline copy between the
  // same alignments. (malloc's 16-mod-64 source made the copy into the arena ~7%
  // slower than into a second malloc'd buffer: a mutual-alignment artifact.)
  AlignedBytes src(size);
  AlignedBytes dst(size);
  for (uint64_t i = 0; i < size; i += 4096) src[i] = static_cast<uint8_t>(i >> 12);
  std::memset(dst.get(), 0, size);
  std::memset(src.get(), 1, size);
  auto header = os::EncodeTensorHeader(
      os::ContiguousMeta(os::DType::kFloat32, {static_cast<int64_t>(size / 4)}));
  if (!header.ok()) Die(header.status().ToString());

  const absl::Span<const uint8_t> data(src.get(), size);
  auto put = [&]() -> double {
    os::ObjectId id = os::Client::RandomId();
    absl::Time t0 = absl::Now();
    Check(store.Put(id, data, *header), "Put");
    double s = Sec(absl::Now() - t0);
    Check(store.Delete(id), "Delete");
    return size / s / 1e9;
  };
  // What is measured is a whole put: once Put returns, another client gets the object
  // (no wait) with its header and bytes.
  {
    os::ObjectId id = os::Client::RandomId();
    Check(store.Put(id, data, *header), "Put");
    auto ref = reader.Get(id, absl::ZeroDuration());
    if (!ref.ok()) Die("Get by another client right after Put: " + ref.status().ToString());
    if (ref->metadata_view() != *header || ref->data().size() != size ||
        std::memcmp(ref->data().data(), src.get(), size) != 0) {
      Die("the object another client got differs from what was put");
    }
    ref->Reset();
    Check(store.Delete(id), "Delete");
  }
  auto copy = [&]() -> double {
    absl::Time t0 = absl::Now();
    std::memcpy(dst.get(), src.get(), size);
    asm volatile("" : : "r"(dst.get()) : "memory");
    return size / Sec(absl::Now() - t0) / 1e9;
  };
  // The two-round-trip path (what Put did before leases, and what Client::Create +
  // Seal still do): a reference point in the same run.
  auto create_seal = [&]() -> double {
    os::ObjectId id = os::Client::RandomId();
    absl::Time t0 = absl::Now();
    auto obj = store.Create(id, size, *header);
    if (!obj.ok()) Die("Create: " + obj.status().ToString());
    std::memcpy(obj->data.data(), src.get(), size);
    Check(store.Seal(id), "Seal");
    double s = Sec(absl::Now() - t0);
    Check(store.Delete(id), "Delete");
    return size / s / 1e9;
  };
  for (int i = 0; i < 2; ++i) {
    put();
    copy();
    if (with_create_seal) create_seal();
  }
  std::vector<double> ours, base, cs;
  for (int i = 0; i < runs; ++i) {
    base.push_back(copy());
    ours.push_back(put());
    if (with_create_seal) cs.push_back(create_seal());
  }
  Report(lines, name, Median(ours), "GB/s", Median(base), ours, base);
  if (with_create_seal) {
    Report(lines, name + "_create_seal", Median(cs), "GB/s", Median(base), cs, base);
  }
}

// --- get -------------------------------------------------------------------------

void BenchGet(os::Client& store, int echo_fd, const std::string& name, uint64_t size, int runs,
              std::vector<std::string>* lines) {
  os::ObjectId id = os::Client::RandomId();
  {
    auto obj = store.Create(id, size, "get-bench");
    if (!obj.ok()) Die("Create: " + obj.status().ToString());
    std::memset(obj->data.data(), 7, size);
    Check(store.Seal(id), "Seal");
  }
  auto get = [&]() -> double {
    absl::Time t0 = absl::Now();
    auto ref = store.Get(id, absl::ZeroDuration());
    if (!ref.ok()) Die("Get: " + ref.status().ToString());
    volatile uint8_t first = ref->data()[0];
    (void)first;
    ref->Reset();
    return absl::ToDoubleMicroseconds(absl::Now() - t0);
  };
  auto rt = [&]() -> double {
    absl::Time t0 = absl::Now();
    EchoRoundTrip(echo_fd);
    return absl::ToDoubleMicroseconds(absl::Now() - t0);
  };
  for (int i = 0; i < 200; ++i) {
    get();
    rt();
  }
  std::vector<double> ours, base;
  for (int i = 0; i < runs; ++i) {
    base.push_back(rt());
    ours.push_back(get());
  }
  Check(store.Delete(id), "Delete");
  Report(lines, name, Median(ours), "us", Median(base), ours, base);
}

// --- small put+get ---------------------------------------------------------------

// Pairs per second of 1 KiB objects: one pair at a time (Put, Get, release).
double SmallPairsSync(os::Client& store, int n) {
  std::string data(kKiB, 'x');
  std::vector<os::ObjectId> ids(n);
  for (auto& id : ids) id = os::Client::RandomId();
  absl::Time t0 = absl::Now();
  for (const auto& id : ids) {
    Check(store.Put(id, data), "Put");
    auto ref = store.Get(id, absl::ZeroDuration());
    if (!ref.ok()) Die("Get: " + ref.status().ToString());
    volatile uint8_t first = ref->data()[0];
    (void)first;
  }
  double rate = n / Sec(absl::Now() - t0);
  for (const auto& id : ids) Check(store.Delete(id), "Delete");
  return rate;
}

// The same, batched: PutMany of `batch` objects (one write, replies matched by request
// id), one Get of all their ids, a read of each, and one Release of all the refs.
double SmallPairsBatched(os::Client& store, int n, int batch) {
  std::string data(kKiB, 'x');
  const absl::Span<const uint8_t> span(reinterpret_cast<const uint8_t*>(data.data()),
                                       data.size());
  std::vector<std::vector<os::ObjectId>> ids(n / batch);
  for (auto& b : ids) {
    for (int i = 0; i < batch; ++i) b.push_back(os::Client::RandomId());
  }
  const std::vector<absl::Span<const uint8_t>> spans(batch, span);
  absl::Time t0 = absl::Now();
  for (const auto& b : ids) {
    Check(store.PutMany(b, spans), "PutMany");
    auto refs = store.Get(b, absl::ZeroDuration());
    if (!refs.ok()) Die("Get: " + refs.status().ToString());
    for (const auto& r : *refs) {
      volatile uint8_t first = r.data()[0];
      (void)first;
    }
    store.Release(&*refs);
  }
  double rate = (n / batch) * batch / Sec(absl::Now() - t0);
  for (const auto& b : ids) {
    for (const auto& id : b) Check(store.Delete(id), "Delete");
  }
  return rate;
}

double EchoRate(int echo_fd, int n) {
  absl::Time t0 = absl::Now();
  for (int i = 0; i < n; ++i) EchoRoundTrip(echo_fd);
  return n / Sec(absl::Now() - t0);
}

void BenchSmall(os::Client& store, int echo_fd, int runs, std::vector<std::string>* lines) {
  const int n = 4096;
  auto run = [&](const std::string& name, std::function<double()> ours_fn) {
    ours_fn();
    EchoRate(echo_fd, n);
    std::vector<double> ours, base;
    for (int i = 0; i < runs; ++i) {
      base.push_back(EchoRate(echo_fd, n));
      ours.push_back(ours_fn());
    }
    Report(lines, name, Median(ours), "pairs/s", Median(base), ours, base);
  };
  run("small_put_get", [&] { return SmallPairsBatched(store, n, 256); });
  run("small_put_get_sync", [&] { return SmallPairsSync(store, n); });
}

// --- cross-node pull -------------------------------------------------------------

// A drover-scheduler for the pull figures (nodes send no heartbeats: long timeout), in
// `dir`; with `tls`, a TLS one whose CA it makes there. Sets its address (and CA file).
std::unique_ptr<Child> StartScheduler(const std::string& dir, bool tls, std::string* address,
                                      std::string* ca) {
  std::filesystem::create_directories(dir);
  const std::string ready = dir + "/scheduler.ready";
  std::vector<std::string> argv = {runfiles + "scheduler/drover-scheduler", "--bind",
                                   "127.0.0.1", "--port", "0", "--token-file", dir + "/token",
                                   "--ready-file", ready, "--node-timeout-ms", "3600000"};
  if (tls) argv.insert(argv.end(), {"--tls-dir", dir + "/tls"});
  auto child = std::make_unique<Child>(argv);
  auto field = [](const std::string& json, const std::string& key) {
    auto k = json.find("\"" + key + "\"");
    if (k == std::string::npos) return std::string();
    auto q1 = json.find('"', json.find(':', k) + 1);
    auto q2 = json.find('"', q1 + 1);
    return json.substr(q1 + 1, q2 - q1 - 1);
  };
  for (absl::Time d = absl::Now() + absl::Seconds(30); address->empty() && absl::Now() < d;) {
    std::ifstream in(ready);
    std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    *address = field(json, "address");
    *ca = field(json, "tls_ca");
    if (address->empty()) absl::SleepFor(absl::Milliseconds(20));
  }
  if (address->empty()) Die("drover-scheduler did not start");
  return child;
}

void BenchPull(const std::string& tmp, int runs, bool tls, std::vector<std::string>* lines) {
  const uint64_t size = kGiB;
  std::string address, ca, tls_address, tls_ca;
  auto scheduler = StartScheduler(tmp + "/plain", false, &address, &ca);
  std::unique_ptr<Child> tls_scheduler;
  if (tls) tls_scheduler = StartScheduler(tmp + "/tls", true, &tls_address, &tls_ca);

  auto node = [&](uint64_t pool, bool raw_tcp, bool secure) {
    std::vector<std::string> argv = {
        runfiles + "bench/object_store_node", "--pool-bytes", absl::StrCat(pool),
        "--scheduler", secure ? tls_address : address, "--token-file",
        tmp + (secure ? "/tls/token" : "/plain/token"), "--raw-tcp", raw_tcp ? "1" : "0"};
    if (secure) argv.insert(argv.end(), {"--tls-ca", tls_ca});
    auto c = std::make_unique<Child>(argv);
    std::string ready_line = c->ReadLine();
    if (ready_line.rfind("ready ", 0) != 0) Die("node helper: " + ready_line);
    return c;
  };
  auto a = node(size + kMiB, true, false);
  auto b = node(2 * size + kMiB, true, false);
  // A puller with the raw-TCP data path off: the data in gRPC messages (the fallback).
  auto g = node(2 * size + kMiB, false, false);
  // The TLS cluster's two nodes.
  std::unique_ptr<Child> ta, tb;
  if (tls) {
    ta = node(size + kMiB, true, true);
    tb = node(2 * size + kMiB, true, true);
  }
  a->Call(absl::StrCat("put big ", size));
  const std::string sum = a->Call("sum big");
  if (tls) ta->Call(absl::StrCat("put big ", size));

  auto pull_by = [&](Child* puller) -> double {
    std::vector<std::string> r = absl::StrSplit(puller->Call("fetch big"), ' ');
    double sec = std::stod(r.at(0));
    puller->Call("drop big");
    return size / sec / 1e9;
  };
  auto tcp_between = [&](Child* from, Child* to) -> double {
    std::string port = from->Call("tcp_serve big");
    double sec = std::stod(to->Call(absl::StrCat("tcp_recv ", port, " ", size)));
    return size / sec / 1e9;
  };
  auto tcp = [&] { return tcp_between(a.get(), b.get()); };
  // Warm-up, and a check that each pulled copy is the same bytes.
  std::vector<Child*> pullers = {b.get(), g.get()};
  if (tls) pullers.push_back(tb.get());
  for (Child* p : pullers) {
    p->Call("fetch big");
    if (p->Call("sum big") != sum) Die("a pulled copy differs from the original");
    p->Call("drop big");
  }
  tcp();
  if (tls) tcp_between(ta.get(), tb.get());
  std::vector<double> ours, grpc_only, base, base_g, ours_tls, tcp_tls, base_t;
  for (int i = 0; i < runs; ++i) {
    base.push_back(tcp());
    ours.push_back(pull_by(b.get()));
    base_g.push_back(tcp());
    grpc_only.push_back(pull_by(g.get()));
    if (tls) {
      ours_tls.push_back(pull_by(tb.get()));
      base_t.push_back(tcp());
      tcp_tls.push_back(tcp_between(ta.get(), tb.get()));
    }
  }
  // Every pull of `b` and of the TLS puller took the raw path (no fallback to gRPC).
  for (Child* p : {b.get(), tb.get()}) {
    if (p == nullptr) continue;
    const std::vector<std::string> st = absl::StrSplit(p->Call("stats"), ' ');
    if (std::stoi(st.at(0)) != runs + 1) {
      Die(absl::StrCat("a puller's pulls did not all take the raw path: ", st.at(0), " of ",
                       runs + 1));
    }
  }
  Report(lines, "pull_1GiB", Median(ours), "GB/s", Median(base), ours, base);
  Report(lines, "pull_1GiB_grpc", Median(grpc_only), "GB/s", Median(base_g), grpc_only, base_g);
  if (tls) {
    Report(lines, "pull_1GiB_tls", Median(ours_tls), "GB/s", Median(ours), ours_tls, ours);
    Report(lines, "tls_tcp_1GiB", Median(tcp_tls), "GB/s", Median(base_t), tcp_tls, base_t);
  }
}

int Main(int argc, char** argv) {
  Flags flags;
  CLI::App app{"object_store: the object store's figures beside their baselines"};
  app.add_flag("--quick", flags.quick, "Fewer runs per figure");
  std::string only;
  app.add_option("--only", only, "Comma-separated figures to measure (default: all)");
  CLI11_PARSE(app, argc, argv);
  for (auto s : absl::StrSplit(only, ',', absl::SkipEmpty())) flags.only.insert(std::string(s));
  signal(SIGPIPE, SIG_IGN);
  SetUpRunfiles(argv[0]);
  char tmpl[] = "/tmp/drover-bench-os-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) Die("mkdtemp");
  const std::string tmp = tmpl;

  std::cout << "drover object store benchmark\n"
            << "machine: " << ::sysconf(_SC_NPROCESSORS_ONLN) << " CPUs, " << CpuModel() << ", "
            << (static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE) >> 20)
            << " MiB RAM\n"
            << std::flush;
  std::vector<std::string> lines;
  const int q = flags.quick ? 3 : 1;
  {
    auto store_proc = StartStore(tmp + "/store.sock", 3 * kGiB);
    auto client = os::Client::Connect(tmp + "/store.sock");
    if (!client.ok()) Die(client.status().ToString());
    os::Client& store = **client;
    Child echo({runfiles + "bench/object_store_node", "--echo", tmp + "/echo.sock"});
    echo.ReadLine();
    int echo_fd = ConnectUnix(tmp + "/echo.sock");

    auto reader = os::Client::Connect(tmp + "/store.sock");
    if (!reader.ok()) Die(reader.status().ToString());
    if (flags.Want("put_1MiB")) {
      BenchPut(store, **reader, "put_1MiB", kMiB, 101 / q, /*with_create_seal=*/true, &lines);
    }
    if (flags.Want("put_64MiB")) {
      BenchPut(store, **reader, "put_64MiB", 64 * kMiB, 21 / q, false, &lines);
    }
    if (flags.Want("put_1GiB")) BenchPut(store, **reader, "put_1GiB", kGiB, 7 / q, false, &lines);
    if (flags.Want("get_1KiB")) BenchGet(store, echo_fd, "get_1KiB", kKiB, 5001 / q, &lines);
    if (flags.Want("get_1GiB")) BenchGet(store, echo_fd, "get_1GiB", kGiB, 5001 / q, &lines);
    if (flags.Want("small_put_get")) BenchSmall(store, echo_fd, 9 / q, &lines);
    close(echo_fd);
  }
  const bool tls = flags.Want("pull_1GiB_tls") || flags.Want("tls_tcp_1GiB");
  if (tls || flags.Want("pull_1GiB") || flags.Want("pull_1GiB_grpc")) {
    BenchPull(tmp, flags.quick ? 3 : 5, tls, &lines);
  }

  std::cout << "\nsummary:\n";
  for (const auto& l : lines) std::cout << l << "\n";
  std::error_code ec;
  std::filesystem::remove_all(tmp, ec);
  return 0;
}

}  // namespace
}  // namespace drover::bench

int main(int argc, char** argv) { return drover::bench::Main(argc, argv); }
