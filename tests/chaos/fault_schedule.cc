#include "tests/chaos/fault_schedule.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace drover::chaos {
namespace {

// splitmix64: the same numbers from the same seed on every platform and library (the
// standard distributions are implementation-defined).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n).
  uint64_t Below(uint64_t n) { return n == 0 ? 0 : Next() % n; }
  // Uniform in [lo, hi], to the millisecond.
  absl::Duration Between(absl::Duration lo, absl::Duration hi) {
    const int64_t a = absl::ToInt64Milliseconds(lo);
    const int64_t b = absl::ToInt64Milliseconds(hi);
    return absl::Milliseconds(a + static_cast<int64_t>(Below(static_cast<uint64_t>(b - a + 1))));
  }

 private:
  uint64_t state_;
};

bool NeedsNode(FaultKind k) {
  switch (k) {
    case FaultKind::kKillAgent:
    case FaultKind::kKillStore:
    case FaultKind::kStopAgent:
    case FaultKind::kStopStore:
    case FaultKind::kCutNode:
    case FaultKind::kFillSpill:
      return true;
    default:
      return false;
  }
}

// How long the fault lasts; `t` is the node timeout. Stalls and cuts sometimes outlast
// it (the node is declared dead), sometimes not (nothing may fail).
absl::Duration Hold(FaultKind k, absl::Duration t, Rng& rng) {
  const absl::Duration ms300 = absl::Milliseconds(300);
  switch (k) {
    case FaultKind::kKillAgent:
      return rng.Between(absl::Milliseconds(200), absl::Seconds(2));
    case FaultKind::kKillScheduler:
    case FaultKind::kRestartHead:
      return rng.Between(absl::ZeroDuration(), absl::Seconds(2));
    case FaultKind::kKillRedis:
      return rng.Between(absl::Milliseconds(500), absl::Seconds(4));
    case FaultKind::kStopAgent:
    case FaultKind::kStopScheduler:
    case FaultKind::kStopRedis:
      return rng.Between(ms300, t * 1.5);
    case FaultKind::kStopWorker:
      return rng.Between(ms300, absl::Seconds(4));
    case FaultKind::kStopStore:
      return rng.Between(ms300, absl::Seconds(3));
    case FaultKind::kCutNode:
      return rng.Between(absl::Seconds(1), t * 2);
    case FaultKind::kFillSpill:
      return rng.Between(absl::Seconds(2), absl::Seconds(8));
    case FaultKind::kKillWorker:
    case FaultKind::kKillStore:
      return absl::ZeroDuration();
  }
  return absl::ZeroDuration();
}

}  // namespace

const char* FaultKindName(FaultKind kind) {
  switch (kind) {
    case FaultKind::kKillAgent: return "kill-agent";
    case FaultKind::kKillWorker: return "kill-worker";
    case FaultKind::kKillStore: return "kill-store";
    case FaultKind::kKillScheduler: return "kill-scheduler";
    case FaultKind::kKillRedis: return "kill-redis";
    case FaultKind::kStopAgent: return "stop-agent";
    case FaultKind::kStopWorker: return "stop-worker";
    case FaultKind::kStopStore: return "stop-store";
    case FaultKind::kStopScheduler: return "stop-scheduler";
    case FaultKind::kStopRedis: return "stop-redis";
    case FaultKind::kCutNode: return "cut-node";
    case FaultKind::kFillSpill: return "fill-spill";
    case FaultKind::kRestartHead: return "restart-head";
  }
  return "?";
}

std::vector<Fault> MakeSchedule(const ScheduleOptions& o) {
  Rng rng(o.seed);
  std::vector<FaultKind> first;
  for (int k = 0; k < kFaultKinds; ++k) first.push_back(static_cast<FaultKind>(k));
  for (size_t i = first.size(); i > 1; --i) std::swap(first[i - 1], first[rng.Below(i)]);
  std::vector<Fault> out;
  absl::Duration at = rng.Between(absl::Seconds(2), absl::Seconds(4));  // work starts first
  for (size_t i = 0; at <= o.duration || i < first.size(); ++i) {
    Fault f;
    f.at = at;
    f.kind = i < first.size() ? first[i] : static_cast<FaultKind>(rng.Below(kFaultKinds));
    f.node = NeedsNode(f.kind) ? static_cast<int>(rng.Below(std::max(1, o.nodes))) : 0;
    f.pick = rng.Next();
    f.hold = Hold(f.kind, o.node_timeout, rng);
    out.push_back(f);
    at += rng.Between(o.mean_gap / 2, o.mean_gap * 3 / 2);
  }
  return out;
}

std::string Describe(const Fault& f) {
  std::string out = absl::StrFormat("+%.1fs %s", absl::ToDoubleSeconds(f.at), FaultKindName(f.kind));
  if (NeedsNode(f.kind)) absl::StrAppend(&out, " node ", f.node);
  if (f.kind == FaultKind::kKillWorker || f.kind == FaultKind::kStopWorker) {
    absl::StrAppend(&out, " pick ", f.pick % 1000);
  }
  if (f.hold > absl::ZeroDuration()) {
    absl::StrAppend(&out, absl::StrFormat(" for %.1fs", absl::ToDoubleSeconds(f.hold)));
  }
  return out;
}

}  // namespace drover::chaos
