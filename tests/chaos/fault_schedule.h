// The chaos campaign's fault schedule: a pure function of a seed, the run's length
// and the node count, so `--seed S` replays the same faults in the same order at the
// same offsets against the same targets. (What the cluster does in between is not
// deterministic: processes race. A replay reproduces the faults, not every outcome.)
//
// Faults are injected one at a time: each starts at its offset or when the one before
// it is over (its daemon restarted, its process resumed, its link up), whichever is
// later.
#ifndef DROVER_TESTS_CHAOS_FAULT_SCHEDULE_H_
#define DROVER_TESTS_CHAOS_FAULT_SCHEDULE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace drover::chaos {

enum class FaultKind {
  kKillAgent,      // SIGKILL a node agent (its workers and store go with it); restart it
  kKillWorker,     // SIGKILL a process of a running job or a task worker
  kKillStore,      // SIGKILL a node's object store (its agent restarts it, empty)
  kKillScheduler,  // SIGKILL the scheduler; restart it on the same port and Redis
  kKillRedis,      // SIGKILL redis-server; restart it (AOF: the data stays)
  kStopAgent,      // SIGSTOP, then SIGCONT: a stalled process
  kStopWorker,
  kStopStore,
  kStopScheduler,
  kStopRedis,
  kCutNode,    // the node's network link down, then up (or, without network
               // namespaces, its agent and store stopped: docs/reliability.md)
  kFillSpill,  // the node's spill directory filled up by a file of someone else's
  kRestartHead,  // SIGKILL the scheduler (every other time its Redis too); `drover up`
                 // brings the head back, as a person would
};
constexpr int kFaultKinds = 13;

// "kill-agent", "stop-redis", "cut-node", ...
const char* FaultKindName(FaultKind kind);

struct Fault {
  absl::Duration at;    // earliest start, from the campaign's start
  FaultKind kind;
  int node = 0;         // target node index (agents, stores, cuts, spill); else 0
  uint64_t pick = 0;    // picks among targets found at run time (workers): pick % n
  absl::Duration hold;  // how long a stop, cut or fill lasts, or a killed daemon stays down
};

struct ScheduleOptions {
  uint64_t seed = 1;
  absl::Duration duration = absl::Seconds(60);  // no fault starts later than this
  int nodes = 2;
  absl::Duration mean_gap = absl::Seconds(4);   // between one fault's start and the next
  // The agents' node timeout: some stalls and cuts last longer (the node is declared
  // dead), others do not (nothing may fail).
  absl::Duration node_timeout = absl::Seconds(5);
};

// The schedule: every kind once, in an order drawn from the seed, then kinds drawn at
// random, until `duration`. Stable for a given options value.
std::vector<Fault> MakeSchedule(const ScheduleOptions& options);

// One line, e.g. "+12.3s stop-agent node 1 for 6.2s".
std::string Describe(const Fault& f);

}  // namespace drover::chaos

#endif  // DROVER_TESTS_CHAOS_FAULT_SCHEDULE_H_
