// The task layer's figures on a real 2-node cluster (scheduler and two agents as
// processes, started with the tests' TestCluster harness), each beside a baseline
// measured in the same run:
//
//   BENCH tasks_async        no-op tasks per second from one caller (submit N, Get all)
//                            baseline: 64-byte requests answered one at a time over a
//                            Unix socket between two processes (what a caller gets
//                            without pipelining); pipelined_echo= the same messages
//                            streamed both ways, the transport's ceiling
//   BENCH task_rtt           p50 of one no-op task's round trip (Remote + Get), same node
//                            baseline: p50 of a 64-byte Unix-socket ping-pong
//   BENCH actor_calls_async  no-op actor calls per second from one caller
//   BENCH actor_call_rtt     p50 of one actor call's round trip
//   BENCH tasks_cross_node   no-op tasks per second to another node's worker (TCP)
//                            baseline: requests one at a time over loopback TCP
//   BENCH worker_cold_start  first task on a new worker (lease, spawn, register, run)
//                            baseline: posix_spawn + exit of this binary (no Init)
//   BENCH get_task_result_1MiB  from a task returning a 1 MiB tensor to the caller's Get
//                            baseline: a 1 MiB put into the node's store
//
// Rates print as rates, times as times; ratio= is drover over baseline.
// This binary is also its own worker: agents start it in worker mode.
#include <fcntl.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "bench/bench_util.h"
#include "common/framed_socket.h"
#include "drover/drover.h"
#include "object_store/client.h"
#include "sdk/internal/runtime_internal.h"
#include "tests/util/test_cluster.h"

extern char** environ;

