// Helpers of the chaos campaign's checks (checks.h), shared by its .cc files.
#ifndef DROVER_TESTS_CHAOS_CHECK_UTIL_H_
#define DROVER_TESTS_CHAOS_CHECK_UTIL_H_

#include <string>
#include <vector>

#include "tests/chaos/checks.h"

namespace drover::chaos {

// "job-k7qm-3 (gang via sdk)".
std::string Name(const JobRecord& r);
// The last bytes of `s`, newlines flattened.
std::string Tail(const std::string& s, size_t max = 400);

// The first injected fault that could have changed how the job went, or null: one
// that overlapped the job's life (widened by ctx.settle after the fault) and hit a node
// the job used, the job's own process, or the cluster as a whole (scheduler, Redis)
// when the job depends on the scheduler while it runs (not so plain jobs submitted
// through the SDK: those must end as they would have). Task drivers lease workers
// anywhere: any overlapping fault counts.
const FaultRecord* TouchedBy(const CheckContext& ctx, const JobRecord& r, const JobInfo& j);

// Whether jobs of `kind` write truth files.
bool HasTruth(JobKind kind);
// The truth of one rank of one generation (the task program's driver for kTasks).
const ProcessTruth* TruthOf(const std::vector<ProcessTruth>& truth, int generation, int rank,
                            JobKind kind);

// run-output-complete, for a `drover run` record.
void CheckRunOutput(const CheckContext& ctx, const JobRecord& r, const JobInfo& j,
                    const std::vector<ProcessTruth>& truth, Report& report);
// logs-complete: every line the job's processes recorded is in `drover logs JOB`.
void CheckLogs(const CheckContext& ctx, const JobRecord& r, const JobInfo& j,
               const std::vector<ProcessTruth>& truth, Report& report);
// objects-exact-or-clear, for an objects job's own puts and reads.
void CheckObjectJob(const CheckContext& ctx, const JobRecord& r, const JobInfo& j,
                    const std::vector<ProcessTruth>& truth, Report& report);

}  // namespace drover::chaos

#endif  // DROVER_TESTS_CHAOS_CHECK_UTIL_H_
