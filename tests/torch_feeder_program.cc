// The C++ side of torch_consumer_test: it writes what tests/torch_consumer.py (a
// PyTorch process using the Python module) reads, and is the worker program of that
// process's DataLoaders.
//
//   torch_feeder_program feed QUEUE          a driver: puts one item into a new queue
//       named QUEUE (a sealed store tensor written in place, a SharedTensor, a small
//       tensor, and where its pages are in this process), then plays ping-pong with
//       the consumer through the SharedTensor's elements
//   torch_feeder_program serial SEED N       MakeItem's checksums, serially, here
//   torch_feeder_program put_and_wait FILE   a driver: puts a store tensor, prints its
//       object id, and keeps it until FILE exists
//   torch_feeder_program answer QUEUE N      a driver: puts N items into QUEUE and
//       checks the answers the consumer puts into QUEUE-answers (read in place)
//   torch_feeder_program drain QUEUE N       a driver: puts N items into QUEUE
//       (keep_until_drained), closes it and returns from main before they are taken
//   (started by an agent)                    a worker serving MakeItem
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "drover/drover.h"
#include "drover/data_loader.h"
#include "drover/queue.h"
#include "drover/shared_tensor.h"
#include "tests/util/program_output.h"

// Item `index` of the loader test: an int32 [64, 1024] tensor (256 KiB: a store object)
// that depends only on the index and the item's seed.
absl::StatusOr<drover::Tensor> MakeItem(int64_t index, uint64_t seed) {
  absl::StatusOr<drover::Tensor> t = drover::Tensor::Empty(drover::DType::kInt32, {64, 1024});
  if (!t.ok()) return t.status();
  absl::Span<int32_t> v = *t->mutable_span<int32_t>();
  for (size_t k = 0; k < v.size(); ++k) {
    const int64_t x = index * 1000003 + static_cast<int64_t>(seed % 1000) + static_cast<int64_t>(k) * 7;
    v[k] = static_cast<int32_t>(x % 1000);
  }
  return t;
}

// A batch of the loader test's batched inputs (pairs, or plain indices of a range):
// each pair's product (an index: itself) plus the batch's seed's last digit, summed;
// checks how Python packs a batch of inputs.
int64_t SumPairs(std::vector<std::vector<int64_t>> pairs, uint64_t seed) {
  int64_t sum = 0;
  for (const std::vector<int64_t>& p : pairs) sum += p.at(0) * p.at(1);
  return sum * 10 + static_cast<int64_t>(seed % 10);
}
int64_t SumIndices(std::vector<int64_t> indices, uint64_t seed) {
  int64_t sum = 0;
  for (int64_t i : indices) sum += i;
  return sum * 10 + static_cast<int64_t>(seed % 10);
}

DROVER_REMOTE(MakeItem, SumPairs, SumIndices);

namespace {

using drover::testing::Expect;
using drover::testing::Print;

// What torch_consumer.py computes of a MakeItem tensor.
int64_t Checksum(const drover::Tensor& t) {
  absl::Span<const int32_t> v = *t.span<int32_t>();
  int64_t sum = 0;
  for (size_t k = 0; k < v.size(); ++k) sum += int64_t{v[k]} * static_cast<int64_t>(k % 97 + 1);
  return sum;
}

// "inode:file offset:permissions" of the page holding `p` in this process (from
// /proc/self/maps): two processes viewing the same memory report the same inode and
// offset.
std::string Mapping(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    std::string range, perms, offset, dev, inode;
    in >> range >> perms >> offset >> dev >> inode;
    const size_t dash = range.find('-');
    uint64_t lo = 0, hi = 0, off = 0;
    if (!absl::SimpleHexAtoi(range.substr(0, dash), &lo) || !absl::SimpleHexAtoi(range.substr(dash + 1), &hi) ||
        !absl::SimpleHexAtoi(offset, &off)) {
      continue;
    }
    if (a >= lo && a < hi) return absl::StrCat(inode, ":", off + (a - lo), ":", perms);
  }
  return "none";
}

