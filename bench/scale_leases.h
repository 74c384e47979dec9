// The lease path of the scheduler's scale benchmark (bench/scale.cc): task leases
// (proto/lease.proto) asked of a real scheduler whose nodes are a SimFleet, which
// answers StartWorker at once.
//
// Requests that cannot be granted wait in the scheduler's lease queue (lease_queue.h),
// whether their caller waits in its RPC (a callback at the scheduler, no thread) or was
// answered "pending" at once and asks again later.
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
  int pending = 1000000; // requests queued (answered pending at once) in a full cluster
  int waiting = 1000;    // requests waiting in their RPC for a full cluster to free up
  int threads = 16;     // callers at once (cycles, pending)
};

// Runs the measurements on an empty cluster, printing BENCH lines:
//   lease_cycles_per_s      RequestLease granted + ReturnLease, per second;
//   waiting_leases_*        `waiting` requests waiting in their RPC in a full cluster
//                           (threads, memory), then as many leases returned at once:
//                           grants per second and scheduler CPU per grant;
//   queued_leases_per_s     `pending` requests queued (wait 0), per second, and
//   rss_per_queued_lease    the scheduler's memory per queued request;
//   queued_leases_*         the queue's `waiting` oldest ask again and wait, and as many
//                           leases come back: grants with the whole queue behind them.
// Returns false (having said why) if a call failed.
bool RunLeaseBench(SchedulerProcess& scheduler, const LeaseBenchOptions& options);

}  // namespace drover::bench

#endif  // DROVER_BENCH_SCALE_LEASES_H_
