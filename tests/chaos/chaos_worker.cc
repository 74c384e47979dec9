// The chaos campaign's job program: one binary, run by drover as the processes of the
// campaign's jobs. Every line it prints and every object it puts or reads is also
// recorded in its truth file (tests/chaos/truth.h), so the campaign can tell what a
// process really did from what the cluster says it did.
//
//   chaos_worker gang --truth DIR [--steps N] [--step-ms MS]
//       A DDP-style rank: allreduces a small vector over drover::CollectiveGroup each
//       step and checks the sum (a wrong sum exits 42). A broken group exits 1.
//   chaos_worker small --truth DIR [--lines N] [--line-ms MS] [--exit CODE]
//       Prints N numbered lines and exits with CODE.
//   chaos_worker objects --truth DIR [--count N] [--max-kib K] [--timeout-s T]
//       Two ranks on two nodes: rank 0 puts N objects (ids chaos-<job>-<i>, sizes
//       from the job id) and a status object for each; rank 1 reads every one back
//       across nodes and checks each byte (a mismatch exits 42). All but every fourth
//       object are deleted at the end (the stores would otherwise only ever fill).
//   chaos_worker readback --truth DIR --list FILE [--timeout-s T]
//       Reads back every object of FILE ("ID SIZE LOSEABLE" lines), 16 at a time; one
//       that does not come in T seconds gets 30 more unless LOSEABLE is 1 (a fault may
//       have lost it).
//
// Exit codes: 0 done, 1 a cluster operation failed (recorded with its error), 2 bad
// arguments, 3 no truth file, 42 a wrong value (the campaign's violation), other codes
// as asked with --exit.
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/env.h"
#include "drover/collective.h"
#include "drover/objects.h"
#include "tests/chaos/truth.h"

namespace {

using drover::Env;
using drover::chaos::ClearError;
using drover::chaos::Flat;
using drover::chaos::ObjectContent;
using drover::chaos::TruthLog;

struct Args {
  std::string mode;
  std::string truth;
  std::string list;
  int64_t steps = 20;
  int64_t step_ms = 100;
  int64_t lines = 5;
  int64_t line_ms = 50;
  int64_t exit_code = 0;
  int64_t count = 8;
  int64_t max_kib = 2048;
  int64_t timeout_s = 20;
};

int EnvInt(const char* name) { return std::atoi(Env(name, "0").c_str()); }

bool ParseArgs(int argc, char** argv, Args* a) {
  if (argc < 2) return false;
  a->mode = argv[1];
  std::map<std::string, int64_t*> ints = {
      {"--steps", &a->steps},         {"--step-ms", &a->step_ms}, {"--lines", &a->lines},
      {"--line-ms", &a->line_ms},     {"--exit", &a->exit_code},  {"--count", &a->count},
      {"--max-kib", &a->max_kib},     {"--timeout-s", &a->timeout_s}};
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--truth") {
      a->truth = argv[i + 1];
    } else if (flag == "--list") {
      a->list = argv[i + 1];
    } else if (auto it = ints.find(flag); it != ints.end()) {
      if (!absl::SimpleAtoi(argv[i + 1], it->second)) return false;
    } else {
      return false;
    }
  }
  return !a->truth.empty();
}

// This process's truth file: g<generation>-r<rank>.
std::unique_ptr<TruthLog> OpenTruth(const Args& a) {
  return std::make_unique<TruthLog>(
      a.truth, Env("DROVER_JOB_ID", "nojob"),
      absl::StrCat("g", EnvInt("DROVER_GENERATION"), "-r", EnvInt("RANK")));
}