// The item: MSGPACK_DEFINE_MAP makes it a dict in Python.
struct FeedItem {
  drover::Tensor sealed;
  drover::SharedTensor shared;
  drover::Tensor small;
  std::string sealed_id;
  std::string sealed_mapping;
  std::string shared_mapping;
  MSGPACK_DEFINE_MAP(sealed, shared, small, sealed_id, sealed_mapping, shared_mapping);
};

// Waits up to a minute for element `i` of `s` to become `want` (written by the consumer).
bool Await(absl::Span<float> s, size_t i, float want) {
  const absl::Time deadline = absl::Now() + absl::Minutes(1);
  while (absl::Now() < deadline) {
    if (reinterpret_cast<volatile float*>(s.data())[i] == want) return true;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return false;
}

int RunFeed(const std::string& queue) {
  auto q = drover::Queue<FeedItem>::Create({.capacity = 2, .name = queue});
  if (!q.ok()) return Print("error", q.status().ToString()), 1;
  auto shared = drover::SharedTensor::Create(drover::DType::kFloat32, {1024});
  if (!shared.ok()) return Print("error", shared.status().ToString()), 1;
  absl::Span<float> s = *shared->span<float>();
  s[0] = 1;
  FeedItem item;
  item.shared = *shared;
  item.shared_mapping = Mapping(s.data());
  {
    // 256 KiB written in place in the store, sealed where it is by the put.
    absl::StatusOr<drover::Tensor> t = drover::AllocateInStore(drover::DType::kFloat32, {256, 256});
    if (!t.ok()) return Print("error", t.status().ToString()), 1;
    absl::Span<float> v = *t->mutable_span<float>();
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f;
    item.sealed = *t;
    item.sealed_id = t->object_id();
    item.sealed_mapping = Mapping(t->raw_data());
  }
  item.small = *drover::Tensor::FromVector<int32_t>({1, 2, 3});
  // The put seals the tensor in place. This process keeps no hold on it after: the
  // item, and then its consumer, owns it.
  absl::Status put = q->Put(item, absl::Seconds(30));
  Expect(put.ok(), "put", put);
  absl::Status closed = q->Close();  // the stream ends after this item
  Expect(closed.ok(), "close", closed);
  Print("writer_pid", std::to_string(::getpid()));
  item.sealed = drover::Tensor();
  // Ping-pong through the shared pages: the consumer writes 42, we answer 7, it says 99.
  const bool got42 = Await(s, 1, 42);
  if (got42) s[2] = 7;
  const bool got99 = got42 && Await(s, 3, 99);
  Print("pingpong", got42 && got99 ? "ok" : absl::StrCat("stuck (got42=", got42, ")"));
  return drover::testing::ProgramFailures() == 0 ? 0 : 1;
}

int Serial(uint64_t seed, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    absl::StatusOr<drover::Tensor> t = MakeItem(i, drover::ItemSeed(seed, i));
    Print(absl::StrCat("item_", i), t.ok() ? std::to_string(Checksum(*t)) : t.status().ToString());
  }
  return 0;
}

int PutAndWait(const std::string& file) {
  absl::StatusOr<drover::Tensor> t = drover::AllocateInStore(drover::DType::kFloat32, {256, 256});
  if (!t.ok()) return Print("error", t.status().ToString()), 1;
  drover::ObjectRef<drover::Tensor> ref = drover::Put(*t);  // sealed in place: an object of this cluster
  Print("object_id", t->object_id());
  const absl::Time deadline = absl::Now() + absl::Minutes(2);
  while (absl::Now() < deadline && ::access(file.c_str(), F_OK) != 0) absl::SleepFor(absl::Milliseconds(20));
  return 0;
}

// An item of the answer and drain modes: a dict {"index": i, "x": 256x256 of i}.
struct WorkItem {
  int64_t index = 0;
  drover::Tensor x;
  MSGPACK_DEFINE_MAP(index, x);
};

// The consumer's answer (a Python dict read as a struct, by its keys).
struct Answer {
  int64_t index = 0;
  double total = 0;
  drover::Tensor y;
  std::string note;
  MSGPACK_DEFINE_MAP(index, total, y, note);
};

