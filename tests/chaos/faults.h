// Injects the chaos campaign's faults into a running TestCluster, one at a time, and
// returns only when each is over: a killed daemon restarted (the agent registered
// again, the store respawned by its agent, the scheduler answering, Redis answering
// PING), a stopped process continued, a cut link up again, a filled spill directory
// emptied of the filler.
//
// Node cuts use the cluster's network namespaces when it has them (the link of the
// node's veth taken down); without them the substitute is SIGSTOP of the node's agent
// and store for the same time (docs/reliability.md says what that leaves out).
// Spill fills need the spill directories on small tmpfs mounts (the campaign makes
// them when it may mount); without them the fault is recorded as not injected.
//
// Thread safety: call Inject from one thread; nothing else may use the TestCluster's
// mutating methods meanwhile.
#ifndef DROVER_TESTS_CHAOS_FAULTS_H_
#define DROVER_TESTS_CHAOS_FAULTS_H_

#include <string>
#include <vector>

#include "tests/chaos/fault_schedule.h"
#include "tests/chaos/records.h"
#include "tests/util/netns_network.h"
#include "tests/util/test_cluster.h"

namespace drover::chaos {

class FaultInjector {
 public:
  // `net` may be null (no namespaces); `spill_dirs[i]` is node i's spill directory if
  // it is a mount the injector may fill (else empty or missing).
  FaultInjector(testing::TestCluster& cluster, testing::NetnsNetwork* net,
                std::vector<std::string> spill_dirs);

  FaultRecord Inject(const Fault& fault);

 private:
  void KillAgent(const Fault& f, FaultRecord& r);
  void KillStore(const Fault& f, FaultRecord& r);
  void KillScheduler(const Fault& f, FaultRecord& r);
  void KillRedis(const Fault& f, FaultRecord& r);
  void Stop(pid_t pid, const Fault& f, FaultRecord& r);
  void WorkerFault(const Fault& f, FaultRecord& r);
  void CutNode(const Fault& f, FaultRecord& r);
  void FillSpill(const Fault& f, FaultRecord& r);
  // The node's store process (0 if none runs now).
  pid_t StoreOf(int node);
  std::string AgentTarget(int node);

  testing::TestCluster& cluster_;
  testing::NetnsNetwork* net_;
  std::vector<std::string> spill_dirs_;
};

}  // namespace drover::chaos

#endif  // DROVER_TESTS_CHAOS_FAULTS_H_
