// A task program for tests/tasks_test.cc: its own driver and, started by the agents in
// worker mode, its own workers. `task_program SCENARIO [ARGS]` runs one scenario as a
// driver and prints "key=value" lines the test checks; exit code 0 if the scenario's
// own checks passed.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "tests/util/program_output.h"
#include "drover/task.h"

namespace {

int64_t Sum(std::vector<int64_t> xs) { return std::accumulate(xs.begin(), xs.end(), int64_t{0}); }
int64_t Add(int64_t a, int64_t b) { return a + b; }
std::string Greet(std::string name) { return "hello " + name; }
void Nothing() {}
std::string WhereAmI() {
  const char* node = std::getenv("DROVER_NODE_ID");
  return absl::StrCat(node == nullptr ? "?" : node, " pid=", ::getpid(), " gpus=",
                      std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "");
}
std::vector<uint8_t> Blob(int64_t n, int seed) {
  std::vector<uint8_t> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>((i * 31 + seed) & 0xff);
  return v;
}
int64_t Checksum(std::vector<uint8_t> v) {
  int64_t s = 0;
  for (uint8_t b : v) s = s * 131 + b;
  return s;
}
int64_t Throws(int64_t x) {
  if (x > 0) throw std::runtime_error(absl::StrCat("bad input ", x));
  return x;
}
absl::StatusOr<int64_t> Fails(int64_t x) {
  return absl::InvalidArgumentError(absl::StrCat("refusing ", x));
}
int64_t Crashes(int64_t x) {
  std::cerr << "about to crash on " << x << std::endl;
  volatile int* p = nullptr;
  return *p + x;
}
// Dies by SIGKILL on its first attempt (the marker file is absent), then succeeds: a
// worker killed mid-task.
int64_t DiesOnce(std::string marker, int64_t x) {
  if (::access(marker.c_str(), F_OK) != 0) {
    std::ofstream(marker) << ::getpid();
    ::kill(::getpid(), SIGKILL);
  }
  return x * 2;
}
std::string WorkerExe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "?";
}
// Multiplies a float32 tensor by k (a new tensor; the input stays as it was).
absl::StatusOr<drover::Tensor> Scale(drover::Tensor t, float k) {
  auto in = t.span<float>();
  if (!in.ok()) return in.status();
  auto out = drover::Tensor::Empty(drover::DType::kFloat32, t.shape());
  if (!out.ok()) return out.status();
  auto o = out->mutable_span<float>();
  for (size_t i = 0; i < in->size(); ++i) (*o)[i] = (*in)[i] * k;
  return *out;
}
// Where a tensor argument was read from: the store (zero copy) or the task's message.
std::string TensorSource(drover::Tensor t) { return t.in_store() ? "store" : "inline"; }
// The worker that runs it, as "w-3@node-1".
std::string WorkerOf() {
  const char* w = std::getenv("DROVER_WORKER_ID");
  const char* node = std::getenv("DROVER_NODE_ID");
  return absl::StrCat(w == nullptr ? "?" : w, "@", node == nullptr ? "?" : node);
}
int64_t Sleeps(int64_t ms) {
  absl::SleepFor(absl::Milliseconds(ms));
  return ms;
}

// An actor whose results live where it runs.
class Holder {
 public:
  std::vector<uint8_t> Big(int64_t n) { return Blob(n, 3); }
};
Holder* MakeHolder() { return new Holder(); }

class Counter {
 public:
  explicit Counter(int64_t start) : value_(start) {}
  int64_t Add(int64_t x) {
    value_ += x;
    return value_;
  }
  std::vector<int64_t> Log(int64_t x) {
    log_.push_back(x);
    return log_;
  }
  int64_t Value() const { return value_; }
  int64_t Die(int64_t code) {
    std::cerr << "counter exiting with " << code << std::endl;
    std::_Exit(static_cast<int>(code));
  }
  std::string Pid() const { return std::to_string(::getpid()); }
  std::string Where() const { return WorkerOf(); }

 private:
  int64_t value_;
  std::vector<int64_t> log_;
};
Counter* MakeCounter(int64_t start) { return new Counter(start); }

// A task that calls an actor whose handle it was given (from inside a worker).
int64_t AddThroughHandle(drover::ActorHandle<Counter> c, int64_t x) {
  auto v = drover::Get(c.Task(&Counter::Add).Remote(x), absl::Seconds(60));
  return v.ok() ? *v : -1;
}
// Where a value was read (locality: a task goes to the node holding its big argument).
std::string NodeOf(std::vector<uint8_t> v) {
  const char* node = std::getenv("DROVER_NODE_ID");
  return absl::StrCat(node == nullptr ? "?" : node, " bytes=", v.size());
}
Counter* MakeBrokenCounter(int64_t) { throw std::runtime_error("no counter today"); }

}  // namespace

DROVER_REMOTE(Sum, Add, Greet, Nothing, WhereAmI, Blob, Checksum, Throws, Fails, Crashes, DiesOnce,
              Sleeps, WorkerExe, Scale, TensorSource, MakeHolder, &Holder::Big, MakeCounter, MakeBrokenCounter, &Counter::Add, &Counter::Log, &Counter::Value,
              &Counter::Die, &Counter::Pid, AddThroughHandle, NodeOf, WorkerOf, &Counter::Where);