absl::StatusOr<WorkItem> MakeWork(int64_t i) {
  absl::StatusOr<drover::Tensor> t = drover::AllocateInStore(drover::DType::kFloat32, {256, 256});
  if (!t.ok()) return t.status();
  for (float& v : *t->mutable_span<float>()) v = static_cast<float>(i);
  return WorkItem{i, *std::move(t)};
}

int RunAnswer(const std::string& name, int64_t n) {
  auto work = drover::Queue<WorkItem>::Create({.name = name});
  if (!work.ok()) return Print("error", work.status().ToString()), 1;
  auto answers = drover::Queue<Answer>::Create({.name = name + "-answers"});
  if (!answers.ok()) return Print("error", answers.status().ToString()), 1;
  for (int64_t i = 0; i < n; ++i) {
    absl::StatusOr<WorkItem> item = MakeWork(i);
    if (!item.ok()) return Print("error", item.status().ToString()), 1;
    absl::Status put = work->Put(*item, absl::Seconds(30));
    Expect(put.ok(), "put", put);
  }
  Expect(work->Close().ok(), "close", "failed");
  int64_t got = 0;
  bool values_ok = true;
  bool in_store = true;
  while (true) {
    absl::StatusOr<Answer> a = answers->Get(absl::Minutes(2));
    if (!a.ok()) {
      Print("answers_end", std::string(absl::StatusCodeToString(a.status().code())));
      break;
    }
    // y was written once by Python into this node's store: read in place.
    in_store = in_store && !a->y.object_id().empty();
    absl::StatusOr<absl::Span<const float>> y = a->y.span<float>();
    values_ok = values_ok && y.ok() && y->size() == 256 * 256 && a->index == got &&
                a->total == 256.0 * 256.0 * static_cast<double>(a->index) &&
                a->note == absl::StrCat("answer ", a->index);
    if (y.ok()) {
      for (float v : *y) values_ok = values_ok && v == 2.0f * static_cast<float>(a->index);
    }
    ++got;
  }
  Print("answers", std::to_string(got));
  Print("answers_ok", values_ok ? "true" : "false");
  Print("answers_in_store", in_store ? "true" : "false");
  return drover::testing::ProgramFailures() == 0 ? 0 : 1;
}

int RunDrain(const std::string& name, int64_t n) {
  auto q = drover::Queue<WorkItem>::Create({.name = name, .keep_until_drained = true});
  if (!q.ok()) return Print("error", q.status().ToString()), 1;
  for (int64_t i = 0; i < n; ++i) {
    absl::StatusOr<WorkItem> item = MakeWork(i);
    if (!item.ok()) return Print("error", item.status().ToString()), 1;
    absl::Status put = q->Put(*item, absl::Seconds(30));
    Expect(put.ok(), "put", put);
  }
  // No Close, no wait for the consumer: main returns, and drover's exit closes the
  // queue and keeps the job until the consumer took every item.
  Print("main_done", "1");
  return drover::testing::ProgramFailures() == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (drover::RunningAsWorker()) drover::Init(argc, argv).IgnoreError();  // serves, never returns
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "serial" && argc == 4) {
    uint64_t seed = 0;
    int64_t n = 0;
    if (!absl::SimpleAtoi(argv[2], &seed) || !absl::SimpleAtoi(argv[3], &n)) return 2;
    return Serial(seed, n);
  }
  if ((mode == "answer" || mode == "drain") && argc == 4) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(argv[3], &n)) return 2;
    if (absl::Status s = drover::Init(argc, argv); !s.ok()) return Print("error", s.ToString()), 1;
    return mode == "answer" ? RunAnswer(argv[2], n) : RunDrain(argv[2], n);
  }
  if ((mode == "feed" || mode == "put_and_wait") && argc == 3) {
    if (absl::Status s = drover::Init(argc, argv); !s.ok()) return Print("error", s.ToString()), 1;
    return mode == "feed" ? RunFeed(argv[2]) : PutAndWait(argv[2]);
  }
  std::cerr << "usage: torch_feeder_program feed QUEUE | serial SEED N | put_and_wait FILE | answer QUEUE N | "
               "drain QUEUE N\n";
  return 2;
}