int Gang(const Args& a, TruthLog& truth) {
  const int rank = EnvInt("RANK");
  const int gen = EnvInt("DROVER_GENERATION");
  truth.Say(absl::StrCat("gang rank ", rank, " gen ", gen, " starting"));
  auto group = drover::CollectiveGroup::FromEnvironment("chaos");
  if (!group.ok()) truth.Exit(1, Flat(group.status()));
  const int world = (*group)->size();
  std::vector<float> buf(256);
  for (int64_t step = 0; step < a.steps; ++step) {
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(rank + 1 + step + i);
    absl::Status s =
        (*group)->AllReduce(buf.data(), buf.size(), drover::DType::kFloat32, drover::ReduceOp::kSum);
    if (!s.ok()) truth.Exit(1, absl::StrCat("step ", step, ": ", Flat(s)));
    for (size_t i = 0; i < buf.size(); ++i) {
      const float want = static_cast<float>(world * (world + 1) / 2 + world * (step + i));
      if (buf[i] != want) {
        truth.Exit(42, absl::StrCat("WRONG allreduce at step ", step, " element ", i, ": ",
                                    buf[i], " != ", want));
      }
    }
    truth.Say(absl::StrCat("gang rank ", rank, " gen ", gen, " step ", step, " sum ", buf[0]));
    absl::SleepFor(absl::Milliseconds(a.step_ms));
  }
  truth.Exit(0, "done");
}

int Small(const Args& a, TruthLog& truth) {
  const std::string job = Env("DROVER_JOB_ID");
  const int rank = EnvInt("RANK");
  for (int64_t i = 0; i < a.lines; ++i) {
    truth.Say(absl::StrCat("small ", job, " rank ", rank, " line ", i));
    absl::SleepFor(absl::Milliseconds(a.line_ms));
  }
  truth.Exit(static_cast<int>(a.exit_code), "as asked");
}

// Size of object i of a job: 1 KiB to max_kib KiB, from the id (any reader can tell).
size_t ObjectSize(const std::string& id, int64_t max_kib) {
  uint64_t h = std::hash<std::string>()(id);
  return static_cast<size_t>(1024 + h % static_cast<uint64_t>(std::max<int64_t>(1, max_kib) * 1024));
}

// Reads `id` and checks `size` bytes of ObjectContent; records the outcome.
// Returns false on a mismatch. With `retry`, a read that times out is tried once more
// for that long before it is recorded (a busy machine, a restore from spill).
bool ReadBack(drover::Objects& objects, TruthLog& truth, const std::string& id, size_t size,
              absl::Duration timeout, absl::Duration retry = absl::ZeroDuration()) {
  auto got = objects.Get(id, timeout);
  if (!got.ok() && absl::IsDeadlineExceeded(got.status()) && retry > absl::ZeroDuration()) {
    got = objects.Get(id, retry);
  }
  if (!got.ok()) {
    truth.Record(absl::StrCat("got ", id, " error ", Flat(got.status()),
                              ClearError(got.status()) ? "" : " (UNCLEAR)"));
    return true;
  }
  if (got->view() != ObjectContent(id, size)) {
    truth.Record(absl::StrCat("got ", id, " MISMATCH ", got->size(), " bytes, want ", size));
    return false;
  }
  truth.Record(absl::StrCat("got ", id, " ok"));
  return true;
}

