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
#include "tests/util/program_output.h"
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

// A worker process of its own (an actor) running AddToStripe.
class StripeWorker {
 public:
  absl::StatusOr<std::string> Add(SharedTensor t, int64_t worker, int64_t workers, int64_t steps) {
    return AddToStripe(std::move(t), worker, workers, steps);
  }
};
StripeWorker* MakeStripeWorker() { return new StripeWorker(); }

double SumOf(Tensor t) {
  double s = 0;
  for (float x : *t.span<float>()) s += x;
  return s;
}

std::string Where() { return drover::NodeId(); }

// ---- data loaders ----

// Item `index`: 64 floats, a pure function of (index, seed), after ~0.2 ms of work.
absl::StatusOr<Tensor> MakeItem(int64_t index, uint64_t seed) {
  std::vector<float> v(64);
  uint64_t x = seed ^ static_cast<uint64_t>(index);
  const absl::Time until = absl::Now() + absl::Microseconds(200);
  do {
    for (float& f : v) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      f = static_cast<float>(x >> 40) / static_cast<float>(1 << 24) + static_cast<float>(index);
    }
  } while (absl::Now() < until && (x = seed ^ static_cast<uint64_t>(index), true));
  return Tensor::FromVector(v);
}

// A batch: the items' first elements, as one tensor.
absl::StatusOr<Tensor> MakeBatch(std::vector<int64_t> indices, uint64_t seed) {
  std::vector<float> v;
  for (int64_t i : indices) v.push_back(static_cast<float>(i) + static_cast<float>(seed % 1000) / 1000.0f);
  return Tensor::FromVector(v);
}

std::string NodeOfItem(int64_t, uint64_t) { return drover::NodeId(); }

// A 1 MiB item written in place in the worker's store.
absl::StatusOr<Tensor> BigItem(int64_t index, uint64_t) {
  absl::StatusOr<Tensor> t = drover::AllocateInStore(DType::kFloat32, {256 * 1024});
  if (!t.ok()) return t.status();
  for (float& f : *t->mutable_span<float>()) f = static_cast<float>(index);
  return t;
}

// Fails on item 7 (an error status) and 11 (an exception).
absl::StatusOr<int64_t> Picky(int64_t index, uint64_t) {
  if (index == 7) return absl::InvalidArgumentError("seven is not welcome");
  if (index == 11) throw std::runtime_error("eleven broke the parser");
  return index * 10;
}