namespace {

using drover::testing::Expect;
using drover::testing::Print;

// task_program_other is this file built with another value: another binary, another
// build id (tests of workers that refuse a build that is not their driver's).
#ifndef DROVER_TASK_PROGRAM_VARIANT
#define DROVER_TASK_PROGRAM_VARIANT 1
#endif
[[maybe_unused]] volatile int variant = DROVER_TASK_PROGRAM_VARIANT;

std::string Err(const absl::Status& s) { return std::string(s.message()); }

int Basic() {
  const absl::Time t0 = absl::Now();
  auto phase = [&](const char* name) {
    std::cerr << name << " at " << absl::ToInt64Milliseconds(absl::Now() - t0) << " ms" << std::endl;
  };
  auto a = drover::Task(Add).Remote(int64_t{2}, int64_t{3});
  auto b = drover::Task(Add).Remote(a, int64_t{10});  // a ref as an argument
  auto s = drover::Task(Sum).Remote(std::vector<int64_t>{1, 2, 3, 4});
  auto g = drover::Task(Greet).Remote("drover");
  auto n = drover::Task(Nothing).Remote();
  absl::StatusOr<int64_t> bv = drover::Get(b);
  Expect(bv.ok() && *bv == 15, "Add(Add(2,3),10)", bv.ok() ? std::to_string(*bv) : Err(bv.status()));
  absl::StatusOr<int64_t> sv = drover::Get(s);
  Expect(sv.ok() && *sv == 10, "Sum", sv.ok() ? std::to_string(*sv) : Err(sv.status()));
  absl::StatusOr<std::string> gv = drover::Get(g);
  Expect(gv.ok() && *gv == "hello drover", "Greet", gv.ok() ? *gv : Err(gv.status()));
  absl::Status nv = drover::Get(n);
  Expect(nv.ok(), "Nothing", Err(nv));
  phase("first tasks");
  // Put, and a put value as an argument.
  auto p = drover::Put(std::vector<int64_t>{5, 6, 7});
  auto ps = drover::Task(Sum).Remote(p);
  absl::StatusOr<int64_t> psv = drover::Get(ps);
  Expect(psv.ok() && *psv == 18, "Sum(Put)", psv.ok() ? std::to_string(*psv) : Err(psv.status()));
  // Many tasks, Wait in completion order.
  std::vector<drover::ObjectRef<int64_t>> refs;
  for (int i = 0; i < 200; ++i) refs.push_back(drover::Task(Add).Remote(int64_t{i}, int64_t{1}));
  auto all = drover::Get(refs, absl::Seconds(60));
  int64_t total = 0;
  if (all.ok()) total = std::accumulate(all->begin(), all->end(), int64_t{0});
  Expect(all.ok() && total == 200 * 201 / 2, "200 tasks", all.ok() ? std::to_string(total) : Err(all.status()));
  phase("200 tasks");
  // Wait: a slow task finishes after fast ones.
  std::vector<drover::ObjectRef<int64_t>> mixed = {drover::Task(Sleeps).Remote(int64_t{1500}),
                                                   drover::Task(Sleeps).Remote(int64_t{1})};
  auto w = drover::Wait(mixed, 1, absl::Seconds(30));
  Expect(w.ready.size() == 1 && w.ready[0].id() == mixed[1].id(), "Wait returns the fast one first",
         w.ready.size());
  phase("wait");
  Print("basic", drover::testing::ProgramFailures() == 0 ? "ok" : "failed");
  return drover::testing::ProgramFailures() == 0 ? 0 : 1;
}

int Errors() {
  auto t = drover::Get(drover::Task(Throws).Remote(int64_t{7}));
  Print("throws", t.ok() ? "ok?" : Err(t.status()));
  auto f = drover::Get(drover::Task(Fails).Remote(int64_t{8}));
  Print("fails", f.ok() ? "ok?" : Err(f.status()));
  Print("fails_code", f.ok() ? "OK" : absl::StatusCodeToString(f.status().code()));
  auto c = drover::Get(drover::Task(Crashes).SetMaxRetries(0).Remote(int64_t{9}));
  Print("crash", c.ok() ? "ok?" : Err(c.status()));
  // A function not in DROVER_REMOTE.
  auto u = drover::Get(drover::Task(+[](int64_t x) { return x; }).Remote(int64_t{1}));
  Print("unregistered", u.ok() ? "ok?" : Err(u.status()));
  // Resources no node has: pending, with the reason, until the timeout.
  auto big = drover::Task(Add).SetResources({.cpus = 1000}).Remote(int64_t{1}, int64_t{1});
  auto bv = drover::Get(big, absl::Seconds(3));
  Print("infeasible", bv.ok() ? "ok?" : Err(bv.status()));
  Print("infeasible_code", bv.ok() ? "OK" : absl::StatusCodeToString(bv.status().code()));
  // The cluster keeps serving.
  auto ok = drover::Get(drover::Task(Add).Remote(int64_t{1}, int64_t{1}), absl::Seconds(60));
  Print("after_errors", ok.ok() ? std::to_string(*ok) : Err(ok.status()));
  return 0;
}

int Retry(const std::string& marker) {
  auto r = drover::Get(drover::Task(DiesOnce).Remote(marker, int64_t{21}), absl::Seconds(60));
  Print("retried", r.ok() ? std::to_string(*r) : Err(r.status()));
  auto none = drover::Get(drover::Task(DiesOnce).SetMaxRetries(0).Remote(marker + ".2", int64_t{1}),
                          absl::Seconds(60));
  Print("no_retry", none.ok() ? "ok?" : Err(none.status()));
  return 0;
}

int Nodes(const std::string& a, const std::string& b) {
  // Locality: without affinity, a task whose 3 MiB argument sits on b runs on b.
  auto far = drover::Task(Blob).SetNodeAffinity(b).Remote(int64_t{3} << 20, 9);
  drover::Wait(std::vector<drover::ObjectRef<std::vector<uint8_t>>>{far}, 1, absl::Seconds(60));
  auto where = drover::Get(drover::Task(NodeOf).Remote(far), absl::Seconds(60));
  Print("local_to_data", where.ok() ? *where : Err(where.status()));
  // A warm worker: after its lease was handed back (idle), the next task gets the same
  // process, no new one.
  auto p1 = drover::Get(drover::Task(WhereAmI).SetNodeAffinity(a).Remote(), absl::Seconds(60));
  absl::SleepFor(absl::Milliseconds(600));  // longer than the idle lease return (200 ms)
  auto p2 = drover::Get(drover::Task(WhereAmI).SetNodeAffinity(a).Remote(), absl::Seconds(60));
  Print("warm_reuse", p1.ok() && p2.ok() && *p1 == *p2 ? "yes" : absl::StrCat(p1.ok() ? *p1 : "?", " then ", p2.ok() ? *p2 : "?"));
  // Tasks pinned to each node; a large value made on one is read on the other.
  auto where_a = drover::Get(drover::Task(WhereAmI).SetNodeAffinity(a).Remote());
  auto where_b = drover::Get(drover::Task(WhereAmI).SetNodeAffinity(b).Remote());
  Print("where_a", where_a.ok() ? *where_a : Err(where_a.status()));
  Print("where_b", where_b.ok() ? *where_b : Err(where_b.status()));
  auto blob = drover::Task(Blob).SetNodeAffinity(a).Remote(int64_t{3} << 20, 7);  // 3 MiB: stored
  auto sum_b = drover::Task(Checksum).SetNodeAffinity(b).Remote(blob);
  auto local = drover::Get(blob);
  int64_t want = local.ok() ? Checksum(*local) : -1;
  auto got = drover::Get(sum_b);
  Expect(got.ok() && *got == want, "checksum across nodes", got.ok() ? std::to_string(*got) : Err(got.status()));
  Print("cross_node", got.ok() && *got == want ? "ok" : "failed");
  return drover::testing::ProgramFailures() == 0 ? 0 : 1;
}

int Actors() {
  auto counter = drover::Actor(MakeCounter).SetName("counter").Remote(int64_t{100});
  std::vector<drover::ObjectRef<std::vector<int64_t>>> logs;
  for (int64_t i = 0; i < 50; ++i) logs.push_back(counter.Task(&Counter::Log).Remote(i));
  auto last = drover::Get(logs.back(), absl::Seconds(60));
  bool ordered = last.ok() && last->size() == 50;
  for (size_t i = 0; ordered && i < last->size(); ++i) ordered = (*last)[i] == static_cast<int64_t>(i);
  Print("actor_order", ordered ? "ok" : (last.ok() ? absl::StrJoin(*last, ",") : Err(last.status())));
  auto v = drover::Get(counter.Task(&Counter::Add).Remote(int64_t{5}));
  Print("actor_add", v.ok() ? std::to_string(*v) : Err(v.status()));
  // A handle passed to a task: the task calls the same actor.
  auto through = drover::Get(drover::Task(AddThroughHandle).Remote(counter, int64_t{0}), absl::Seconds(60));
  Print("handle_in_task", through.ok() ? std::to_string(*through) : Err(through.status()));
  auto found = drover::GetActor<Counter>("counter");
  auto fv = found.ok() ? drover::Get(found->Task(&Counter::Value).Remote()) : absl::StatusOr<int64_t>(found.status());
  Print("named_value", fv.ok() ? std::to_string(*fv) : Err(fv.status()));
  auto missing = drover::GetActor<Counter>("no-such-actor", absl::Milliseconds(200));
  Print("missing_actor", missing.ok() ? "ok?" : Err(missing.status()));
  auto broken = drover::Actor(MakeBrokenCounter).Remote(int64_t{1});
  auto bv = drover::Get(broken.Task(&Counter::Value).Remote(), absl::Seconds(60));
  Print("broken_factory", bv.ok() ? "ok?" : Err(bv.status()));
  // Death: the worker exits during a call; with no restarts, every later call fails too.
  auto d = drover::Get(counter.Task(&Counter::Die).Remote(int64_t{3}), absl::Seconds(60));
  Print("actor_death", d.ok() ? "ok?" : Err(d.status()));
  auto after = drover::Get(counter.Task(&Counter::Value).Remote(), absl::Seconds(60));
  Print("after_death", after.ok() ? "ok?" : Err(after.status()));
  return 0;
}

int Restart() {
  auto counter = drover::Actor(MakeCounter).SetMaxRestarts(1).Remote(int64_t{7});
  auto pid1 = drover::Get(counter.Task(&Counter::Pid).Remote(), absl::Seconds(60));
  auto add = drover::Get(counter.Task(&Counter::Add).Remote(int64_t{1}), absl::Seconds(60));
  auto died = drover::Get(counter.Task(&Counter::Die).Remote(int64_t{4}), absl::Seconds(60));
  Print("died", died.ok() ? "ok?" : Err(died.status()));
  auto pid2 = drover::Get(counter.Task(&Counter::Pid).Remote(), absl::Seconds(60));
  auto fresh = drover::Get(counter.Task(&Counter::Value).Remote(), absl::Seconds(60));
  Print("restarted", pid1.ok() && pid2.ok() && *pid1 != *pid2 ? "ok" : "failed");
  // The factory ran again: state starts over.
  Print("value_after_restart", fresh.ok() ? std::to_string(*fresh) : Err(fresh.status()));
  Print("value_before", add.ok() ? std::to_string(*add) : Err(add.status()));
  auto again = drover::Get(counter.Task(&Counter::Die).Remote(int64_t{5}), absl::Seconds(60));
  auto dead = drover::Get(counter.Task(&Counter::Value).Remote(), absl::Seconds(60));
  Print("dead_for_good", dead.ok() ? "ok?" : Err(dead.status()));
  (void)again;
  return 0;
}

// Holds a lease and an actor, then waits to be killed: the test checks that its
// workers go with it.
int Hold() {
  auto counter = drover::Actor(MakeCounter).Remote(int64_t{1});
  auto v = drover::Get(counter.Task(&Counter::Pid).Remote(), absl::Seconds(60));
  auto w = drover::Get(drover::Task(WhereAmI).Remote(), absl::Seconds(60));
  Print("actor_pid", v.ok() ? *v : Err(v.status()));
  Print("task_worker", w.ok() ? *w : Err(w.status()));
  // Objects in the stores: a task's large result and a large Put.
  auto blob = drover::Task(Blob).Remote(int64_t{2} << 20, 1);
  auto put = drover::Put(Blob(int64_t{2} << 20, 2));
  drover::Wait(std::vector<drover::ObjectRef<std::vector<uint8_t>>>{blob, put}, 2, absl::Seconds(60));
  Print("stored", blob.id());
  Print("put", put.id());
  Print("holding", drover::JobId());
  std::cout.flush();
  absl::SleepFor(absl::Hours(1));
  return 0;
}

// Runs `n` tasks, leaves their workers idle in the agents' warm pools (the SDK hands
// a lease back once its worker has been idle 200 ms), says "idle=<job>" and waits to
// be killed.
int Idle(int n) {
  std::vector<drover::ObjectRef<std::string>> refs;
  for (int i = 0; i < n; ++i) refs.push_back(drover::Task(WhereAmI).Remote());
  for (auto& r : refs) {
    auto w = drover::Get(r, absl::Seconds(60));
    if (!w.ok()) {
      Print("idle", Err(w.status()));
      return 1;
    }
  }
  absl::SleepFor(absl::Seconds(1));
  Print("idle", drover::JobId());
  std::cout.flush();
  absl::SleepFor(absl::Hours(1));
  return 0;
}

int Tensors() {
  for (int64_t n : {int64_t{16}, int64_t{1} << 18}) {  // 64 B inline, 1 MiB through the store
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i % 1000);
    auto t = drover::Tensor::FromVector(v);
    auto ref = drover::Put(*t);
    auto scaled = drover::Task(Scale).Remote(ref, 0.5f);
    auto back = drover::Get(scaled, absl::Seconds(60));
    bool ok = back.ok() && back->numel() == n;
    if (ok) {
      auto s = back->span<float>();
      for (int64_t i = 0; ok && i < n; ++i) ok = (*s)[static_cast<size_t>(i)] == static_cast<float>(i % 1000) * 0.5f;
    }
    const std::string key = n == 16 ? "small" : "large";
    Print("tensor_" + key, ok ? "ok" : (back.ok() ? back->Describe() : Err(back.status())));
    Print("tensor_" + key + "_result_in_store", back.ok() && back->in_store() ? "yes" : "no");
    auto src = drover::Get(drover::Task(TensorSource).Remote(ref), absl::Seconds(60));
    Print("tensor_" + key + "_arg", src.ok() ? *src : Err(src.status()));
  }
  return 0;
}

