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

#include <atomic>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "drover/client.h"
#include "tests/chaos/checks.h"
#include "tests/chaos/fault_schedule.h"
#include "tests/chaos/records.h"
#include "tests/util/netns_network.h"
#include "tests/util/test_cluster.h"

namespace drover::chaos {

// What some faults run beside the fault itself, and where.
struct InjectorOptions {
  std::string drover;        // the CLI (restart-head runs `drover up` with it)
  std::string store_client;  // chaos_store_client (kill-store: an SDK client under it)
  std::string work_dir;      // the injector's files (DROVER_HOME for `drover up`, ...)
  // Where the checks made during injection go (store-client-recovers); may be null.
  Report* report = nullptr;
};

class FaultInjector {
 public:
  // `net` may be null (no namespaces); `spill_dirs[i]` is node i's spill directory if
  // it is a mount the injector may fill (else empty or missing).
  FaultInjector(testing::TestCluster& cluster, testing::NetnsNetwork* net,
                std::vector<std::string> spill_dirs, InjectorOptions options = {});

  FaultRecord Inject(const Fault& fault);

  // After the cluster settled: every submit made while Redis was killed (kill-redis
  // fires a burst of them) made at most one job and ran it at most once, and every
  // acknowledged one has a record (invariant submit-once); no two jobs of the cluster
  // share an idempotency key.
  void CheckSubmits(Client& client, const std::vector<FaultRecord>& faults, Report& report);

 private:
  // A submit of the burst that kill-redis fires: its key, what the answers said.
  struct SubmitProbe {
    std::string key;
    std::string runs_file;  // one line (the job id) per run of the job's process
    std::set<std::string> acked;  // job ids the answers named
    absl::Status last_error;      // the last failed attempt's error
    absl::Time submitted;
    bool gave_up = false;  // no answer acknowledged it within the retry deadline
  };
  void RestartHead(const Fault& f, FaultRecord& r);
  void SubmitBurst(int serial, const std::atomic<bool>& stop, std::vector<SubmitProbe>& out);
  // Starts an SDK client job (a rank on every node putting and getting in a loop,
  // reporting in `dir`): `dir`, or "" (with `why`) if its rank on `node` did not get
  // ready; `job` is set once the job was made (it stops when `dir`/stop appears).
  std::string StartStoreClients(const std::string& dir, const std::string& node,
                                std::string& job, std::string& why);
  void JudgeStoreClient(const std::string& dir, const std::string& node, absl::Time back,
                        FaultRecord& r);

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
  InjectorOptions options_;
  int serial_ = 0;
  std::vector<SubmitProbe> probes_;
};

}  // namespace drover::chaos

#endif  // DROVER_TESTS_CHAOS_FAULTS_H_
