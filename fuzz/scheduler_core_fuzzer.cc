// Fuzzes the scheduler's request handling (scheduler/scheduler_core.h) in process,
// with recording fake agents and a memory state store as scheduler_core_test.cc does,
// and a fake clock moved by the input: nodes register with random resources, valid and
// invalid JobSpecs are submitted and cancelled, heartbeats carry random process tables
// and exits are reported for any job, rank and generation. After every step the
// cluster's books must hold: no node gives out more than it has or a GPU twice, every
// running job has each rank placed once, and a job that ended stays ended.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "fuzz/fuzz_check.h"
#include "scheduler/scheduler_core.h"
#include "scheduler/state_store.h"
#include "scheduler/testing/core_fakes.h"

namespace drover {
namespace {

// Printable names only: a real client's strings pass protobuf's UTF-8 check.
std::string Name(FuzzedDataProvider& in, size_t max) {
  std::string s = in.ConsumeRandomLengthString(max);
  for (char& c : s) c = static_cast<char>('a' + (static_cast<unsigned char>(c) % 26));
  return s;
}

double SomeDouble(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange(0, 5)) {
    case 0: return -1;
    case 1: return NAN;
    case 2: return INFINITY;
    case 3: return in.ConsumeFloatingPoint<double>();
    default: return in.ConsumeIntegralInRange(0, 8) / 2.0;
  }
}

int SomeInt(FuzzedDataProvider& in, int lo, int hi) {
  return in.ConsumeIntegralInRange(0, 7) == 0 ? in.ConsumeIntegral<int>()
                                               : in.ConsumeIntegralInRange(lo, hi);
}

void FillResources(FuzzedDataProvider& in, proto::Resources* r, bool small) {
  r->set_cpus(small ? in.ConsumeIntegralInRange(0, 2) / 2.0 : SomeDouble(in));
  r->set_memory_bytes(in.ConsumeBool() ? 0 : in.ConsumeIntegral<int64_t>());
  r->set_gpus(SomeInt(in, 0, small ? 1 : 4));
  if (in.ConsumeIntegralInRange(0, 3) == 0) {
    (*r->mutable_custom())[in.ConsumeBool() ? "ssd" : Name(in, 4)] =
        SomeDouble(in);
  }
}

proto::JobSpec SomeSpec(FuzzedDataProvider& in) {
  proto::JobSpec spec;
  if (in.ConsumeIntegralInRange(0, 7) != 0) spec.add_command("train");
  spec.set_nproc(SomeInt(in, -1, 6));
  spec.set_nproc_per_node(SomeInt(in, -1, 3));
  FillResources(in, spec.mutable_per_process(), in.ConsumeBool());
  spec.set_strategy(static_cast<proto::PlacementStrategy>(SomeInt(in, 0, 1)));
  spec.set_max_restarts(SomeInt(in, -1, 2));
  spec.set_time_limit_ms(in.ConsumeBool() ? 0 : in.ConsumeIntegral<int64_t>());
  if (in.ConsumeBool()) spec.set_idempotency_key(in.ConsumeBool() ? "k" : "k2");
  if (in.ConsumeBool()) (*spec.mutable_env())[Name(in, 6)] = "v";
  return spec;
}

struct Harness {
  FakeClock clock;
  std::unique_ptr<StateStore> store = NewMemoryStateStore();
  testing::FakeAgents* agents = nullptr;
  std::unique_ptr<SchedulerCore> core;
  std::vector<std::string> nodes;
  std::vector<std::string> jobs;
  std::map<std::string, proto::JobState> ended;  // jobs seen in a final state

  Harness() {
    auto a = std::make_unique<testing::FakeAgents>();
    agents = a.get();
    SchedulerOptions o;
    o.clock = &clock;
    o.durable_wait = absl::Seconds(5);  // the memory store answers at once
    core = std::make_unique<SchedulerCore>(o, std::make_unique<testing::SharedStore>(store.get()),
                                           std::move(a));
    FUZZ_CHECK(core->Start().ok());
  }
  ~Harness() { core->Stop(); }

  std::string Pick(FuzzedDataProvider& in, const std::vector<std::string>& from,
                   const char* unknown) {
    if (from.empty() || in.ConsumeIntegralInRange(0, 7) == 0) return unknown;
    return from[in.ConsumeIntegralInRange<size_t>(0, from.size() - 1)];
  }