// A result kept on node `b` is lost with it (the test kills b's agent once "made" is
// printed and then creates `go`): Get runs its task again elsewhere. An actor's result
// on b cannot be made again: Get says so.
int Lineage(const std::string& n0, const std::string& n1, const std::string& go) {
  // Not this driver's own node (its store must survive).
  const std::string b = drover::NodeId() == n0 ? n1 : n0;
  Print("victim", b);
  auto blob = drover::Task(Blob).SetNodeAffinity(b, /*soft=*/true).Remote(int64_t{3} << 20, 5);
  auto holder = drover::Actor(MakeHolder).SetNodeAffinity(b).Remote();
  auto big = holder.Task(&Holder::Big).Remote(int64_t{2} << 20);
  // Wait without reading (a read would pull a copy here).
  auto ready = drover::Wait(std::vector<drover::ObjectRef<std::vector<uint8_t>>>{blob, big}, 2,
                            absl::Seconds(60));
  Print("made", std::to_string(ready.ready.size()));
  while (::access(go.c_str(), F_OK) != 0) absl::SleepFor(absl::Milliseconds(20));
  auto v = drover::Get(blob, absl::Seconds(60));
  Print("rebuilt", v.ok() && Checksum(*v) == Checksum(Blob(int64_t{3} << 20, 5)) ? "ok" : Err(v.status()));
  auto lost = drover::Get(big, absl::Seconds(60));
  Print("actor_result", lost.ok() ? "ok?" : Err(lost.status()));
  return 0;
}