int ObjectsMode(const Args& a, TruthLog& truth) {
  const std::string job = Env("DROVER_JOB_ID");
  const int rank = EnvInt("RANK");
  const absl::Duration timeout = absl::Seconds(a.timeout_s);
  auto objects = drover::Objects::FromEnvironment();
  if (!objects.ok()) truth.Exit(1, Flat(objects.status()));
  auto id_of = [&](int64_t i) { return absl::StrCat("chaos-", job, "-", i); };
  const std::string done_id = absl::StrCat("chaos-", job, "-read");
  if (rank == 0) {
    for (int64_t i = 0; i < a.count; ++i) {
      const std::string id = id_of(i);
      const size_t size = ObjectSize(id, a.max_kib);
      absl::Status s = (*objects)->Put(id, ObjectContent(id, size));
      // An ALREADY_EXISTS after a restart of this generation is the same object.
      if (s.ok() || absl::IsAlreadyExists(s)) {
        truth.Record(absl::StrCat("put ", id, " ", size));
      } else {
        truth.Record(absl::StrCat("put-failed ", id, " ", Flat(s),
                                  ClearError(s) ? "" : " (UNCLEAR)"));
      }
      absl::Status st = (*objects)->Put(id + ".s", s.ok() || absl::IsAlreadyExists(s)
                                                       ? absl::StrCat("ok ", size)
                                                       : std::string("failed"));
      if (!st.ok() && !absl::IsAlreadyExists(st)) truth.Exit(1, "status object: " + Flat(st));
    }
    truth.Say(absl::StrCat("objects ", job, " put ", a.count));
    // Wait for the reader, then free 3 in 4 (the rest stays for the final read-back).
    auto read = (*objects)->Get(done_id, timeout * a.count);
    for (int64_t i = 1; read.ok() && i < a.count; ++i) {
      if (i % 4 == 0) continue;
      if ((*objects)->Delete(id_of(i)).ok()) truth.Record(absl::StrCat("deleted ", id_of(i)));
    }
    truth.Exit(read.ok() ? 0 : 1, read.ok() ? "done" : Flat(read.status()));
  }
  bool wrong = false;
  for (int64_t i = 0; i < a.count; ++i) {
    const std::string id = id_of(i);
    auto status = (*objects)->Get(id + ".s", timeout);
    if (!status.ok()) {
      truth.Record(absl::StrCat("got ", id + ".s", " error ", Flat(status.status()),
                                ClearError(status.status()) ? "" : " (UNCLEAR)"));
      continue;
    }
    size_t size = 0;
    absl::string_view text = status->view();
    if (!absl::ConsumePrefix(&text, "ok ")) continue;  // its put failed (recorded by rank 0)
    if (!absl::SimpleAtoi(text, &size) || size != ObjectSize(id, a.max_kib)) {
      truth.Record(absl::StrCat("got ", id, ".s MISMATCH ", status->view()));
      wrong = true;
      continue;
    }
    wrong |= !ReadBack(**objects, truth, id, size, timeout);
  }
  truth.Say(absl::StrCat("objects ", job, " read ", a.count));
  absl::Status s = (*objects)->Put(done_id, "1");
  if (wrong) truth.Exit(42, "WRONG object contents");
  truth.Exit(s.ok() || absl::IsAlreadyExists(s) ? 0 : 1, "done");
}

int Readback(const Args& a, TruthLog& truth) {
  std::ifstream in(a.list);
  struct Item {
    std::string id;
    size_t size;
    bool loseable;
  };
  std::vector<Item> items;
  std::string id;
  size_t size;
  int loseable;
  while (in >> id >> size >> loseable) items.push_back({id, size, loseable != 0});
  auto objects = drover::Objects::FromEnvironment();
  if (!objects.ok()) truth.Exit(1, Flat(objects.status()));
  std::atomic<size_t> next{0};
  std::atomic<bool> wrong{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&] {
      for (size_t i; (i = next++) < items.size();) {
        if (!ReadBack(**objects, truth, items[i].id, items[i].size, absl::Seconds(a.timeout_s),
                      items[i].loseable ? absl::ZeroDuration() : absl::Seconds(30))) {
          wrong = true;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  truth.Say(absl::StrCat("readback of ", items.size(), " objects on ", Env("DROVER_NODE_ID")));
  if (wrong) truth.Exit(42, "WRONG object contents");
  truth.Exit(0, "done");
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!ParseArgs(argc, argv, &a)) {
    std::cerr << "usage: chaos_worker gang|small|objects|readback --truth DIR [flags]\n";
    return 2;
  }
  std::unique_ptr<TruthLog> truth = OpenTruth(a);
  if (a.mode == "gang") return Gang(a, *truth);
  if (a.mode == "small") return Small(a, *truth);
  if (a.mode == "objects") return ObjectsMode(a, *truth);
  if (a.mode == "readback") return Readback(a, *truth);
  truth->Exit(2, "unknown mode " + a.mode);
}
