// The chaos campaign's task program: its own driver and, started by the agents, its
// own workers (sdk/include/drover/task.h). Run as a plain program it is a driver job of
// its own; under `drover run` it joins that job.
//
//   chaos_tasks --truth DIR [--rounds N] [--pause-ms MS]
//
// --pause-ms: a pause between rounds (longer than 200 ms, the owner's leases go back
// in between, so each round asks for workers again).
//
// Each round: tasks spread over the nodes, an actor's calls in order, and inside a job
// (where the driver has a node's store) a put read by tasks on other nodes and a
// result large enough to go through a worker's store.
// Every check is recorded in the truth file (<DIR>/<job>/driver.truth): "check ok
// WHAT", "check error WHAT: CODE message" (a task or actor failed and said so) or
// "check WRONG WHAT: ..." (a value that is not the right one: the campaign's
// violation, exit 42). Errors are expected while faults are injected; the campaign
// decides whether a fault explains them.
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "drover/task.h"
#include "tests/chaos/truth.h"

namespace {

int64_t Add(int64_t a, int64_t b) { return a + b; }

std::vector<uint8_t> Blob(int64_t n, int64_t seed) {
  std::vector<uint8_t> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>((i * 131 + seed) & 0xff);
  return v;
}

int64_t Checksum(std::vector<uint8_t> v) {
  int64_t s = 0;
  for (uint8_t b : v) s = s * 131 + b;
  return s;
}

class Counter {
 public:
  int64_t Next() { return ++value_; }

 private:
  int64_t value_ = 0;
};
Counter* MakeCounter() { return new Counter(); }

}  // namespace

DROVER_REMOTE(Add, Blob, Checksum, MakeCounter, &Counter::Next);

namespace {

constexpr absl::Duration kGetTimeout = absl::Seconds(30);

class Checker {
 public:
  explicit Checker(drover::chaos::TruthLog& truth) : truth_(truth) {}

  // Records whether `got` is `want`.
  template <typename T>
  void Expect(const std::string& what, const absl::StatusOr<T>& got, const T& want) {
    if (!got.ok()) {
      ++errors_;
      truth_.Record(absl::StrCat("check error ", what, ": ", drover::chaos::Flat(got.status())));
    } else if (*got != want) {
      ++wrong_;
      truth_.Record(absl::StrCat("check WRONG ", what, ": a different value"));
    } else {
      truth_.Record(absl::StrCat("check ok ", what));
    }
  }
  int errors() const { return errors_; }
  int wrong() const { return wrong_; }

 private:
  drover::chaos::TruthLog& truth_;
  int errors_ = 0;
  int wrong_ = 0;
};

// `with_store`: this process runs on a node (inside a job), so it can put large values
// and read results stored on other nodes. A plain driver off the cluster cannot: its
// Put of a large value and its Get of a stored result fail with FAILED_PRECONDITION
// ("this node has no object store"), by design.
void Round(int round, bool with_store, Checker& check) {
  const std::string r = absl::StrCat("round ", round, " ");
  std::vector<drover::ObjectRef<int64_t>> sums;
  for (int64_t i = 0; i < 16; ++i) {
    sums.push_back(drover::Task(Add).SetSpread().Remote(i, int64_t{1000 * round}));
  }
  for (int64_t i = 0; i < 16; ++i) {
    check.Expect(absl::StrCat(r, "add ", i), drover::Get(sums[i], kGetTimeout), i + 1000 * round);
  }

  auto counter = drover::Actor(MakeCounter).Remote();
  std::vector<drover::ObjectRef<int64_t>> next;
  for (int i = 0; i < 8; ++i) next.push_back(counter.Task(&Counter::Next).Remote());
  for (int64_t i = 0; i < 8; ++i) {
    check.Expect(absl::StrCat(r, "actor call ", i), drover::Get(next[i], kGetTimeout), i + 1);
  }

  if (!with_store) return;
  const std::vector<uint8_t> blob = Blob(256 << 10, round);
  auto put = drover::Put(blob);
  for (int i = 0; i < 2; ++i) {
    check.Expect(absl::StrCat(r, "checksum of a put ", i),
                 drover::Get(drover::Task(Checksum).SetSpread().Remote(put), kGetTimeout),
                 Checksum(blob));
  }
  check.Expect(absl::StrCat(r, "stored result"),
               drover::Get(drover::Task(Blob).SetSpread().Remote(int64_t{300 << 10},
                                                                 int64_t{round}),
                           kGetTimeout),
               Blob(300 << 10, round));
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  int64_t rounds = 3;
  int64_t pause_ms = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--truth") {
      dir = argv[i + 1];
    } else if (!(flag == "--rounds" && absl::SimpleAtoi(argv[i + 1], &rounds)) &&
               !(flag == "--pause-ms" && absl::SimpleAtoi(argv[i + 1], &pause_ms))) {
      dir.clear();
      break;
    }
  }
  absl::Status init = drover::Init(argc, argv);  // in a worker: serves, never returns
  if (dir.empty()) {
    std::cerr << "usage: chaos_tasks --truth DIR [--rounds N] [--pause-ms MS]\n";
    return 2;
  }
  if (!init.ok()) {
    std::cerr << "chaos_tasks: Init: " << init << std::endl;
    // Inside a job, the exit is part of the job's truth (its reason will name it).
    if (const char* job = std::getenv("DROVER_JOB_ID"); job != nullptr) {
      drover::chaos::TruthLog(dir, job, "driver").Exit(1, "Init: " + drover::chaos::Flat(init));
    }
    return 1;
  }
  std::cout << "chaos_tasks job " << drover::JobId() << std::endl;
  drover::chaos::TruthLog truth(dir, drover::JobId(), "driver");
  Checker check(truth);
  for (int round = 0; round < rounds; ++round) {
    Round(round, std::getenv("DROVER_OBJECT_STORE_SOCKET") != nullptr, check);
    truth.Say(absl::StrCat("tasks ", drover::JobId(), " round ", round, " errors ", check.errors()));
    absl::SleepFor(absl::Milliseconds(pause_ms));
  }
  drover::Shutdown();
  if (check.wrong() > 0) truth.Exit(42, absl::StrCat(check.wrong(), " WRONG values"));
  truth.Exit(0, absl::StrCat("done with ", check.errors(), " errors"));
}
