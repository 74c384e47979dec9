// The chaos campaign (docs/reliability.md): starts a real local cluster (scheduler
// with a real redis-server, agents, object stores; each agent in its own network
// namespace where the machine allows), runs the workload (workload.h) on it while the
// fault injector (faults.h) works through a seeded schedule (fault_schedule.h), then
// lets the cluster settle, asks it for new work, stops it, and checks every invariant
// (checks.h). It prints the seed first, every fault as injected, and at the end the
// faults per kind and each invariant's held/violated counts.
//
// Run it as root for everything: network namespaces for node cuts, tmpfs mounts for
// spill directories that can fill, and a private /dev/shm (a mount namespace of its
// own) so every shared-memory name left behind is known to be the cluster's. Without
// root it runs with the documented substitutes and says which.
//
// RunCampaign must be called before the process starts threads (entering a mount
// namespace needs a single-threaded process).
#ifndef DROVER_TESTS_CHAOS_CAMPAIGN_H_
#define DROVER_TESTS_CHAOS_CAMPAIGN_H_

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/chaos/records.h"

namespace drover::chaos {

struct CampaignOptions {
  uint64_t seed = 0;  // 0: drawn from the clock (printed, so the run can be replayed)
  absl::Duration duration = absl::Seconds(60);  // faults start within this
  int nodes = 2;
  absl::Duration mean_gap = absl::Seconds(4);  // between faults
  bool netns = true;        // node cuts through network namespaces, if possible
  bool private_shm = true;  // a /dev/shm of its own, if possible
  uint64_t store_bytes = 64ull << 20;  // each node's object store
  uint64_t spill_bytes = 48ull << 20;  // each node's spill tmpfs
  std::ostream* log = nullptr;         // progress and the report (default std::cout)
};

struct CampaignResult {
  uint64_t seed = 0;
  absl::Duration took;
  std::map<std::string, int> injected;      // fault kind -> count
  std::map<std::string, int> not_injected;  // fault kind -> count (no target, no permission)
  std::vector<std::string> substitutes;     // what ran instead of what, and why
  int violations = 0;
  int unknown_violations = 0;  // of invariants no documented known issue violates
  std::map<std::string, std::vector<std::string>> violated;  // invariant -> details
  std::string summary;                      // what was printed at the end
};

// Errors: the cluster could not be started (the message has the daemons' logs).
absl::StatusOr<CampaignResult> RunCampaign(const CampaignOptions& options);

}  // namespace drover::chaos

#endif  // DROVER_TESTS_CHAOS_CAMPAIGN_H_