int Cancels() {
  // A running task, stopped with force; queued ones that never start.
  auto slow = drover::Task(Sleeps).Remote(int64_t{60000});
  absl::SleepFor(absl::Milliseconds(300));  // let it start (the test checks what comes back)
  Print("cancel_running", drover::Cancel(slow, /*force=*/true).ToString());
  auto r = drover::Get(slow, absl::Seconds(30));
  Print("running_code", r.ok() ? "OK" : absl::StatusCodeToString(r.status().code()));
  std::vector<drover::ObjectRef<int64_t>> queued;
  // More tasks than the cluster has room for at once: the last ones wait in this process.
  for (int i = 0; i < 12; ++i) queued.push_back(drover::Task(Sleeps).SetResources({.cpus = 2}).Remote(int64_t{300}));
  Print("cancel_queued", drover::Cancel(queued.back()).ToString());
  auto q = drover::Get(queued.back(), absl::Seconds(30));
  Print("queued_code", q.ok() ? "OK" : absl::StatusCodeToString(q.status().code()));
  auto first = drover::Get(queued.front(), absl::Seconds(60));
  Print("others_run", first.ok() ? std::to_string(*first) : Err(first.status()));
  return 0;
}

// "CODE: message", for checks of both.
std::string CodeErr(const absl::Status& s) {
  return absl::StrCat(absl::StatusCodeToString(s.code()), ": ", s.message());
}

