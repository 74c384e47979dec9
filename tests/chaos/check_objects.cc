// objects-exact-or-clear: the objects jobs' own reads and the read-back after the faults.
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tests/chaos/check_util.h"

namespace drover::chaos {
namespace {

constexpr char kInvariant[] = "objects-exact-or-clear";

// Judges one "got" record (the text after the id). `lost_ok` says whether a fault
// explains a failed read; `where` names the reader for messages.
void JudgeRead(const std::string& id, const std::string& outcome, bool lost_ok,
               const std::string& where, Report& report) {
  if (outcome == "ok") {
    report.Held(kInvariant);
  } else if (absl::StartsWith(outcome, "MISMATCH")) {
    report.Violated(kInvariant, absl::StrCat(where, " read ", id, " with other bytes: ", outcome));
  } else if (absl::StartsWith(outcome, "error RESOURCE_EXHAUSTED") ||
             absl::StrContains(outcome, " to restore spilled object ")) {
    // A full store (memory and spill space) refuses to restore a spilled object until
    // something is deleted: by design (docs/reliability.md), with a clear error; read
    // from another node, the pull fails with the holder's refusal as its last error.
    report.Held(kInvariant);
    report.Note("reads refused by a full store", absl::StrCat(where, " ", id, ": ", outcome.substr(0, 200)));
  } else if (absl::StrContains(outcome, "(UNCLEAR)")) {
    report.Violated(kInvariant, absl::StrCat(where, " failed to read ", id,
                                             " without a clear error: ", outcome));
  } else if (!lost_ok) {
    report.Violated(kInvariant, absl::StrCat(where, " failed to read ", id,
                                             " and no fault explains it: ", outcome));
  } else {
    report.Held(kInvariant);
  }
}

}  // namespace

bool LoseableOn(const CheckContext& ctx, const std::string& node, absl::Time since) {
  for (const FaultRecord& f : ctx.faults) {
    if (!f.injected || f.end < since) continue;
    if ((f.fault.kind == FaultKind::kKillStore || f.fault.kind == FaultKind::kKillAgent) &&
        f.nodes.count(node)) {
      return true;
    }
  }
  return false;
}

void CheckObjectJob(const CheckContext& ctx, const JobRecord& r, const JobInfo& j,
                    const std::vector<ProcessTruth>& truth, Report& report) {
  const bool touched = TouchedBy(ctx, r, j) != nullptr;
  for (const ProcessTruth& t : truth) {
    for (const auto& [id, rest] : t.puts) {
      if (!absl::StartsWith(rest, "failed ")) {
        report.Held(kInvariant);
      } else if (absl::StrContains(rest, "(UNCLEAR)")) {
        report.Violated(kInvariant, absl::StrCat(Name(r), " put ", id,
                                                 " failed without a clear error: ", rest));
      } else if (!touched && !absl::StartsWith(rest, "failed RESOURCE_EXHAUSTED")) {
        // A full store is no fault of anyone's; anything else needs one.
        report.Violated(kInvariant,
                        absl::StrCat(Name(r), " put ", id, " failed and no fault explains it: ", rest));
      } else {
        report.Held(kInvariant);
        if (absl::StartsWith(rest, "failed RESOURCE_EXHAUSTED")) {
          report.Note("puts refused by a full store", absl::StrCat(id, ": ", rest.substr(0, 200)));
        }
      }
    }
    for (const auto& [id, rest] : t.gets) {
      JudgeRead(id, rest, touched, absl::StrCat(Name(r), " ", t.name), report);
    }
  }
}

std::vector<LiveObject> LiveObjects(const std::string& truth_dir,
                                    const std::vector<JobRecord>& jobs) {
  std::vector<LiveObject> out;
  for (const JobRecord& r : jobs) {
    if (r.kind != JobKind::kObjects || !r.final_info) continue;
    for (const ProcessTruth& t : ReadJobTruth(truth_dir, r.job_id)) {
      std::set<std::string> deleted(t.deleted.begin(), t.deleted.end());
      std::string node;
      for (const auto& p : r.final_info->placement) {
        if (p.rank == t.rank) node = p.node_id;
      }
      for (const auto& [id, rest] : t.puts) {
        size_t size = 0;
        if (deleted.count(id) || !absl::SimpleAtoi(rest, &size)) continue;
        out.push_back({id, size, r.job_id, node, r.submitted});
      }
    }
  }
  return out;
}

void CheckReadback(const CheckContext& ctx, const std::vector<LiveObject>& objects,
                   const JobRecord& readback, int nodes, Report& report) {
  std::vector<ProcessTruth> truth = ReadJobTruth(ctx.truth_dir, readback.job_id);
  if (static_cast<int>(truth.size()) < nodes) {
    report.Violated(kInvariant, absl::StrCat("the read-back job ", readback.job_id, " left ",
                                             truth.size(), " truth files for ", nodes, " nodes"));
  }
  for (const ProcessTruth& t : truth) {
    std::map<std::string, std::string> got(t.gets.begin(), t.gets.end());
    for (const LiveObject& o : objects) {
      auto it = got.find(o.id);
      if (it == got.end()) {
        report.Violated(kInvariant, absl::StrCat("the read-back (", t.name, ") never read ", o.id));
        continue;
      }
      JudgeRead(o.id, it->second, LoseableOn(ctx, o.node, o.put_after),
                absl::StrCat("the read-back (", t.name, ") of an object put on ", o.node), report);
    }
  }
}

}  // namespace drover::chaos