// A short item: ~20 µs of this thread's CPU, then its value; item 1234 fails.
absl::StatusOr<int64_t> ShortItem(int64_t index, uint64_t) {
  timespec ts;
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  const int64_t end = ts.tv_sec * 1'000'000'000LL + ts.tv_nsec + 20'000;
  do {
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  } while (ts.tv_sec * 1'000'000'000LL + ts.tv_nsec < end);
  if (index == 1234) return absl::DataLossError("1234 is cursed");
  return index * 3;
}

// Kills its own process the first time it sees item 5 (a marker file remembers), and
// every time it sees item 3.
int64_t DiesOnItem(int64_t index, uint64_t) {
  const std::string marker = absl::StrCat("/tmp/drover-pipeline-", drover::JobId(), "-died-on-5");
  if (index == 3 || (index == 5 && ::access(marker.c_str(), F_OK) != 0)) {
    if (index == 5) std::ofstream(marker) << ::getpid();
    ::kill(::getpid(), SIGKILL);
  }
  return index * index;
}

// Item 0 takes 5 ms, so the worker reads the calls sent meanwhile together and runs 1, 2
// and 3 in one batch; item 3 kills its worker before the replies of 1 and 2 are sent.
int64_t DiesAfterABatch(int64_t index, uint64_t) {
  if (index == 0) absl::SleepFor(absl::Milliseconds(5));
  if (index == 3) ::kill(::getpid(), SIGKILL);
  return index * index;
}

// A worker with state made once: a "vocabulary" keyed by its seed.
class Tokenizer {
 public:
  explicit Tokenizer(drover::WorkerInfo info) : info_(info) {
    for (int i = 0; i < 26; ++i) vocab_[static_cast<char>('a' + i)] = (i * 7 + static_cast<int>(info.seed)) % 26;
  }
  std::vector<int64_t> Encode(std::string text, uint64_t) {
    std::vector<int64_t> out;
    for (char c : text) out.push_back(vocab_.count(c) ? vocab_[c] : -1);
    return out;
  }

 private:
  drover::WorkerInfo info_;
  std::map<char, int> vocab_;
};
Tokenizer* MakeTokenizer(drover::WorkerInfo info) { return new Tokenizer(info); }

using drover::testing::Expect;
using drover::testing::Print;

std::string Err(const absl::Status& s) { return s.ok() ? "OK" : absl::StrCat(absl::StatusCodeToString(s.code()), ": ", s.message()); }
int Done(const std::string& name) {
  Print(name, drover::testing::ProgramFailures() == 0 ? "ok" : "failed");
  return drover::testing::ProgramFailures() == 0 ? 0 : 1;
}

// Every result of `loader` (none if it was not made) until Next fails; that failure
// in `*end`.
std::vector<int64_t> Drain(absl::StatusOr<drover::DataLoader<int64_t>>& loader, absl::Status* end) {
  std::vector<int64_t> got;
  while (loader.ok()) {
    auto v = loader->Next();
    if (!v.ok()) {
      *end = v.status();
      break;
    }
    got.push_back(*v);
  }
  return got;
}

// "position: message | ..." for every item `loader` skipped.
std::string SkippedText(const drover::DataLoader<int64_t>& loader) {
  std::vector<std::string> skipped;
  for (const auto& s : loader.skipped()) skipped.push_back(absl::StrCat(s.position, ": ", s.error.message()));
  return absl::StrJoin(skipped, " | ");
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
  Print("host_node", drover::internal::QueueHostNode(*drover::internal::QueueAccess::Client(*q)));
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
  auto as_int = drover::internal::QueueAccess::Make<int64_t>(drover::internal::QueueAccess::Client(*typed)).Get(absl::Seconds(5));
  Print("wrong_type", Err(as_int.status()));
  Print("open_unknown", absl::StatusCodeToString(Queue<int64_t>::Open("no-such-queue", absl::Milliseconds(300)).status().code()));
  return Done("queue_close");
}

// The host's process is killed (SIGKILL) while a get waits: the get, and every later
// call, fails with ABORTED naming the cause.
int QueueHostDies() {
  auto q = Queue<int64_t>::Create();
  if (!q.ok()) return Print("error", Err(q.status())), 1;
  const int64_t pid = drover::internal::QueueHostPid(*drover::internal::QueueAccess::Client(*q));
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
  // Each worker a process of its own on the tensor's node.
  std::vector<drover::ActorHandle<StripeWorker>> actors;
  std::vector<drover::ObjectRef<std::string>> runs;
  for (int64_t w = 0; w < workers; ++w) {
    actors.push_back(drover::Actor(MakeStripeWorker).SetResources({.cpus = 0.5}).SetNodeAffinity(here).Remote());
    runs.push_back(actors.back().Task(&StripeWorker::Add).Remote(*t, w, workers, steps));
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
  for (auto& a : actors) (void)drover::Kill(a);
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


bool SameTensor(const Tensor& a, const Tensor& b) {
  auto x = a.span<float>();
  auto y = b.span<float>();
  return x.ok() && y.ok() && x->size() == y->size() && std::equal(x->begin(), x->end(), y->begin());
}

// Ordered and unordered loaders, per item and per batch, with and without worker state,
// give exactly what a serial run gives; the workers are on both nodes.
int LoaderMatchesSerial() {
  const int64_t n = 300;
  const uint64_t seed = 42;
  std::vector<Tensor> serial;
  for (int64_t i = 0; i < n; ++i) serial.push_back(*MakeItem(i, drover::ItemSeed(seed, i)));
  // Where the workers run: spread over both nodes (first, while no other loader's
  // workers hold CPUs).
  std::vector<std::string> nodes;
  auto where = drover::ParallelMap<std::string>(std::vector<int64_t>(64, 0), NodeOfItem, {.num_workers = 2, .prefetch = 2});
  if (where.ok()) nodes = *where;
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  Print("worker_nodes", std::to_string(nodes.size()));
  drover::LoaderOptions o{.num_workers = 4, .prefetch = 4, .seed = seed, .name = "items"};
  // Each loader in a block of its own: its workers (a CPU each) stop when it goes.
  {
  auto ordered = drover::DataLoader<Tensor>::Create(drover::IndexRange{0, n}, MakeItem, o);
  if (!ordered.ok()) return Print("error", Err(ordered.status())), 1;
  bool in_order = true;
  int64_t count = 0;
  for (;;) {
    auto item = ordered->NextItem();
    if (absl::IsOutOfRange(item.status())) break;
    if (!item.ok()) return Print("error", Err(item.status())), 1;
    in_order = in_order && item->position == count && SameTensor(item->value, serial[static_cast<size_t>(count)]);
    ++count;
  }
  Print("ordered", in_order && count == n ? "matches-serial" : absl::StrCat("differs after ", count));
  }
  {
  o.ordered = false;
  auto unordered = drover::DataLoader<Tensor>::Create(drover::IndexRange{0, n}, MakeItem, o);
  std::vector<int> seen(static_cast<size_t>(n), 0);
  bool exact = unordered.ok();
  bool reordered = false;
  int64_t k = 0;
  while (exact) {
    auto item = unordered->NextItem();
    if (absl::IsOutOfRange(item.status())) break;
    exact = item.ok() && SameTensor(item->value, serial[static_cast<size_t>(item->position)]);
    if (exact) {
      ++seen[static_cast<size_t>(item->position)];
      reordered = reordered || item->position != k;
    }
    ++k;
  }
  exact = exact && std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; });
  Print("unordered", exact ? "matches-serial" : "differs");
  }
  // Per batch (the last one shorter).
  auto batches = drover::ParallelMap<Tensor>(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, MakeBatch,
                                             {.num_workers = 2, .batch_size = 4, .seed = seed});
  std::vector<std::string> shapes;
  bool batch_exact = batches.ok() && batches->size() == 3;
  for (size_t b = 0; batch_exact && b < batches->size(); ++b) {
    std::vector<int64_t> idx;
    for (int64_t i = static_cast<int64_t>(b) * 4; i < std::min<int64_t>(11, static_cast<int64_t>(b) * 4 + 4); ++i) idx.push_back(i);
    batch_exact = SameTensor((*batches)[b], *MakeBatch(idx, drover::ItemSeed(seed, static_cast<int64_t>(b))));
    shapes.push_back((*batches)[b].Describe());
  }
  Print("batches", batch_exact ? absl::StrJoin(shapes, " ") : (batches.ok() ? "differ" : Err(batches.status())));
  // Persistent workers with state, over a list of inputs.
  std::vector<std::string> texts = {"abc", "drover", "zz", "queue", "hogwild", "loader"};
  auto tok = drover::DataLoader<std::vector<int64_t>>::Create(texts, MakeTokenizer, &Tokenizer::Encode,
                                                              {.num_workers = 3, .prefetch = 2, .seed = 5});
  Tokenizer local(drover::WorkerInfo{0, 1, 5, "local"});
  bool tok_exact = tok.ok();
  for (size_t i = 0; tok_exact; ++i) {
    auto v = tok->Next();
    if (absl::IsOutOfRange(v.status())) {
      tok_exact = i == texts.size();
      break;
    }
    tok_exact = v.ok() && *v == local.Encode(texts[i], 0);
  }
  Print("stateful", tok_exact ? "matches-serial" : (tok.ok() ? "differs" : Err(tok.status())));
  tok = absl::CancelledError("done");  // its workers stop
  // Bad options are refused.
  Print("zero_workers", absl::StatusCodeToString(
      drover::DataLoader<Tensor>::Create(drover::IndexRange{0, 1}, MakeItem, {.num_workers = 0}).status().code()));
  Print("batch_mismatch", Err(drover::DataLoader<Tensor>::Create(drover::IndexRange{0, 1}, MakeBatch, {}).status()));
  return Done("loader_matches_serial");
}

// A slow consumer: the workers (on this node) stop at the prefetch window; the node's
// store never holds much more than the window, whatever the data set's size.
int LoaderMemory() {
  const int64_t n = 40;
  const int prefetch = 4, workers = 2;
  auto loader = drover::DataLoader<Tensor>::Create(
      drover::IndexRange{0, n}, BigItem,
      {.num_workers = workers, .prefetch = prefetch, .node_id = drover::NodeId(), .name = "big"});
  if (!loader.ok()) return Print("error", Err(loader.status())), 1;
  drover::object_store::Client* store = drover::internal::LocalStore();
  uint64_t peak = 0;
  bool exact = true;
  for (int64_t i = 0;; ++i) {
    absl::SleepFor(absl::Milliseconds(20));
    peak = std::max(peak, store->Stats().value_or(drover::object_store::StoreStats{}).used);
    auto t = loader->Next();
    if (absl::IsOutOfRange(t.status())) break;
    if (!t.ok()) return Print("error", Err(t.status())), 1;
    exact = exact && t->in_store() && (*t->span<float>())[0] == static_cast<float>(i);
  }
  Print("exact", exact ? "yes" : "no");
  Print("window_items", std::to_string(workers * prefetch));
  Print("item_bytes", std::to_string(256 * 1024 * 4));
  Print("dataset_bytes", std::to_string(n * 256 * 1024 * 4));
  Print("store_used_peak", std::to_string(peak));
  const absl::Time until = absl::Now() + absl::Seconds(10);
  uint64_t used = 0;
  do {
    used = store->Stats().value_or(drover::object_store::StoreStats{}).used;
  } while (used > (1u << 20) && absl::Now() < until && (absl::SleepFor(absl::Milliseconds(10)), true));
  Print("store_used_after", std::to_string(used));
  return Done("loader_memory");
}

// A failing item is named (index, node, message): it stops the loader in its place, or
// is skipped and listed.
int LoaderFailures() {
  auto stop = drover::DataLoader<int64_t>::Create(drover::IndexRange{0, 20}, Picky, {.num_workers = 2, .prefetch = 4});
  absl::Status stopped;
  const std::vector<int64_t> got = Drain(stop, &stopped);
  Print("stop_delivered", std::to_string(got.size()));
  Print("stop_error", Err(stopped));
  Print("stop_again", absl::StatusCodeToString(stop->Next().status().code()));
  auto skip = drover::DataLoader<int64_t>::Create(drover::IndexRange{0, 20}, Picky,
                                                  {.num_workers = 2, .prefetch = 4, .on_error = drover::LoaderOptions::OnError::kSkip});
  int64_t sum = 0, count = 0;
  for (;;) {
    auto v = skip->Next();
    if (!v.ok()) {
      Print("skip_end", absl::StatusCodeToString(v.status().code()));
      break;
    }
    sum += *v;
    ++count;
  }
  Print("skip_delivered", absl::StrCat(count, " sum ", sum));
  Print("skipped", SkippedText(*skip));
  return Done("loader_failures");
}

// Short items go many to a call (fewer calls than items / 12; a call per prefetch/2
// items, the old cap, would be items / 8), and keep their order and their errors.
int LoaderShortItems() {
  constexpr int64_t kItems = 3000;
  auto skip = drover::DataLoader<int64_t>::Create(
      drover::IndexRange{0, kItems}, ShortItem,
      {.num_workers = 2, .on_error = drover::LoaderOptions::OnError::kSkip, .name = "short"});
  if (!skip.ok()) return Print("error", Err(skip.status())), 1;
  int64_t expect = 0;
  bool in_order = true;
  int64_t count = 0;
  for (;;) {
    auto v = skip->Next();
    if (!v.ok()) {
      Print("skip_end", absl::StatusCodeToString(v.status().code()));
      break;
    }
    if (expect == 1234) ++expect;
    in_order = in_order && *v == expect * 3;
    ++expect;
    ++count;
  }
  Print("skip_delivered", std::to_string(count));
  Print("skip_in_order", in_order ? "yes" : "no");
  Print("skipped", SkippedText(*skip));
  Print("calls", std::to_string(skip->progress().calls));
  // Stopping: every item before the failing one, in order, then its error.
  auto stop = drover::DataLoader<int64_t>::Create(drover::IndexRange{0, kItems}, ShortItem,
                                                  {.num_workers = 2, .name = "short"});
  if (!stop.ok()) return Print("error", Err(stop.status())), 1;
  int64_t before = 0;
  absl::Status stopped;
  for (;;) {
    auto v = stop->Next();
    if (!v.ok()) {
      stopped = v.status();
      break;
    }
    if (*v != before * 3) break;
    ++before;
  }
  Print("stop_delivered", std::to_string(before));
  Print("stop_error", Err(stopped));
  return Done("loader_short_items");
}

// A worker killed mid-item: the item runs again; an item that kills every worker it
// runs on is named once its retries are used up.
int LoaderWorkerKilled() {
  auto loader = drover::DataLoader<int64_t>::Create(
      drover::IndexRange{4, 12}, DiesOnItem, {.num_workers = 2, .prefetch = 2, .max_retries = 3});
  absl::Status end;
  const std::vector<int64_t> got = Drain(loader, &end);
  Print("retried_results", absl::StrJoin(got, ","));
  Print("retried_end", absl::StatusCodeToString(end.code()));
  Print("retries", std::to_string(loader.ok() ? loader->progress().retried : -1));
  ::unlink(absl::StrCat("/tmp/drover-pipeline-", drover::JobId(), "-died-on-5").c_str());
  auto doomed = drover::DataLoader<int64_t>::Create(
      drover::IndexRange{0, 5}, DiesOnItem,
      {.num_workers = 2, .prefetch = 2, .on_error = drover::LoaderOptions::OnError::kSkip, .max_retries = 1});
  std::vector<int64_t> rest;
  while (doomed.ok()) {
    auto v = doomed->Next();
    if (!v.ok()) break;
    rest.push_back(*v);
  }
  Print("doomed_results", absl::StrJoin(rest, ","));
  Print("doomed_skipped", doomed.ok() && !doomed->skipped().empty() ? Err(doomed->skipped()[0].error) : "none");
  return Done("loader_worker_killed");
}

// One worker holding several calls dies on the third: the replies of the calls it
// finished in the same batch are lost with it, and the death must not be charged to
// them (it was, to the oldest one: an innocent item named, or every life used up).
int LoaderBatchDeath() {
  auto loader = drover::DataLoader<int64_t>::Create(
      drover::IndexRange{0, 7}, DiesAfterABatch,
      {.num_workers = 1, .prefetch = 8, .on_error = drover::LoaderOptions::OnError::kSkip, .max_retries = 1});
  if (!loader.ok()) return Print("error", Err(loader.status())), 1;
  absl::Status end;
  Print("results", absl::StrJoin(Drain(loader, &end), ","));
  Print("end", Err(end));
  Print("skipped", SkippedText(*loader));
  return Done("loader_batch_death");
}

// pin_memory: even small (inline) results are in this node's store arena, and copy to
// a "device" (host memory here) exactly; a GPU that is not there is a clear error.
int LoaderPinned(bool progress_on) {
  drover::LoaderOptions o{.num_workers = 2, .prefetch = 2, .name = "pinned", .pin_memory = true};
  if (progress_on) o.progress = drover::LoaderOptions::Progress::kOn;
  auto loader = drover::DataLoader<Tensor>::Create(drover::IndexRange{0, 20}, MakeItem, o);
  if (!loader.ok()) return Print("error", Err(loader.status())), 1;
  bool all_in_store = true, copies_exact = true;
  absl::Status gpu;
  for (int64_t i = 0;; ++i) {
    auto t = loader->Next();
    if (!t.ok()) break;
    all_in_store = all_in_store && t->in_store();
    std::vector<float> host(static_cast<size_t>(t->numel()));
    copies_exact = copies_exact && drover::CopyToDevice(*t, -1, host.data()).ok() &&
                   std::equal(host.begin(), host.end(), t->span<float>()->begin());
    if (i == 0) gpu = drover::CopyToDevice(*t, 0, host.data());
  }
  Print("pinned_in_store", all_in_store ? "yes" : "no");
  Print("host_copy", copies_exact ? "exact" : "differs");
  Print("gpu_copy", absl::StatusCodeToString(gpu.code()));
  return Done("loader_pinned");
}
}  // namespace

DROVER_REMOTE(Produce, ProduceTensors, AddToStripe, MakeStripeWorker, &StripeWorker::Add, SumOf, Where, MakeItem, MakeBatch, NodeOfItem, BigItem, Picky,
              ShortItem, DiesOnItem, DiesAfterABatch, MakeTokenizer, &Tokenizer::Encode);

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
  if (scenario == "loader_matches_serial") return LoaderMatchesSerial();
  if (scenario == "loader_memory") return LoaderMemory();
  if (scenario == "loader_failures") return LoaderFailures();
  if (scenario == "loader_worker_killed") return LoaderWorkerKilled();
  if (scenario == "loader_batch_death") return LoaderBatchDeath();
  if (scenario == "loader_short_items") return LoaderShortItems();
  if (scenario == "loader_pinned") return LoaderPinned(argc > 4 && std::string(argv[4]) == "progress");
  std::cerr << "unknown scenario '" << scenario << "'\n";
  return 2;
}