// Failures that reach dependents: each Get comes back with why, within its timeout
// (issue 20: a dependent's callback failed it under the submitter's lock, taking that
// lock again: absl's deadlock detection aborted the driver; without it, it hung).
int Chains() {
  // A lease refused for good (resources the scheduler rejects), known only once an
  // earlier task is done: the chain is waiting on A by then.
  auto slow = drover::Task(Sleeps).Remote(int64_t{300});
  auto a = drover::Task(Add).SetResources({.cpus = -1}).Remote(slow, int64_t{1});
  auto b = drover::Task(Add).Remote(a, int64_t{1});
  auto c = drover::Task(Add).Remote(b, int64_t{1});
  auto d = drover::Task(Add).Remote(c, int64_t{1});
  auto rv = drover::Get(d, absl::Seconds(30));
  Print("refused_chain", rv.ok() ? "ok?" : CodeErr(rv.status()));
  // An argument that cannot be encoded (an empty ObjectRef).
  auto bad = drover::Task(Add).Remote(drover::ObjectRef<int64_t>(), int64_t{1});
  auto on_bad = drover::Task(Add).Remote(bad, int64_t{1});
  auto ev = drover::Get(on_bad, absl::Seconds(30));
  Print("encoding_chain", ev.ok() ? "ok?" : CodeErr(ev.status()));
  // A chain of 3 dependents on a task cancelled while it waits for a worker.
  auto waits = drover::Task(Add).SetResources({.cpus = 1000}).Remote(int64_t{1}, int64_t{1});
  auto w1 = drover::Task(Add).Remote(waits, int64_t{1});
  auto w2 = drover::Task(Add).Remote(w1, int64_t{1});
  auto w3 = drover::Task(Add).Remote(w2, int64_t{1});
  Print("cancel", drover::Cancel(waits).ToString());
  auto cv = drover::Get(w3, absl::Seconds(30));
  Print("cancel_chain", cv.ok() ? "ok?" : CodeErr(cv.status()));
  // Calls on one actor waiting for each other (held back behind the first, whose
  // argument is not ready) when the actor dies: failing the first fails the next, whose
  // callback sends on the same actor.
  auto counter = drover::Actor(MakeCounter).Remote(int64_t{1});
  auto up = drover::Get(counter.Task(&Counter::Value).Remote(), absl::Seconds(60));
  Print("actor_up", up.ok() ? std::to_string(*up) : CodeErr(up.status()));
  auto later = drover::Task(Sleeps).Remote(int64_t{1000});
  auto call1 = counter.Task(&Counter::Add).Remote(later);
  auto call2 = counter.Task(&Counter::Add).Remote(call1);
  auto call3 = counter.Task(&Counter::Add).Remote(call2);
  Print("actor_killed", drover::Kill(counter).ToString());
  auto av = drover::Get(call3, absl::Seconds(30));
  Print("actor_chain", av.ok() ? "ok?" : CodeErr(av.status()));
  // The cluster still serves.
  auto ok = drover::Get(drover::Task(Add).Remote(int64_t{2}, int64_t{3}), absl::Seconds(60));
  Print("after_chains", ok.ok() ? std::to_string(*ok) : CodeErr(ok.status()));
  return 0;
}

// Kill then call: the call fails at once with the kill's reason. A task whose argument
// can never be made says which argument it waits for and why.
int KillAndReasons() {
  for (int i = 0; i < 3; ++i) {
    auto counter = drover::Actor(MakeCounter).Remote(int64_t{10});
    auto v = drover::Get(counter.Task(&Counter::Value).Remote(), absl::Seconds(60));
    if (!v.ok()) {
      Print("kill_setup", CodeErr(v.status()));
      return 1;
    }
    Print(absl::StrCat("kill_", i), drover::Kill(counter).ToString());
    auto after = drover::Get(counter.Task(&Counter::Add).Remote(int64_t{1}), absl::Seconds(30));
    Print(absl::StrCat("after_kill_", i), after.ok() ? std::to_string(*after) : CodeErr(after.status()));
  }
  auto big = drover::Task(Add).SetResources({.cpus = 1000}).Remote(int64_t{1}, int64_t{1});
  auto dep = drover::Task(Add).SetName("dependent").Remote(big, int64_t{1});
  auto dep2 = drover::Task(Add).SetName("dependent2").Remote(dep, int64_t{1});
  auto dv = drover::Get(dep2, absl::Seconds(3));
  Print("dependent_reason", dv.ok() ? "ok?" : CodeErr(dv.status()));
  Print("big_id", big.id());
  return 0;
}

int WrongTypes() {
  // A reference typed as int64 that holds a string: the worker names the argument.
  auto text = drover::Put(std::string("not a number"));
  drover::ObjectRef<int64_t> lie = drover::internal::RefAccess::Make<int64_t>(
      drover::internal::RefAccess::State(text));  // drover's own test: forges the type
  auto r = drover::Get(drover::Task(Add).Remote(lie, int64_t{1}), absl::Seconds(60));
  Print("wrong_type", r.ok() ? "ok?" : Err(r.status()));
  Print("wrong_type_code", r.ok() ? "OK" : absl::StatusCodeToString(r.status().code()));
  // After Shutdown nothing runs, and nothing hangs.
  drover::Shutdown();
  auto after = drover::Get(drover::Task(Add).Remote(int64_t{1}, int64_t{2}), absl::Seconds(5));
  Print("after_shutdown", after.ok() ? "ok?" : Err(after.status()));
  return 0;
}

