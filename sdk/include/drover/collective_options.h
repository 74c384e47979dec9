// drover::CollectiveOptions: how a collective group is made (its name, rank and size,
// the rendezvous scope, backend and algorithm, timeouts). One definition: the SDK's
// drover::CollectiveGroup (drover/collective.h) and the implementation
// (collective/group.h, where it is collective::GroupOptions) take this same struct.
// A plain value; no dependencies beyond Abseil's time.
#ifndef DROVER_SDK_INCLUDE_DROVER_COLLECTIVE_OPTIONS_H_
#define DROVER_SDK_INCLUDE_DROVER_COLLECTIVE_OPTIONS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace drover {

struct CollectiveOptions {
  enum class Backend { kGloo, kNccl };
  // How a kGloo (CPU) group moves bytes: see drover/collective.h.
  enum class Algorithm { kAuto, kGloo, kShm, kHierarchical };

  // Names the group in rendezvous keys and error messages; ranks that want to meet use
  // the same name.
  std::string name = "default";
  int rank = 0;
  int size = 1;
  // The rendezvous scope: the job's generation, through its scheduler.
  std::string job_id;
  int generation = 0;
  std::string scheduler_address;
  // File holding the cluster token (owner-only; see common/auth.h).
  std::string token_file;
  // Bound of every operation and of group creation.
  absl::Duration timeout = absl::Seconds(30);
  Backend backend = Backend::kGloo;
  // kAuto: shared memory where ranks share a node. Forced: kGloo (plain Gloo
  // everywhere: the baseline, and for debugging), kShm (every rank on one node, else
  // INVALID_ARGUMENT at creation), kHierarchical (on one node the same as kShm).
  Algorithm algorithm = Algorithm::kAuto;
  // Ranks with equal node_id share memory. Empty: this host's name. From the
  // environment: DROVER_NODE_ID.
  std::string node_id;
  // Gloo: the network interface to bind (GLOO_SOCKET_IFNAME); if empty, `hostname`;
  // if both are empty, the local address that routes to the job's MASTER_ADDR (the
  // right one on every node).
  std::string interface;
  std::string hostname;
  // NCCL: the CUDA device index (within CUDA_VISIBLE_DEVICES).
  int device = 0;
  // Listen for the scheduler's notice that a process of this generation failed and
  // abort the operation in flight (ABORTED, drover/collective.h). Off: only timeouts
  // and broken connections end a waiting operation.
  bool watch_generation = true;
  // Tell the job's timeline (`drover timeline`, the dashboard) about every operation:
  // which, how many bytes, how long, this rank. Batched off the operation's path.
  // From the environment: DROVER_TIMELINE_COLLECTIVES=1.
  bool timeline = false;

  // The options of a process drover started: RANK, WORLD_SIZE, DROVER_JOB_ID,
  // DROVER_GENERATION, DROVER_SCHEDULER_ADDRESS, DROVER_TOKEN_FILE, DROVER_NODE_ID,
  // GLOO_SOCKET_IFNAME, DROVER_COLLECTIVE_ALGORITHM (auto|gloo|shm|hierarchical),
  // LOCAL_RANK as the device and DROVER_TIMELINE_COLLECTIVES (1: timeline); MASTER_ADDR
  // only chooses the fallback address. INVALID_ARGUMENT naming the variable if one is
  // missing or malformed (outside drover, fill the options yourself). Defined with
  // drover::CollectiveGroup (link //sdk:collective).
  static absl::StatusOr<CollectiveOptions> FromEnvironment(const std::string& name = "default");
};

}  // namespace drover

#endif  // DROVER_SDK_INCLUDE_DROVER_COLLECTIVE_OPTIONS_H_