  void Step(FuzzedDataProvider& in) {
    switch (in.ConsumeIntegralInRange(0, 8)) {
      case 0: {
        proto::RegisterNodeRequest req;
        if (in.ConsumeIntegralInRange(0, 3) == 0) req.set_node_id(Pick(in, nodes, "node-x"));
        req.set_agent_address("10.0.0.1:7000");
        req.set_node_ip("10.0.0.1");
        FillResources(in, req.mutable_total(), false);
        const int ids = in.ConsumeIntegralInRange(0, 4);
        for (int i = 0; i < ids; ++i) req.add_gpu_ids(SomeInt(in, 0, 3));
        absl::StatusOr<proto::RegisterNodeReply> r = core->RegisterNode(req);
        if (r.ok()) nodes.push_back(r->node_id());
        break;
      }
      case 1:
      case 2: {
        absl::StatusOr<proto::JobInfo> j = core->SubmitJob(SomeSpec(in));
        // A retry with an idempotency key answers the job it made before.
        if (j.ok() && std::find(jobs.begin(), jobs.end(), j->job_id()) == jobs.end()) {
          jobs.push_back(j->job_id());
        }
        break;
      }
      case 3:
        (void)core->CancelJob(Pick(in, jobs, "job-unknown"));
        break;
      case 4:
      case 5: {
        proto::HeartbeatRequest req;
        req.set_node_id(Pick(in, nodes, "node-unknown"));
        const int n = in.ConsumeIntegralInRange(0, 4);
        for (int i = 0; i < n; ++i) {
          proto::ProcessStatus* p = req.add_processes();
          p->set_job_id(Pick(in, jobs, "job-unknown"));
          p->set_generation(SomeInt(in, 0, 2));
          p->set_rank(SomeInt(in, -1, 6));
          p->set_pid(in.ConsumeIntegral<int32_t>());
          p->set_running(in.ConsumeBool());
          if (!p->running()) {
            p->mutable_exit()->set_rank(p->rank());
            p->mutable_exit()->set_exit_code(SomeInt(in, 0, 2));
            p->mutable_exit()->set_generation(p->generation());
          }
        }
        (void)core->Heartbeat(req);
        break;
      }
      case 6: {
        proto::ReportExitRequest req;
        req.set_node_id(Pick(in, nodes, "node-unknown"));
        req.set_job_id(Pick(in, jobs, "job-unknown"));
        req.mutable_exit()->set_rank(SomeInt(in, -1, 6));
        req.mutable_exit()->set_exit_code(SomeInt(in, 0, 2));
        req.mutable_exit()->set_signal(in.ConsumeIntegralInRange(0, 9) == 0 ? 9 : 0);
        req.mutable_exit()->set_generation(SomeInt(in, 0, 2));
        core->ReportExit(req);
        break;
      }
      case 7:
        clock.Advance(absl::Milliseconds(in.ConsumeIntegralInRange(0, 20000)));
        break;
      default: {
        proto::ListJobsRequest req;
        (void)core->ListJobs(req);
        break;
      }
    }
  }

  void CheckBooks() {
    proto::GetClusterStatusReply status = core->ClusterStatus();
    std::map<std::string, std::set<int>> gpus_in_use;  // node -> GPUs of running ranks
    for (const proto::NodeInfo& n : status.nodes()) {
      if (n.state() != proto::ALIVE) continue;
      FUZZ_CHECK(n.free().gpus() >= 0 && n.free().gpus() <= std::max(0, n.total().gpus()));
      FUZZ_CHECK(!(n.free().cpus() > n.total().cpus() + 1e-9));
      std::set<int> free(n.free_gpu_ids().begin(), n.free_gpu_ids().end());
      FUZZ_CHECK(free.size() == static_cast<size_t>(n.free_gpu_ids_size()));
    }
    for (const std::string& id : jobs) {
      absl::StatusOr<proto::JobInfo> j = core->GetJob(id, 0, absl::ZeroDuration());
      FUZZ_CHECK(j.ok());
      auto was = ended.find(id);
      if (was != ended.end()) FUZZ_CHECK(j->state() == was->second);
      if (j->state() >= proto::SUCCEEDED) ended[id] = j->state();
      if (j->state() != proto::RUNNING || j->restarting()) continue;
      std::set<int> ranks;
      for (const proto::RankPlacement& p : j->placement()) {
        FUZZ_CHECK(ranks.insert(p.rank()).second);
        for (int g : p.gpu_ids()) FUZZ_CHECK(gpus_in_use[p.node_id()].insert(g).second);
      }
      FUZZ_CHECK(ranks.size() == static_cast<size_t>(j->spec().nproc()));
    }
  }
};

}  // namespace
}  // namespace drover

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  drover::Harness h;
  for (int steps = 0; in.remaining_bytes() > 0 && steps < 64; ++steps) {
    h.Step(in);
    h.CheckBooks();
  }
  return 0;
}