// One task, with a deadline: what a driver sees when no worker will start.
int OneTask() {
  auto r = drover::Get(drover::Task(Add).Remote(int64_t{1}, int64_t{2}), absl::Seconds(20));
  Print("one_task", r.ok() ? std::to_string(*r) : Err(r.status()));
  return 0;
}

void WaitForFile(const std::string& path) {
  while (::access(path.c_str(), F_OK) != 0) absl::SleepFor(absl::Milliseconds(20));
}

// What the job's timeline should show (tests/timeline_test.cc): tasks on known workers
// of each node, an actor call, a failed task and a pull of a 3 MiB result from `a` to
// `b`. Holds the job until `go` exists (the workers report within about a second).
int Timeline(const std::string& a, const std::string& b, const std::string& go) {
  auto wa = drover::Get(drover::Task(WorkerOf).SetNodeAffinity(a).Remote(), absl::Seconds(60));
  auto wb = drover::Get(drover::Task(WorkerOf).SetNodeAffinity(b).Remote(), absl::Seconds(60));
  Print("worker_a", wa.ok() ? *wa : Err(wa.status()));
  Print("worker_b", wb.ok() ? *wb : Err(wb.status()));
  auto counter = drover::Actor(MakeCounter).SetNodeAffinity(a).Remote(int64_t{1});
  auto cw = drover::Get(counter.Task(&Counter::Where).Remote(), absl::Seconds(60));
  Print("actor", counter.id());
  Print("actor_worker", cw.ok() ? *cw : Err(cw.status()));
  auto thrown = drover::Get(drover::Task(Throws).SetNodeAffinity(a).Remote(int64_t{7}), absl::Seconds(60));
  Print("throws", thrown.ok() ? "ok?" : Err(thrown.status()));
  auto blob = drover::Task(Blob).SetNodeAffinity(a).Remote(int64_t{3} << 20, 7);  // stored on a
  auto sum = drover::Get(drover::Task(Checksum).SetNodeAffinity(b).Remote(blob), absl::Seconds(60));
  Print("blob", blob.id());
  Print("pulled", sum.ok() ? "yes" : Err(sum.status()));
  Print("ready", "yes");
  std::cout.flush();
  WaitForFile(go);
  return 0;
}

// `n` no-op tasks as fast as they go, then holds the job until `go` exists ("-": ends
// at once).
int Many(int n, const std::string& go) {
  std::vector<drover::ObjectRef<void>> refs;
  refs.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) refs.push_back(drover::Task(Nothing).Remote());
  int ok = 0;
  for (const auto& r : refs) ok += drover::Get(r, absl::Seconds(120)).ok() ? 1 : 0;
  Print("ran", std::to_string(ok));
  std::cout.flush();
  if (go != "-") WaitForFile(go);
  return 0;
}

// Three tasks of 2 CPUs pinned to `node` (4 CPUs): two run, the third's lease request
// waits in the scheduler. Then waits to be killed.
int Fill(const std::string& node) {
  std::vector<drover::ObjectRef<int64_t>> refs;
  for (int i = 0; i < 3; ++i) {
    refs.push_back(drover::Task(Sleeps).SetNodeAffinity(node).SetResources({.cpus = 2}).Remote(int64_t{600000}));
  }
  Print("submitted", "3");
  std::cout.flush();
  absl::SleepFor(absl::Hours(1));
  return 0;
}

using Say = std::function<void(const std::string& key, const std::string& value)>;

// One ordered Log call to each counter per Call; Check reads the logs back.
struct OrderedCalls {
  std::vector<drover::ActorHandle<Counter>> counters;
  std::vector<drover::ObjectRef<std::vector<int64_t>>> logs;
  int64_t calls = 0;

  void Call() {
    logs.resize(counters.size());
    for (size_t a = 0; a < counters.size(); ++a) logs[a] = counters[a].Task(&Counter::Log).Remote(calls);
    ++calls;
  }
  // Every counter logged 0 .. calls - 1 in order: "actors=ok <calls> calls each"; else
  // "actors=" what went wrong, and false.
  bool Check(const Say& say) {
    logs.resize(counters.size());
    for (size_t a = 0; a < counters.size(); ++a) {
      auto log = drover::Get(logs[a], absl::Seconds(120));
      bool ordered = log.ok() && log->size() == static_cast<size_t>(calls);
      for (size_t i = 0; ordered && i < log->size(); ++i) ordered = (*log)[i] == static_cast<int64_t>(i);
      if (!ordered) {
        say("actors", log.ok() ? absl::StrCat("actor ", a, " logged ", log->size(), " of ", calls, ": ",
                                                absl::StrJoin(*log, ","))
                                 : Err(log.status()));
        return false;
      }
    }
    say("actors", absl::StrCat("ok ", calls, " calls each"));
    return true;
  }
};

// Keeps `in_flight` tasks of Sleeps(`ms`) submitted until the file `stop` exists, then
// waits for the rest, printing "done=N" as each finishes and calling `after_each` (false
// ends the stream). A task's wrong result or error is printed as `key`=...; false then.
bool StreamUntil(int in_flight, int64_t ms, const std::string& stop, const std::string& key, const Say& say,
                 const std::function<bool(int64_t done)>& after_each) {
  std::deque<drover::ObjectRef<int64_t>> refs;
  int64_t done = 0;
  auto finish_one = [&]() -> bool {
    auto r = drover::Get(refs.front(), absl::Seconds(120));
    refs.pop_front();
    if (!r.ok() || *r != ms) {
      say(key, r.ok() ? std::to_string(*r) : Err(r.status()));
      return false;
    }
    say("done", std::to_string(++done));
    return after_each(done);
  };
  while (::access(stop.c_str(), F_OK) != 0) {
    while (refs.size() < static_cast<size_t>(in_flight)) refs.push_back(drover::Task(Sleeps).Remote(ms));
    if (!finish_one()) return false;
  }
  while (!refs.empty()) {
    if (!finish_one()) return false;
  }
  return true;
}

