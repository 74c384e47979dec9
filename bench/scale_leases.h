// The lease path of the scheduler's scale benchmark (bench/scale.cc): task leases
// (proto/lease.proto) asked of a real scheduler whose nodes are a SimFleet, which
// answers StartWorker at once.
//
// The lease path has no queue of its own: a request that cannot be granted either
// waits in its RPC (up to wait_ms, a scheduler thread each) or is answered "pending"
// and remembered for a minute, until its caller asks again. So "queued leases" are
// measured as both: requests answered pending and remembered, and requests waiting.
#ifndef DROVER_BENCH_SCALE_LEASES_H_
#define DROVER_BENCH_SCALE_LEASES_H_

#include <string>

#include "bench/scale_harness.h"

namespace drover::bench {

struct LeaseBenchOptions {
  std::string address;  // the scheduler
  std::string token;
  int nodes = 0;        // for the BENCH names
  int slots = 0;        // one-CPU leases the cluster holds at once
  int cycles = 20000;   // leases granted and returned, one after the other per thread
  int pending = 100000; // requests answered pending (and remembered) in a full cluster
  int waiting = 1000;   // requests waiting in their RPC for a full cluster to free up
  int threads = 16;     // callers at once (cycles, pending)
};

// Runs the three measurements on an empty cluster, printing BENCH lines:
//   lease_cycles_per_s      RequestLease granted + ReturnLease, per second;
//   pending_leases_per_s    RequestLease answered pending, per second, and the
//                           scheduler's memory per remembered request;
//   waiting_leases          requests waiting at once (threads, memory), and how fast
//                           they are granted when the cluster's leases are returned.
// Returns false (having said why) if a call failed.
bool RunLeaseBench(SchedulerProcess& scheduler, const LeaseBenchOptions& options);

}  // namespace drover::bench

#endif  // DROVER_BENCH_SCALE_LEASES_H_
