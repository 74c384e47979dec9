// The chaos campaign's SDK client under a store kill (faults.h, kill-store): one rank
// per node, each a drover::Put/Get program on its node's object store.
//
//   chaos_store_client DIR
//
// Each rank puts an "anchor" object (kept in the store, never inline), writes "ready MS"
// to DIR/<node id>.out, then puts and gets 1 MiB objects in a loop. The campaign kills
// one node's store and, once its agent has started a new one, creates DIR/go. After
// `go`: "recovered MS" when the first round started after it succeeded (Unix ms),
// "errors N" (rounds that failed meanwhile), "slow round ..." for a round over 5 s
// (the first 3), and after 3 good rounds "anchor WHAT":
// what a Get of the anchor says ("ok", or "CODE: message"; lost with a killed store, it
// is NOT_FOUND naming the node and the restart; "unstored CODE: message" before "ready"
// if the anchor could not be put at all). Then it waits for DIR/stop (at most
// 2 minutes) and exits 0. Every line is one write, appended.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "drover/task.h"
#include "sdk/internal/runtime_internal.h"

namespace {

std::vector<uint8_t> Blob(int64_t n, int64_t seed) {
  std::vector<uint8_t> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>((i * 29 + seed) & 0xff);
  return v;
}

constexpr int64_t kSize = int64_t{1} << 20;  // kept in the store, never inline

class Out {
 public:
  explicit Out(const std::string& path)
      : fd_(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) {}
  void Line(const std::string& text) {
    const std::string l = text + "\n";
    if (fd_ >= 0) (void)!::write(fd_, l.data(), l.size());
  }

 private:
  int fd_;
};

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

std::string Describe(const absl::Status& s) {
  return absl::StrCat(absl::StatusCodeToString(s.code()), ": ", s.message());
}

}  // namespace

int main(int argc, char** argv) {
  absl::Status init = drover::Init(argc, argv);
  if (argc < 2) {
    std::cerr << "usage: chaos_store_client DIR\n";
    return 2;
  }
  const std::string dir = argv[1];
  const char* node = std::getenv("DROVER_NODE_ID");
  Out out(absl::StrCat(dir, "/", node != nullptr ? node : "unknown", ".out"));
  if (!init.ok()) {
    out.Line("init " + Describe(init));
    return 1;
  }
  // The anchor must be in the store before the kill, or its Get afterwards answers the
  // put's own failure (RESOURCE_EXHAUSTED while a fill-spill fault keeps the store
  // full), not the loss. Put again until it is stored (bounded: the campaign waits 30 s
  // for "ready"); one never stored is said so ("unstored"), and judged as such.
  // Asked of the store, not by a Get: a Get would cache the value in this process.
  auto stored = [](const drover::ObjectRef<std::vector<uint8_t>>& ref) -> absl::Status {
    drover::object_store::Client* store = drover::internal::LocalStore();
    if (store == nullptr) return absl::FailedPreconditionError("no object store on this node");
    absl::StatusOr<bool> in = store->Contains(ref.id());
    if (!in.ok()) return in.status();
    if (*in) return absl::OkStatus();
    // Not there: the put failed; its Get answers why (without caching anything).
    absl::Status why = drover::Get(ref, absl::ZeroDuration()).status();
    return why.ok() ? absl::NotFoundError("the anchor is not in the store") : why;
  };
  auto anchor = drover::Put(Blob(kSize, 7));
  absl::Status anchored = stored(anchor);
  for (const absl::Time until = absl::Now() + absl::Seconds(20);
       !anchored.ok() && absl::Now() < until;) {
    absl::SleepFor(absl::Milliseconds(200));
    anchor = drover::Put(Blob(kSize, 7));
    anchored = stored(anchor);
  }
  if (!anchored.ok()) out.Line("unstored " + Describe(anchored));
  out.Line(absl::StrCat("ready ", absl::ToUnixMillis(absl::Now())));
  const std::string go = dir + "/go";
  const std::string stop = dir + "/stop";
  const absl::Time give_up = absl::Now() + absl::Minutes(2);
  int after = 0;
  int errors = 0;
  int slow = 0;
  for (int64_t i = 0; after < 3 && absl::Now() < give_up && !Exists(stop); ++i) {
    const bool killed = Exists(go);
    const absl::Time start = absl::Now();
    auto ref = drover::Put(Blob(kSize, i));
    const absl::Time put = absl::Now();
    absl::StatusOr<std::vector<uint8_t>> back = drover::Get(ref, absl::Seconds(30));
    // A round that takes long says where its time went (the campaign's judge waits
    // 30 s for a client to be back; one long round alone can use that up).
    if (absl::Now() - start > absl::Seconds(5) && slow++ < 3) {
      out.Line(absl::StrCat("slow round ", i, ": put ", absl::FormatDuration(put - start),
                            ", get ", absl::FormatDuration(absl::Now() - put), ": ",
                            back.ok() ? std::string("ok") : Describe(back.status())));
    }
    if (!back.ok() || *back != Blob(kSize, i)) {
      if (errors++ < 3) out.Line("error " + (back.ok() ? "wrong bytes" : Describe(back.status())));
      continue;
    }
    if (!killed) {
      absl::SleepFor(absl::Milliseconds(20));  // gentle on a shared 2-core machine
      continue;
    }
    if (after++ == 0) out.Line(absl::StrCat("recovered ", absl::ToUnixMillis(absl::Now())));
  }
  out.Line(absl::StrCat("errors ", errors));
  if (after > 0) {
    absl::StatusOr<std::vector<uint8_t>> a = drover::Get(anchor, absl::Seconds(10));
    out.Line("anchor " + (a.ok() ? std::string(*a == Blob(kSize, 7) ? "ok" : "wrong bytes")
                                 : Describe(a.status())));
  }
  while (!Exists(stop) && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(100));
  drover::Shutdown();
  return 0;
}