// A driver that never lets up (issue 19 items 4 and 7): keeps `in_flight` one-CPU tasks
// of 1 s submitted (more than the cluster has CPUs) until `stop` exists, printing how
// many finished ("done=N") as they do; then waits for the rest. With `actors` > 0, as
// many counters get an ordered call (Log) per finished task; their logs are checked at
// the end ("actors=ok").
int Stream(int in_flight, const std::string& stop, int actors = 0) {
  const Say say = [](const std::string& k, const std::string& v) { Print(k, v); };
  OrderedCalls ordered;
  for (int a = 0; a < actors; ++a) {
    ordered.counters.push_back(drover::Actor(MakeCounter).Remote(int64_t{0}));
    auto v = drover::Get(ordered.counters.back().Task(&Counter::Value).Remote(), absl::Seconds(120));
    if (!v.ok()) {
      Print("actors", Err(v.status()));
      return 1;
    }
  }
  const bool streamed = StreamUntil(in_flight, 1000, stop, "stream", say, [&](int64_t) {
    ordered.Call();
    return true;
  });
  if (!streamed) return 1;
  if (actors > 0 && !ordered.Check(say)) return 1;
  Print("stream", "ok");
  return 0;
}

// Issue 19 item 4's whole test, through scheduler restarts: keeps `in_flight` tasks of
// 50 ms submitted until `stop` exists, printing how many finished ("done=N"); two
// counters, the second named `name`, get an ordered Log call per finished task, and the
// named one is looked up by name every 100 finished tasks (a lookup made while the
// scheduler is away waits for it). First, a 3 MiB result is made on each of `node_a`
// and `node_b` (stored there), read only at the end: the scheduler's object directory
// must find their nodes again. At the end the named actor is looked up once more and
// must be the same worker with the whole log. Each time the file `stop`.lookup names a
// new number N, a thread of its own looks the named actor up ("asking=N", then
// "looked_up=N ok"): the test does it while the scheduler is away.
int Outlive(int in_flight, const std::string& stop, const std::string& name,
            const std::string& node_a, const std::string& node_b) {
  std::mutex print_mu;  // Print is not thread-safe
  auto say = [&](const std::string& k, const std::string& v) {
    std::lock_guard<std::mutex> l(print_mu);
    Print(k, v);
  };
  std::atomic<bool> finished{false};
  std::thread looker([&] {
    std::string last;
    while (!finished.load()) {
      std::ifstream in(stop + ".lookup");
      std::string n;
      if (in >> n && n != last) {
        last = n;
        say("asking", n);
        // Given a minute: a lookup waits for an away scheduler within its own timeout.
        auto found = drover::GetActor<Counter>(name, absl::Seconds(60));
        say("looked_up", absl::StrCat(n, found.ok() ? " ok" : absl::StrCat(" ", Err(found.status()))));
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  });
  struct Join {
    std::atomic<bool>& finished;
    std::thread& t;
    ~Join() {
      finished = true;
      t.join();
    }
  } join{finished, looker};
  OrderedCalls ordered;
  std::vector<drover::ActorHandle<Counter>>& counters = ordered.counters;
  counters.push_back(drover::Actor(MakeCounter).Remote(int64_t{0}));
  counters.push_back(drover::Actor(MakeCounter).SetName(name).Remote(int64_t{0}));
  auto pid = drover::Get(counters[1].Task(&Counter::Pid).Remote(), absl::Seconds(120));
  auto first = drover::Get(counters[0].Task(&Counter::Value).Remote(), absl::Seconds(120));
  if (!pid.ok() || !first.ok()) {
    say("actors", Err(pid.ok() ? first.status() : pid.status()));
    return 1;
  }
  std::vector<drover::ObjectRef<std::vector<uint8_t>>> blobs;
  const std::vector<std::string> nodes = {node_a, node_b};
  for (size_t i = 0; i < nodes.size(); ++i) {
    blobs.push_back(drover::Task(Blob).SetNodeAffinity(nodes[i]).Remote(int64_t{3} << 20, static_cast<int>(i) + 11));
  }
  if (drover::Wait(blobs, static_cast<int>(blobs.size()), absl::Seconds(120)).ready.size() != blobs.size()) {
    say("blobs", "not made in 120s");
    return 1;
  }
  int lookups = 0;
  say("ready", "1");
  std::cout.flush();
  const bool streamed = StreamUntil(in_flight, 50, stop, "outlive", say, [&](int64_t done) {
    ordered.Call();
    if (done % 100 == 0) {
      auto found = drover::GetActor<Counter>(name, absl::Seconds(60));
      if (!found.ok()) {
        say("outlive", absl::StrCat("GetActor('", name, "') after ", done, " tasks: ", Err(found.status())));
        return false;
      }
      ++lookups;
    }
    return true;
  });
  if (!streamed || !ordered.Check(say)) return 1;
  auto found = drover::GetActor<Counter>(name);
  auto again = found.ok() ? drover::Get(found->Task(&Counter::Pid).Remote(), absl::Seconds(60))
                          : absl::StatusOr<std::string>(found.status());
  say("named", !again.ok() ? Err(again.status())
                             : *again == *pid ? "ok same worker" : absl::StrCat("pid ", *again, " not ", *pid));
  for (size_t i = 0; i < blobs.size(); ++i) {
    auto b = drover::Get(blobs[i], absl::Seconds(60));
    const bool right = b.ok() && Checksum(*b) == Checksum(Blob(int64_t{3} << 20, static_cast<int>(i) + 11));
    say(absl::StrCat("blob", i), right ? "ok" : b.ok() ? "wrong bytes" : Err(b.status()));
  }
  say("lookups", std::to_string(lookups));
  say("outlive", "ok");
  return 0;
}

// One task that needs all 4 CPUs of `node`.
int Whole(const std::string& node) {
  auto r = drover::Get(drover::Task(Add).SetNodeAffinity(node).SetResources({.cpus = 4}).Remote(int64_t{1}, int64_t{2}),
                       absl::Seconds(20));
  Print("whole", r.ok() ? std::to_string(*r) : Err(r.status()));
  return 0;
}

// The driver's binary is removed right after Init: workers must run the uploaded package.
int Shipped(const char* self) {
  Print("removed", ::unlink(self) == 0 ? "yes" : "no");
  auto exe = drover::Get(drover::Task(WorkerExe).Remote(), absl::Seconds(60));
  Print("worker_exe", exe.ok() ? *exe : Err(exe.status()));
  return exe.ok() ? 0 : 1;
}

// An actor that takes bytes and says its pid (the "stopped" scenario SIGSTOPs it).
class Sink {
 public:
  int64_t Take(std::vector<uint8_t> v) { return static_cast<int64_t>(v.size()); }
  std::string Pid() const { return std::to_string(::getpid()); }
};
Sink* MakeSink() { return new Sink(); }

}  // namespace

DROVER_REMOTE(MakeSink, &Sink::Take, &Sink::Pid);

namespace {

// One worker SIGSTOPped with megabytes waiting for it holds up no other connection of
// this driver, and drover::Shutdown returns while it is still stopped.
int StoppedWorker() {
  auto sink = drover::Actor(MakeSink).Remote();
  auto pid_text = drover::Get(sink.Task(&Sink::Pid).Remote(), absl::Seconds(60));
  if (!pid_text.ok()) {
    Print("stopped", Err(pid_text.status()));
    return 1;
  }
  Print("sink_pid", *pid_text);
  const pid_t pid = static_cast<pid_t>(std::stol(*pid_text));
  ::kill(pid, SIGSTOP);
  // Calls to the stopped actor whose argument is a task's result (90 KiB, inline): each
  // is sent when that task's reply is read, by the connection loop, into a socket
  // nobody reads (11 MiB in all: more than any socket buffer).
  std::vector<drover::ObjectRef<int64_t>> stuck;
  for (int i = 0; i < 128; ++i) {
    auto blob = drover::Task(Blob).Remote(int64_t{90} << 10, i);
    stuck.push_back(sink.Task(&Sink::Take).Remote(blob));
  }
  auto stuck_done = drover::Get(stuck.front(), absl::Milliseconds(500));
  Print("stuck_answered", stuck_done.ok() ? "yes?" : "no");
  // Everything else is still answered: another actor (a worker connection of its own),
  // and tasks.
  const absl::Time start = absl::Now();
  auto other = drover::Actor(MakeSink).Remote();
  bool ok = true;
  for (int i = 0; i < 20 && ok; ++i) {
    auto blob = drover::Task(Blob).Remote(int64_t{1000}, i);
    auto n = drover::Get(other.Task(&Sink::Take).Remote(blob), absl::Seconds(60));
    auto sum = drover::Get(drover::Task(Add).Remote(int64_t{i}, int64_t{1}), absl::Seconds(60));
    if (!n.ok() || *n != 1000 || !sum.ok() || *sum != i + 1) {
      Print("others", !n.ok() ? Err(n.status()) : !sum.ok() ? Err(sum.status()) : "wrong values");
      ok = false;
    }
  }
  if (ok) Print("others", "ok");
  Print("others_seconds", std::to_string(absl::ToDoubleSeconds(absl::Now() - start)));
  drover::Shutdown();
  Print("shutdown", "returned");
  ::kill(pid, SIGCONT);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::Status init = drover::Init(argc, argv);
  if (!init.ok()) {
    std::cerr << "Init: " << init << "\n";
    return 2;
  }
  const std::string scenario = argc > 1 ? argv[1] : "basic";
  Print("job", drover::JobId());
  if (scenario == "basic") return Basic();
  if (scenario == "errors") return Errors();
  if (scenario == "retry" && argc > 2) return Retry(argv[2]);
  if (scenario == "nodes" && argc > 3) return Nodes(argv[2], argv[3]);
  if (scenario == "actors") return Actors();
  if (scenario == "restart") return Restart();
  if (scenario == "hold") return Hold();
  if (scenario == "idle" && argc > 2) return Idle(std::atoi(argv[2]));
  if (scenario == "shipped") return Shipped(argv[0]);
  if (scenario == "tensors") return Tensors();
  if (scenario == "lineage" && argc > 4) return Lineage(argv[2], argv[3], argv[4]);
  if (scenario == "cancel") return Cancels();
  if (scenario == "chains") return Chains();
  if (scenario == "kill") return KillAndReasons();
  if (scenario == "one") return OneTask();
  if (scenario == "types") return WrongTypes();
  if (scenario == "fill" && argc > 2) return Fill(argv[2]);
  if (scenario == "whole" && argc > 2) return Whole(argv[2]);
  if (scenario == "timeline" && argc > 4) return Timeline(argv[2], argv[3], argv[4]);
  if (scenario == "stream" && argc > 3) {
    return Stream(std::atoi(argv[2]), argv[3], argc > 4 ? std::atoi(argv[4]) : 0);
  }
  if (scenario == "outlive" && argc > 6) {
    return Outlive(std::atoi(argv[2]), argv[3], argv[4], argv[5], argv[6]);
  }
  if (scenario == "many" && argc > 3) return Many(std::atoi(argv[2]), argv[3]);
  if (scenario == "stopped") return StoppedWorker();
  std::cerr << "unknown scenario " << scenario << "\n";
  return 2;
}
