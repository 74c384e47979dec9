#include "cli/job_spec.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/status_macros.h"

namespace drover::cli {
namespace {

absl::Status Invalid(const std::string& flag, const std::string& value, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(flag, " ", value, ": ", why));
}

// OK if the flag was not given or is at least `min`.
absl::Status AtLeast(const char* flag, const std::optional<int>& v, int min,
                     const std::string& why) {
  if (!v.has_value() || *v >= min) return absl::OkStatus();
  return Invalid(flag, absl::StrCat(*v), why);
}

absl::Status NotNegative(const char* flag, double v) {
  if (std::isfinite(v) && v >= 0) return absl::OkStatus();
  return Invalid(flag, absl::StrCat(v), "must be a number >= 0");
}

// Total processes and processes per node (0: any) from --nproc, --nodes and
// --nproc-per-node, each already checked to be >= 1 if given.
absl::Status ResolveCounts(const JobFlags& f, int* nproc, int* ppn) {
  *ppn = f.nproc_per_node.value_or(0);
  if (f.nodes && f.nproc_per_node) {
    const int64_t product = int64_t{*f.nodes} * *f.nproc_per_node;
    if (product > std::numeric_limits<int>::max()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--nodes ", *f.nodes, " x --nproc-per-node ", *f.nproc_per_node,
          " is too many processes"));
    }
    if (f.nproc && *f.nproc != product) {
      return absl::InvalidArgumentError(absl::StrCat("--nproc ", *f.nproc,
                                                     " disagrees with --nodes ", *f.nodes,
                                                     " x --nproc-per-node ", *f.nproc_per_node));
    }
    *nproc = static_cast<int>(product);
  } else if (f.nodes) {
    *nproc = f.nproc.value_or(*f.nodes);
    if (*nproc % *f.nodes != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--nproc ", *nproc, " does not divide evenly over --nodes ", *f.nodes));
    }
    *ppn = *nproc / *f.nodes;
  } else {
    *nproc = f.nproc.value_or(f.nproc_per_node.value_or(1));
    // Found by //fuzz:cli_flags: --nproc 3 --nproc-per-node 2 went to the scheduler,
    // which refused it; a usage error is the CLI's to report.
    if (*ppn > 0 && *nproc % *ppn != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--nproc ", *nproc, " is not a multiple of --nproc-per-node ", *ppn));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int64_t> ParseBytes(const std::string& s) {
  if (s.empty()) return 0;
  double mult = 1;
  std::string num = s;
  char last = static_cast<char>(std::toupper(s.back()));
  if (last == 'B' && s.size() > 1) {
    num.pop_back();
    last = static_cast<char>(std::toupper(num.back()));
    if (last == 'I' && num.size() > 1) {  // KiB, MiB, GiB, TiB
      num.pop_back();
      last = static_cast<char>(std::toupper(num.back()));
    }
  }
  if (last == 'K' || last == 'M' || last == 'G' || last == 'T') {
    mult = last == 'K' ? 1024.0 : last == 'M' ? 1048576.0 : last == 'G' ? 1073741824.0 : 1099511627776.0;
    num.pop_back();
  }
  double v = 0;
  // 2^63 is the first double that no int64 holds.
  if (!absl::SimpleAtod(num, &v) || !std::isfinite(v) || v < 0 || v * mult >= 0x1p63) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read '", s, "' as a size; write e.g. 512M or 4G"));
  }
  return static_cast<int64_t>(v * mult);
}

absl::StatusOr<JobSpec> BuildSpec(const JobFlags& f, const std::vector<std::string>& cmd) {
  JobSpec spec;
  if (cmd.empty()) {
    return absl::InvalidArgumentError(
        "no command given; put it after `--`, e.g. `drover run --nproc 2 -- python3 train.py`");
  }
  spec.command = cmd;
  spec.name = f.name;
  if (!f.request_id.empty()) {
    const bool printable = std::all_of(f.request_id.begin(), f.request_id.end(), [](char c) {
      return c > ' ' && c < 127;
    });
    if (!printable || f.request_id.size() > 128) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--request-id '", f.request_id, "': use at most 128 printable characters, no spaces"));
    }
    spec.idempotency_key = f.request_id;
  }
  DROVER_RETURN_IF_ERROR(AtLeast("--nproc", f.nproc, 1, "a job needs at least 1 process"));
  DROVER_RETURN_IF_ERROR(AtLeast("--nodes", f.nodes, 1, "a job runs on at least 1 node"));
  DROVER_RETURN_IF_ERROR(AtLeast("--nproc-per-node", f.nproc_per_node, 1,
                                 "a node runs at least 1 process of the job"));
  DROVER_RETURN_IF_ERROR(ResolveCounts(f, &spec.nproc, &spec.nproc_per_node));
  DROVER_RETURN_IF_ERROR(NotNegative("--cpus-per-proc", f.cpus_per_proc));
  spec.per_process.cpus = f.cpus_per_proc;
  DROVER_RETURN_IF_ERROR(AtLeast("--gpus-per-proc", f.gpus_per_proc, 0, "must be 0 or more"));
  spec.per_process.gpus = f.gpus_per_proc;
  DROVER_ASSIGN_OR_RETURN(spec.per_process.memory_bytes, ParseBytes(f.memory_per_proc));
  for (const auto& r : f.resources) {
    std::pair<std::string, std::string> kv = absl::StrSplit(r, absl::MaxSplits('=', 1));
    double v = 0;
    if (kv.first.empty() || !absl::SimpleAtod(kv.second, &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--resource '", r, "' is not NAME=AMOUNT (e.g. --resource ssd=1)"));
    }
    DROVER_RETURN_IF_ERROR(NotNegative("--resource", v));
    spec.per_process.custom[kv.first] = v;
  }
  if (f.strategy != "pack" && f.strategy != "spread") {
    return Invalid("--strategy", f.strategy, "must be pack or spread");
  }
  spec.strategy = f.strategy == "spread" ? PlacementStrategy::kSpread : PlacementStrategy::kPack;
  DROVER_RETURN_IF_ERROR(AtLeast("--max-restarts", f.max_restarts, 0, "must be 0 or more"));
  spec.max_restarts = f.max_restarts;
  if (!f.time_limit.empty()) {
    absl::Duration limit;
    if (!absl::ParseDuration(f.time_limit, &limit) || limit <= absl::ZeroDuration() ||
        limit == absl::InfiniteDuration()) {
      return absl::InvalidArgumentError(absl::StrCat("--time-limit '", f.time_limit,
                                                     "' is not a positive duration (e.g. 90s, "
                                                     "30m, 2h, 1h30m)"));
    }
    spec.time_limit = std::max(limit, absl::Milliseconds(1));
  }
  for (const auto& e : f.env) {
    auto eq = e.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(absl::StrCat("--env '", e, "' is not KEY=VALUE"));
    }
    spec.env[e.substr(0, eq)] = e.substr(eq + 1);
  }
  if (!f.cwd.empty()) {
    spec.cwd = f.cwd;
  } else {
    char buf[4096];
    if (::getcwd(buf, sizeof(buf)) != nullptr) spec.cwd = buf;
  }
  return spec;
}

}  // namespace drover::cli
