// A pipeline program for tests/pipeline_test.cc: queues, shared tensors and data
// loaders on a real cluster. `pipeline_program SCENARIO NODE_A NODE_B [ARGS]` runs one
// scenario as a driver (NODE_A and NODE_B are the cluster's two nodes) and prints
// "key=value" lines the test checks; exit code 0 if the scenario's own checks passed.
// Started by the agents in worker mode, it is its own worker.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <iostream>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "drover/drover.h"
#include "sdk/internal/runtime_internal.h"

namespace {

using drover::DType;
using drover::Queue;
using drover::SharedTensor;
using drover::Tensor;

struct Tagged {
  int64_t producer = 0;
  int64_t seq = 0;
  MSGPACK_DEFINE(producer, seq);
};

// Puts `n` items tagged (producer, 0..n-1).
absl::Status Produce(Queue<Tagged> q, int64_t producer, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (absl::Status s = q.Put(Tagged{producer, i}); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// Fills a float tensor [n] with base + i, written straight into the store, and puts it
// `count` times (a new tensor each time); then closes the queue if asked.
absl::StatusOr<std::string> ProduceTensors(Queue<Tensor> q, int64_t count, int64_t n, bool close) {
  std::string where;
  for (int64_t k = 0; k < count; ++k) {
    absl::StatusOr<Tensor> t = drover::AllocateInStore(DType::kFloat32, {n});
    if (!t.ok()) return t.status();
    absl::Span<float> v = *t->mutable_span<float>();
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(k * 1000 + i % 1000);
    if (absl::Status s = q.Put(*t); !s.ok()) return s;
    // Sent: read-only from now on.
    if (k == 0) where = t->mutable_span<float>().ok() ? "still-writable" : "read-only-after-put";
  }
  if (absl::Status s = close ? q.Close() : absl::OkStatus(); !s.ok()) return s;
  return where;
}

// Hogwild: adds `delta` to every element of its stripe (worker w of `workers`), `steps` times, in place.
absl::StatusOr<std::string> AddToStripe(SharedTensor t, int64_t worker, int64_t workers, int64_t steps) {
  absl::StatusOr<absl::Span<float>> v = t.span<float>();
  if (!v.ok()) return v.status();
  const size_t stripe = v->size() / static_cast<size_t>(workers);
  for (int64_t s = 0; s < steps; ++s) {
    for (size_t i = stripe * worker; i < stripe * (worker + 1); ++i) (*v)[i] += static_cast<float>(worker + 1);
  }
  return absl::StrCat(drover::NodeId(), "/", ::getpid());
}

double SumOf(Tensor t) {
  double s = 0;
  for (float x : *t.span<float>()) s += x;
  return s;
}

std::string Where() { return drover::NodeId(); }

int failures = 0;

template <typename T>
void Expect(bool ok, const std::string& what, const T& got) {
  if (!ok) {
    ++failures;
    std::cout << "FAIL " << what << ": got " << got << std::endl;
  }
}

void Print(const std::string& key, const std::string& value) { std::cout << key << "=" << value << std::endl; }
std::string Err(const absl::Status& s) { return s.ok() ? "OK" : absl::StrCat(absl::StatusCodeToString(s.code()), ": ", s.message()); }
int Done(const std::string& name) {
  Print(name, failures == 0 ? "ok" : "failed");
  return failures == 0 ? 0 : 1;
}

// Two producers on the two nodes, one consumer here: every item arrives once, and each
// producer's items in its order.
int QueueOrder(const std::string& a, const std::string& b) {
  auto q = Queue<Tagged>::Create({.capacity = 16});
  if (!q.ok()) return Print("error", Err(q.status())), 1;
  const int64_t n = 500;
  auto pa = drover::Task(Produce).SetNodeAffinity(a).Remote(*q, int64_t{0}, n);
  auto pb = drover::Task(Produce).SetNodeAffinity(b).Remote(*q, int64_t{1}, n);
  std::map<int64_t, int64_t> next;
  bool in_order = true;
  for (int64_t i = 0; i < 2 * n; ++i) {
    absl::StatusOr<Tagged> t = q->Get(absl::Seconds(60));
    if (!t.ok()) return Print("error", Err(t.status())), 1;
    in_order = in_order && t->seq == next[t->producer]++;
  }
  Expect(drover::Get(pa, absl::Seconds(60)).ok() && drover::Get(pb, absl::Seconds(60)).ok(), "producers", "failed");
  Print("in_order", in_order ? "yes" : "no");
  Print("counts", absl::StrCat(next[0], ",", next[1]));
  auto empty = q->Get(absl::ZeroDuration());
  Print("then_empty", absl::StatusCodeToString(empty.status().code()));
  Print("host_node", drover::internal::QueueHostNode(*q->client()));
  return Done("queue_order");
}

// Capacity: a put into a full queue waits (and times out), and one waiting goes in when
// a get makes room. Timeouts of gets on an empty queue.
int QueueCapacity() {
  auto q = Queue<int64_t>::Create({.capacity = 2});
  if (!q.ok()) return Print("error", Err(q.status())), 1;
  Expect(q->Put(1).ok() && q->Put(2).ok(), "two puts", "failed");
  absl::Time t0 = absl::Now();
  absl::Status full = q->Put(3, absl::Milliseconds(200));
  const absl::Duration waited = absl::Now() - t0;
  Print("full_put", absl::StatusCodeToString(full.code()));
  Print("full_put_waited_ms", std::to_string(absl::ToInt64Milliseconds(waited)));
  Print("full_put_message", std::string(full.message()));
  // A put that blocks until a get makes room.
  std::atomic<bool> put_done{false};
  absl::Status blocked;
  std::thread putter([&] {
    blocked = q->Put(4);
    put_done = true;
  });
  const absl::Time until = absl::Now() + absl::Seconds(20);
  while (absl::Now() < until && q->Info().value_or(drover::QueueInfo{}).waiting_puts != 1) absl::SleepFor(absl::Milliseconds(5));
  Print("waiting_puts", std::to_string(q->Info().value_or(drover::QueueInfo{}).waiting_puts));
  Print("blocked_before_get", put_done ? "no" : "yes");
  auto first = q->Get();
  putter.join();
  Print("blocked_put", Err(blocked));
  std::vector<int64_t> rest;
  for (int i = 0; i < 2; ++i) rest.push_back(q->Get(absl::Seconds(5)).value_or(-1));
  Print("order", absl::StrCat(first.value_or(-1), ",", absl::StrJoin(rest, ",")));
  t0 = absl::Now();
  auto none = q->Get(absl::Milliseconds(150));
  Print("empty_get", absl::StatusCodeToString(none.status().code()));
  Print("empty_get_waited_ms", std::to_string(absl::ToInt64Milliseconds(absl::Now() - t0)));
  auto info = q->Info();
  Print("size_after", info.ok() ? std::to_string(info->size) : Err(info.status()));
  return Done("queue_capacity");
}

// Close: puts fail, gets drain then say OUT_OF_RANGE; a get waiting on an empty queue
// is woken by the close; a get of another type than was put is a clear error.
int QueueClose() {
  auto q = Queue<std::string>::Create({.capacity = 8, .name = "closing"});
  if (!q.ok()) return Print("error", Err(q.status())), 1;
  for (const char* s : {"a", "b", "c"}) Expect(q->Put(s).ok(), "put", s);
  Expect(q->Close().ok(), "close", "failed");
  Print("put_after_close", Err(q->Put("d")));
  std::string got;
  for (int i = 0; i < 3; ++i) got += q->Get(absl::Seconds(5)).value_or("?");
  Print("drained", got);
  Print("get_after_drain", Err(q->Get(absl::Seconds(5)).status()));
  // A waiting get, woken by Close (from another handle, opened by name).
  auto w = Queue<int64_t>::Create({.name = "waiting"});
  absl::Status waited;
  absl::Time woke;
  std::thread getter([&] {
    waited = w->Get().status();
    woke = absl::Now();
  });
  const absl::Time until = absl::Now() + absl::Seconds(20);
  while (absl::Now() < until && w->Info().value_or(drover::QueueInfo{}).waiting_gets != 1) absl::SleepFor(absl::Milliseconds(5));
  auto opened = Queue<int64_t>::Open("waiting");
  const absl::Time closed_at = absl::Now();
  Expect(opened.ok() && opened->Close().ok(), "close by name", opened.ok() ? "close failed" : Err(opened.status()));
  getter.join();
  Print("waiting_get", absl::StatusCodeToString(waited.code()));
  Print("woken_within_ms", std::to_string(absl::ToInt64Milliseconds(woke - closed_at)));
  // The wrong type.
  auto typed = Queue<std::string>::Create();
  Expect(typed->Put("not a number").ok(), "put", "failed");
  auto as_int = Queue<int64_t>(typed->client()).Get(absl::Seconds(5));
  Print("wrong_type", Err(as_int.status()));
  Print("open_unknown", absl::StatusCodeToString(Queue<int64_t>::Open("no-such-queue", absl::Milliseconds(300)).status().code()));
  return Done("queue_close");
}

// The host's process is killed (SIGKILL) while a get waits: the get, and every later
// call, fails with ABORTED naming the cause.
int QueueHostDies() {
  auto q = Queue<int64_t>::Create();
  if (!q.ok()) return Print("error", Err(q.status())), 1;
  const int64_t pid = drover::internal::QueueHostPid(*q->client());
  Print("host_pid", std::to_string(pid));
  absl::Status waited;
  std::thread getter([&] { waited = q->Get().status(); });
  const absl::Time until = absl::Now() + absl::Seconds(20);
  while (absl::Now() < until && q->Info().value_or(drover::QueueInfo{}).waiting_gets != 1) absl::SleepFor(absl::Milliseconds(5));
  const absl::Time killed = absl::Now();
  ::kill(static_cast<pid_t>(pid), SIGKILL);
  getter.join();
  Print("failed_within_ms", std::to_string(absl::ToInt64Milliseconds(absl::Now() - killed)));
  Print("waiting_get", Err(waited));
  Print("later_put", Err(q->Put(1)));
  return Done("queue_host_dies");
}

// Tensors through a queue: written in place by a producer on the other node
// (AllocateInStore), read by this consumer, freed as the consumer drops them; memory
// held stays bounded by the capacity while the consumer is slow.
int QueueTensors(const std::string& a, const std::string& b) {
  const std::string other = drover::NodeId() == a ? b : a;
  const int64_t n = 256 * 1024;  // 1 MiB of floats
  const int64_t count = 24;
  const uint64_t capacity = 3;
  auto q = Queue<Tensor>::Create({.capacity = capacity});
  if (!q.ok()) return Print("error", Err(q.status())), 1;
  auto producer = drover::Task(ProduceTensors).SetNodeAffinity(other).Remote(*q, count, n, true);
  drover::object_store::Client* store = drover::internal::LocalStore();
  uint64_t peak = 0;
  uint64_t stored_peak = 0;
  int64_t received = 0;
  bool exact = true;
  for (;;) {
    absl::SleepFor(absl::Milliseconds(30));  // a slow consumer: the producer runs ahead until the queue is full
    auto info = q->Info();
    if (info.ok()) stored_peak = std::max(stored_peak, info->stored_bytes);
    absl::StatusOr<Tensor> t = q->Get(absl::Seconds(60));
    if (absl::IsOutOfRange(t.status())) break;
    if (!t.ok()) return Print("error", Err(t.status())), 1;
    auto v = t->span<float>();
    exact = exact && v.ok() && (*v)[0] == static_cast<float>(received * 1000) &&
            (*v)[static_cast<size_t>(n - 1)] == static_cast<float>(received * 1000 + (n - 1) % 1000);
    exact = exact && t->in_store();
    ++received;
    auto stats = store->Stats();
    if (stats.ok()) peak = std::max(peak, stats->used);
  }
  auto where = drover::Get(producer, absl::Seconds(60));
  Print("producer", where.ok() ? *where : Err(where.status()));
  Print("received", std::to_string(received));
  Print("exact", exact ? "yes" : "no");
  Print("item_bytes", std::to_string(n * 4));
  Print("queued_bytes_peak", std::to_string(stored_peak));
  Print("local_store_used_peak", std::to_string(peak));
  // Everything the consumer dropped is freed (here: the pulled copies).
  const absl::Time until = absl::Now() + absl::Seconds(10);
  uint64_t used = 0;
  do {
    used = store->Stats().value_or(drover::object_store::StoreStats{}).used;
  } while (used > 4 * 1024 * 1024 && absl::Now() < until && (absl::SleepFor(absl::Milliseconds(10)), true));
  Print("local_store_used_after", std::to_string(used));
  return Done("queue_tensors");
}

// SharedTensor: workers on its node update it in place, each its own stripe; every
// update lands. A task on the other node cannot attach; a snapshot can go anywhere.
int Shared(const std::string& a, const std::string& b) {
  const std::string here = drover::NodeId();
  const std::string other = here == a ? b : a;
  const int64_t workers = 4, steps = 50, n = 4096;
  auto t = SharedTensor::Create(DType::kFloat32, {n});
  if (!t.ok()) return Print("error", Err(t.status())), 1;
  std::vector<drover::ObjectRef<std::string>> runs;
  for (int64_t w = 0; w < workers; ++w) {
    runs.push_back(drover::Task(AddToStripe).SetNodeAffinity(here).Remote(*t, w, workers, steps));
  }
  std::vector<std::string> who;
  for (auto& r : runs) {
    auto v = drover::Get(r, absl::Seconds(60));
    who.push_back(v.ok() ? *v : Err(v.status()));
  }
  std::sort(who.begin(), who.end());
  who.erase(std::unique(who.begin(), who.end()), who.end());
  Print("worker_processes", std::to_string(who.size()));
  auto v = t->span<float>();
  bool exact = v.ok();
  for (int64_t i = 0; exact && i < n; ++i) {
    exact = (*v)[static_cast<size_t>(i)] == static_cast<float>(steps * (i / (n / workers) + 1));
  }
  Print("every_update_landed", exact ? "yes" : "no");
  auto elsewhere = drover::Get(drover::Task(AddToStripe).SetNodeAffinity(other).Remote(*t, int64_t{0}, int64_t{1}, int64_t{1}), absl::Seconds(60));
  Print("other_node", Err(elsewhere.status()));
  auto snap = t->Snapshot();
  Expect(snap.ok(), "snapshot", snap.ok() ? "" : Err(snap.status()));
  Print("snapshot_writable", snap.ok() && snap->writable() ? "yes" : "no");
  auto remote_sum = drover::Get(drover::Task(SumOf).SetNodeAffinity(other).Remote(*snap), absl::Seconds(60));
  const double expect = static_cast<double>(steps) * (n / workers) * (1 + 2 + 3 + 4);
  Print("snapshot_sum_elsewhere", remote_sum.ok() ? (*remote_sum == expect ? "exact" : std::to_string(*remote_sum)) : Err(remote_sum.status()));
  // Release: accessors fail after; a task attaching after the owner let go is told.
  const std::string id = t->id();
  SharedTensor copy = *t;
  Expect(t->Release().ok(), "release", "failed");
  Print("span_after_release", Err(copy.span<float>().status()));
  Print("release_twice", absl::StatusCodeToString(copy.Release().code()));
  Print("wrong_dtype", absl::StatusCodeToString(SharedTensor::Create(DType::kFloat32, {-1}).status().code()));
  // The object is gone from the store once no worker holds it.
  const absl::Time until = absl::Now() + absl::Seconds(10);
  bool gone = false;
  while (!gone && absl::Now() < until) {
    gone = !drover::internal::LocalStore()->Contains(id).value_or(true);
    if (!gone) absl::SleepFor(absl::Milliseconds(10));
  }
  Print("freed", gone ? "yes" : "no");
  return Done("shared");
}

}  // namespace

DROVER_REMOTE(Produce, ProduceTensors, AddToStripe, SumOf, Where);

int main(int argc, char** argv) {
  absl::Status init = drover::Init(argc, argv);
  if (!init.ok()) {
    std::cerr << "Init: " << init << "\n";
    return 2;
  }
  const std::string scenario = argc > 1 ? argv[1] : "";
  const std::string a = argc > 2 ? argv[2] : "";
  const std::string b = argc > 3 ? argv[3] : "";
  Print("driver_node", drover::NodeId());
  if (scenario == "queue_order") return QueueOrder(a, b);
  if (scenario == "queue_capacity") return QueueCapacity();
  if (scenario == "queue_close") return QueueClose();
  if (scenario == "queue_host_dies") return QueueHostDies();
  if (scenario == "queue_tensors") return QueueTensors(a, b);
  if (scenario == "shared") return Shared(a, b);
  std::cerr << "unknown scenario '" << scenario << "'\n";
  return 2;
}