namespace {

void Noop() {}
int64_t Echo(int64_t x) { return x; }
int64_t Stamp() { return absl::GetCurrentTimeNanos(); }
// Diagnostics: a 1 MiB put into this worker's node store, timed here (µs, median of 20).
double WorkerPutUs() {
  std::string mib(1 << 20, 'x');
  std::vector<double> t;
  for (int i = 0; i < 20; ++i) {
    const std::string id = absl::StrCat("worker-put-", ::getpid(), "-", i);
    absl::Time s = absl::Now();
    (void)drover::internal::LocalStore()->Put(id, mib);
    t.push_back(absl::ToDoubleMicroseconds(absl::Now() - s));
    (void)drover::internal::LocalStore()->Delete(id);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
// Makes a tensor of `bytes` (as a task would: in this worker's store, since it is
// large), then returns when it returned (ns since the epoch) and the tensor.
std::pair<int64_t, drover::Tensor> Sized(int64_t bytes) {
  drover::Tensor t = *drover::Tensor::Empty(drover::DType::kUInt8, {bytes});
  return {absl::ToUnixNanos(absl::Now()), t};
}
class Sink {
 public:
  void Call() {}
  int64_t Echo(int64_t x) { return x; }
};
Sink* MakeSink() { return new Sink(); }

}  // namespace

DROVER_REMOTE(Noop, Echo, Stamp, WorkerPutUs, Sized, MakeSink, &Sink::Call, &Sink::Echo);

namespace drover::bench {
namespace {

using testing::TestCluster;


void Rate(const std::string& name, double ours, double base, double pipelined) {
  Line(absl::StrFormat("BENCH %s %.0f /s baseline=%.0f ratio=%.2f pipelined_echo=%.0f", name, ours,
                       base, ours / base, pipelined));
}
void Time(const std::string& name, double ours_us, double base_us) {
  Line(absl::StrFormat("BENCH %s %.1f us baseline=%.1f ratio=%.2f", name, ours_us, base_us,
                       ours_us / base_us));
}

// ---- baselines: an echo peer in another process ----

// `bench/tasks --echo-unix PATH` / `--echo-tcp`: echoes 64-byte messages until EOF.
int EchoServer(const std::string& unix_path) {
  int port = 0;
  absl::StatusOr<int> lfd = unix_path.empty() ? ListenTcp("127.0.0.1", &port) : ListenUnix(unix_path);
  if (!lfd.ok()) return 1;
  std::cout << port << std::endl;  // the parent reads the port (or waits for the socket)
  int fd = ::accept(*lfd, nullptr, nullptr);
  SetNoDelay(fd);
  char buf[64 * 1024];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    for (ssize_t off = 0; off < n;) {
      ssize_t w = ::write(fd, buf + off, n - off);
      if (w <= 0) return 0;
      off += w;
    }
  }
  return 0;
}

struct EchoPeer {
  pid_t pid = -1;
  int fd = -1;
  ~EchoPeer() {
    if (fd >= 0) ::close(fd);
    if (pid > 0) ::waitpid(pid, nullptr, 0);
  }
};

std::unique_ptr<EchoPeer> StartEcho(const std::string& self, bool tcp, const std::string& dir) {
  auto peer = std::make_unique<EchoPeer>();
  const std::string path = dir + "/echo.sock";
  int pipefd[2];
  if (::pipe(pipefd) != 0) Die("pipe");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
  std::vector<std::string> args = {self, "--echo-tcp"};
  if (!tcp) args = {self, "--echo-unix", path};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  if (posix_spawn(&peer->pid, self.c_str(), &fa, nullptr, argv.data(), environ) != 0) Die("spawn echo");
  posix_spawn_file_actions_destroy(&fa);
  ::close(pipefd[1]);
  char line[32] = {0};
  ssize_t n = ::read(pipefd[0], line, sizeof(line) - 1);  // the echo server is listening
  ::close(pipefd[0]);
  if (n <= 0) Die("echo peer did not start");
  absl::StatusOr<std::unique_ptr<FramedSocket>> s =
      tcp ? FramedSocket::ConnectTcp(absl::StrCat("127.0.0.1:", std::atoi(line)))
          : FramedSocket::ConnectUnix(path);
  if (!s.ok()) Die(std::string(s.status().message()));
  peer->fd = ::dup((*s)->fd());
  return peer;
}

// Round trips of 64 bytes: the p50 in µs.
double EchoRtt(int fd, int n) {
  char msg[64] = {0};
  std::vector<double> t;
  for (int i = 0; i < n; ++i) {
    absl::Time s = absl::Now();
    if (::write(fd, msg, 64) != 64) Die("echo write");
    for (size_t got = 0; got < 64;) {
      ssize_t r = ::read(fd, msg + got, 64 - got);
      if (r <= 0) Die("echo read");
      got += static_cast<size_t>(r);
    }
    t.push_back(absl::ToDoubleMicroseconds(absl::Now() - s));
  }
  return Median(t);
}

// n messages of 64 bytes pipelined (a writer thread and this reader): messages/s.
double EchoRate(int fd, int n) {
  absl::Time s = absl::Now();
  std::thread writer([fd, n] {
    std::string batch(64 * 256, 'x');
    for (int sent = 0; sent < n; sent += 256) {
      size_t len = 64 * std::min(256, n - sent);
      for (size_t off = 0; off < len;) {
        ssize_t w = ::write(fd, batch.data() + off, len - off);
        if (w <= 0) return;
        off += static_cast<size_t>(w);
      }
    }
  });
  std::vector<char> buf(64 * 1024);
  for (size_t got = 0; got < static_cast<size_t>(n) * 64;) {
    ssize_t r = ::read(fd, buf.data(), buf.size());
    if (r <= 0) Die("echo read");
    got += static_cast<size_t>(r);
  }
  writer.join();
  return n / absl::ToDoubleSeconds(absl::Now() - s);
}

// ---- drover figures ----

// n no-op tasks submitted at once, then every result read: tasks/s.
template <typename Submit>
double RateOf(int n, Submit submit) {
  absl::Time s = absl::Now();
  std::vector<ObjectRef<void>> refs;
  refs.reserve(n);
  for (int i = 0; i < n; ++i) refs.push_back(submit());
  for (const auto& r : refs) {
    absl::Status st = Get(r, absl::Minutes(2));
    if (!st.ok()) Die(absl::StrCat("a task failed: ", st.ToString()));
  }
  return n / absl::ToDoubleSeconds(absl::Now() - s);
}

// p50 of `n` sequential round trips, in µs.
template <typename Call>
double RttOf(int n, Call call) {
  std::vector<double> t;
  for (int i = 0; i < n; ++i) {
    absl::Time s = absl::Now();
    absl::Status st = Get(call(), absl::Minutes(1));
    if (!st.ok()) Die(absl::StrCat("a task failed: ", st.ToString()));
    t.push_back(absl::ToDoubleMicroseconds(absl::Now() - s));
  }
  return Median(t);
}

// posix_spawn of this binary with no arguments a worker would not act on (it exits
// before drover::Init), wait: the process start a cold worker cannot avoid.
double SpawnSelfUs(const std::string& self, int n) {
  std::vector<double> t;
  for (int i = 0; i < n; ++i) {
    std::vector<std::string> args = {self, "--spawn-only"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    absl::Time s = absl::Now();
    pid_t pid;
    if (posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv.data(), environ) != 0) Die("spawn");
    ::waitpid(pid, nullptr, 0);
    t.push_back(absl::ToDoubleMicroseconds(absl::Now() - s));
  }
  return Median(t);
}

struct Flags {
  int tasks = 100000;
  int rtt = 2000;
  int cold = 5;
  bool keep = false;
  std::vector<std::string> only;  // figure names; empty: all
  bool Wants(const std::string& name) const {
    return only.empty() || std::find(only.begin(), only.end(), name) != only.end();
  }
};

int Main(int argc, char** argv) {
  char exe[4096];
  const ssize_t exe_len = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (exe_len <= 0) Die("readlink /proc/self/exe");
  const std::string self(exe, static_cast<size_t>(exe_len));
  Flags flags;
  std::string echo_unix;
  bool echo_tcp = false, spawn_only = false;
  CLI::App app{"tasks: the task layer's figures against same-run baselines"};
  app.add_option("--tasks", flags.tasks, "tasks (and actor calls) per rate figure")->check(CLI::PositiveNumber);
  app.add_option("--rtt", flags.rtt, "round trips per latency figure")->check(CLI::PositiveNumber);
  app.add_option("--cold", flags.cold, "cold starts measured")->check(CLI::PositiveNumber);
  app.add_flag("--keep", flags.keep, "keep the cluster's directory");
  app.add_option("--only", flags.only, "run only these figures (comma-separated names)")->delimiter(',');
  app.add_option("--echo-unix", echo_unix)->group("");  // internal: the baseline's echo peer
  app.add_flag("--echo-tcp", echo_tcp)->group("");
  app.add_flag("--spawn-only", spawn_only)->group("");
  CLI11_PARSE(app, argc, argv);
  SetBenchName("tasks");
  if (spawn_only) return 0;
  if (echo_tcp || !echo_unix.empty()) return EchoServer(echo_tcp ? "" : echo_unix);
  signal(SIGPIPE, SIG_IGN);
  const std::string tmp = SetUpClusterRun(argv[0]);

  std::cout << "drover tasks benchmark: 2-node local cluster (4 CPUs each)\n" << MachineLine() << "\n" << std::flush;
  {
    testing::TestClusterOptions o;
    o.nodes = 2;
    o.cpus_per_node = 4;
    std::unique_ptr<TestCluster> c = Must(TestCluster::Start(o), "cannot start the cluster");
    ::setenv("DROVER_ADDRESS", c->address().c_str(), 1);
    ::setenv("DROVER_TOKEN_FILE", c->token_file().c_str(), 1);
    if (absl::Status s = Init(argc, argv); !s.ok()) Die(absl::StrCat("Init: ", s.ToString()));
    // This process is a driver on one of the nodes (its object store is that node's):
    // "same node" figures use that node's workers, "cross node" the other's.
    const std::string node_a = NodeId();
    const std::string node_b =
        node_a == c->agent_node_id(0) ? c->agent_node_id(1) : c->agent_node_id(0);
    std::cout << "driver job " << JobId() << " on " << node_a << "\n\n" << std::flush;

    double uds_rtt, uds_rate, tcp_rtt, tcp_rate;
    {
      auto peer = StartEcho(self, /*tcp=*/false, tmp);
      EchoRtt(peer->fd, 200);
      uds_rtt = EchoRtt(peer->fd, flags.rtt);
      uds_rate = EchoRate(peer->fd, flags.tasks);
    }
    {
      auto peer = StartEcho(self, /*tcp=*/true, tmp);
      EchoRtt(peer->fd, 200);
      tcp_rtt = EchoRtt(peer->fd, flags.rtt);
      tcp_rate = EchoRate(peer->fd, flags.tasks);
    }

    // Warm: one worker leased per function, so the figures below start no process.
    auto here = [&] { return Task(Noop).SetNodeAffinity(node_a); };
    RateOf(2000, [&] { return here().Remote(); });
    if (flags.Wants("tasks_async")) {
      Rate("tasks_async", RateOf(flags.tasks, [&] { return here().Remote(); }), 1e6 / uds_rtt, uds_rate);
    }
    if (flags.Wants("task_rtt")) {
      Time("task_rtt", RttOf(flags.rtt, [&] { return here().Remote(); }), uds_rtt);
      // Where the time goes: caller to the task running, and back.
      std::vector<double> there_us, back_us;
      for (int i = 0; i < flags.rtt; ++i) {
        const int64_t t0 = absl::GetCurrentTimeNanos();
        auto v = Get(Task(Stamp).SetNodeAffinity(node_a).Remote());
        const int64_t t2 = absl::GetCurrentTimeNanos();
        if (!v.ok()) Die(v.status().ToString());
        there_us.push_back((*v - t0) / 1e3);
        back_us.push_back((t2 - *v) / 1e3);
      }
      std::cout << absl::StrFormat("  (task_rtt: %.1f us to the task, %.1f us back, p50)\n",
                                   Median(there_us), Median(back_us));
    }

    if (flags.Wants("actor_calls_async") || flags.Wants("actor_call_rtt")) {
      ActorHandle<Sink> sink = Actor(MakeSink).SetNodeAffinity(node_a).Remote();
      if (absl::Status s = sink.WaitReady(absl::Minutes(1)); !s.ok()) Die(s.ToString());
      RateOf(2000, [&] { return sink.Task(&Sink::Call).Remote(); });
      if (flags.Wants("actor_calls_async")) {
        Rate("actor_calls_async", RateOf(flags.tasks, [&] { return sink.Task(&Sink::Call).Remote(); }),
             1e6 / uds_rtt, uds_rate);
      }
      if (flags.Wants("actor_call_rtt")) {
        Time("actor_call_rtt", RttOf(flags.rtt, [&] { return sink.Task(&Sink::Call).Remote(); }), uds_rtt);
      }
    }

    if (flags.Wants("tasks_cross_node")) {
      auto there = [&] { return Task(Noop).SetNodeAffinity(node_b); };
      RateOf(2000, [&] { return there().Remote(); });
      Rate("tasks_cross_node", RateOf(flags.tasks, [&] { return there().Remote(); }), 1e6 / tcp_rtt,
           tcp_rate);
    }
    if (!flags.Wants("worker_cold_start") && !flags.Wants("get_task_result_1MiB")) {
      Shutdown();
      return 0;
    }

    // Cold starts: each on a fresh shape (a new scheduling key and warm pool), so a new
    // worker process is started for it.
    std::vector<double> cold;
    for (int i = 0; i < flags.cold; ++i) {
      Resources r;
      r.cpus = 0.01 * (i + 1);
      absl::Time s = absl::Now();
      absl::Status st = Get(Task(Noop).SetNodeAffinity(node_a).SetResources(r).Remote(), absl::Minutes(1));
      if (!st.ok()) Die(st.ToString());
      cold.push_back(absl::ToDoubleMicroseconds(absl::Now() - s));
    }
    const double spawn = SpawnSelfUs(self, 20);
    Line(absl::StrFormat("BENCH worker_cold_start %.2f ms baseline=%.2f ratio=%.2f over=%.2f ms",
                         Median(cold) / 1000, spawn / 1000, Median(cold) / spawn,
                         (Median(cold) - spawn) / 1000));

    // A task returning 1 MiB: from its return to the caller's Get, against a 1 MiB put.
    auto result_us = [&](int64_t bytes) {
      std::vector<double> got;
      for (int i = 0; i < 50; ++i) {
        auto ref = Task(Sized).SetNodeAffinity(node_a).Remote(bytes);
        auto v = Get(ref, absl::Minutes(1));
        const int64_t done = absl::ToUnixNanos(absl::Now());
        if (!v.ok()) Die(v.status().ToString());
        if (i >= 5) got.push_back((done - v->first) / 1000.0);
      }
      return Median(got);
    };
    const double small_us = result_us(64);
    const double mib_us = result_us(1 << 20);
    std::vector<double> put;
    {
      object_store::Client* store = internal::LocalStore();
      if (store == nullptr) Die("this driver found no local object store");
      std::string mib(1 << 20, 'x');
      for (int i = 0; i < 50; ++i) {
        const std::string id = absl::StrCat("bench-put-", i);
        absl::Time s = absl::Now();
        if (absl::Status st = store->Put(id, mib); !st.ok()) Die(st.ToString());
        if (i >= 5) put.push_back(absl::ToDoubleMicroseconds(absl::Now() - s));
        store->Delete(id).IgnoreError();
      }
    }
    Time("get_task_result_1MiB", mib_us, Median(put));
    std::cout << absl::StrFormat("  (a 64-byte tensor the same way: %.1f us)\n", small_us);
    auto wput = Get(Task(WorkerPutUs).SetNodeAffinity(node_a).Remote());
    std::cout << absl::StrFormat("  (a 1 MiB put inside a worker: %.1f us)\n", wput.ok() ? *wput : -1.0);
    Shutdown();
  }
  FinishClusterRun(tmp, flags.keep);
  return 0;
}

}  // namespace
}  // namespace drover::bench

int main(int argc, char** argv) {
  // A worker started by an agent serves tasks here and never returns.
  if (drover::RunningAsWorker()) drover::Init(argc, argv).IgnoreError();
  return drover::bench::Main(argc, argv);
}
