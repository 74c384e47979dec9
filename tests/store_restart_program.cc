// A task program for store_restart_test: its own driver and workers. As a driver it
// keeps a large Put and a task's large result in this node's object store, prints
// "ready=1", then puts and gets 1 MiB objects in a loop. The test SIGKILLs the node's
// object store and then creates `go` (argv[1]); the loop goes on until 20 rounds
// started after `go` appeared have succeeded, and the program prints:
//   recovered_ms  Unix ms when the first of them succeeded
//   errors        how many rounds failed (a storm of instant errors is the bug)
//   fill          the store filled with pinned objects first: RESOURCE_EXHAUSTED once full
//   put_after     what Get says of the Put made before the kill (lost: NOT_FOUND), with
//                 the store full
//   made_after    "rebuilt" if the task's result was made again by its task
#include <unistd.h>

#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "drover/task.h"
#include "sdk/internal/runtime_internal.h"
#include "tests/util/program_output.h"

namespace {

std::vector<uint8_t> Blob(int64_t n, int seed) {
  std::vector<uint8_t> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>((i * 31 + seed) & 0xff);
  return v;
}

DROVER_REMOTE(Blob);

using drover::testing::Print;

std::string Describe(const absl::Status& s) {
  return absl::StrCat(absl::StatusCodeToString(s.code()), ": ", s.message());
}

constexpr int64_t kSize = int64_t{1} << 20;  // kept in the store, never inline

int Run(const std::string& go) {
  auto put = drover::Put(Blob(kSize, 2));
  auto made = drover::Task(Blob).Remote(kSize, 1);
  // Wait, not Get: a Get would cache the value in this process.
  drover::Wait(std::vector<drover::ObjectRef<std::vector<uint8_t>>>{put, made}, 2,
               absl::Seconds(60));
  Print("ready", "1");
  int errors = 0;
  int after = 0;
  int64_t recovered_ms = 0;
  std::string first_error;
  const absl::Time give_up = absl::Now() + absl::Seconds(120);
  for (int i = 0; after < 20 && absl::Now() < give_up; ++i) {
    const bool killed = ::access(go.c_str(), F_OK) == 0;
    auto ref = drover::Put(Blob(kSize, i));
    absl::StatusOr<std::vector<uint8_t>> back = drover::Get(ref, absl::Seconds(30));
    if (!back.ok() || *back != Blob(kSize, i)) {
      if (errors++ == 0) first_error = back.ok() ? "wrong bytes" : Describe(back.status());
      continue;
    }
    if (killed && after++ == 0) recovered_ms = absl::ToUnixMillis(absl::Now());
  }
  Print("rounds_after_kill", std::to_string(after));
  Print("recovered_ms", std::to_string(recovered_ms));
  Print("errors", std::to_string(errors));
  Print("first_error", first_error);
  // The store full of pinned objects (as under the chaos campaign's fill-spill): what
  // the lost Put's Get answers must not depend on free space.
  drover::object_store::Client* store = drover::internal::LocalStore();
  std::vector<drover::object_store::ObjectRef> pins;
  std::vector<std::string> fills;
  absl::Status fill;
  const std::vector<uint8_t> fill_bytes = Blob(kSize, 3);
  for (int i = 0; store != nullptr && fill.ok() && i < 4096; ++i) {
    fills.push_back(absl::StrCat("fill-", ::getpid(), "-", i));
    fill = store->Put(fills.back(), fill_bytes);
    if (!fill.ok()) break;
    auto pin = store->Get(fills.back(), absl::ZeroDuration());
    if (pin.ok()) pins.push_back(*std::move(pin));
  }
  Print("fill", absl::StatusCodeToString(fill.code()));
  auto p = drover::Get(put, absl::Seconds(60));
  Print("put_after", p.ok() ? "ok?" : Describe(p.status()));
  // Room again for the task's result to be made anew.
  if (store != nullptr) {
    store->Release(&pins);
    for (const std::string& id : fills) (void)store->Delete(id);
  }
  auto m = drover::Get(made, absl::Seconds(60));
  Print("made_after", m.ok() ? (*m == Blob(kSize, 1) ? "rebuilt" : "wrong bytes")
                             : Describe(m.status()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::Status init = drover::Init(argc, argv);
  if (!init.ok()) {
    std::cerr << "Init: " << init << "\n";
    return 2;
  }
  if (argc < 2) {
    std::cerr << "usage: store_restart_program GO_FILE\n";
    return 2;
  }
  return Run(argv[1]);
}
