#include "cli/job_spec.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"

namespace drover::cli {

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
  if (!absl::SimpleAtod(num, &v) || v < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read '", s, "' as a size; write e.g. 512M or 4G"));
  }
  return static_cast<int64_t>(v * mult);
}

absl::StatusOr<proto::JobSpec> BuildSpec(const JobFlags& f, const std::vector<std::string>& cmd) {
  proto::JobSpec spec;
  if (cmd.empty()) {
    return absl::InvalidArgumentError(
        "no command given; put it after `--`, e.g. `drover run --nproc 2 -- python3 train.py`");
  }
  for (const auto& a : cmd) spec.add_command(a);
  spec.set_name(f.name);
  if (f.nproc == 0 || f.nproc < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--nproc ", f.nproc, ": a job needs at least 1 process"));
  }
  int nproc = f.nproc == -1 ? 0 : f.nproc;
  int ppn = f.nproc_per_node;
  if (f.nodes < 0 || ppn < 0) {
    return absl::InvalidArgumentError("--nodes and --nproc-per-node must be positive");
  }
  if (f.nodes > 0 && ppn > 0) {
    if (nproc != 0 && nproc != f.nodes * ppn) {
      return absl::InvalidArgumentError(absl::StrCat("--nproc ", nproc, " disagrees with --nodes ",
                                                     f.nodes, " x --nproc-per-node ", ppn));
    }
    nproc = f.nodes * ppn;
  } else if (f.nodes > 0) {
    if (nproc == 0) nproc = f.nodes;
    if (nproc % f.nodes != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--nproc ", nproc, " does not divide evenly over --nodes ", f.nodes));
    }
    ppn = nproc / f.nodes;
  } else if (ppn > 0 && nproc == 0) {
    nproc = ppn;
  }
  if (nproc == 0) nproc = 1;
  spec.set_nproc(nproc);
  spec.set_nproc_per_node(ppn);
  auto* per = spec.mutable_per_process();
  per->set_cpus(f.cpus_per_proc);
  per->set_gpus(f.gpus_per_proc);
  auto mem = ParseBytes(f.memory_per_proc);
  if (!mem.ok()) return mem.status();
  per->set_memory_bytes(*mem);
  for (const auto& r : f.resources) {
    std::pair<std::string, std::string> kv = absl::StrSplit(r, absl::MaxSplits('=', 1));
    double v = 0;
    if (kv.first.empty() || !absl::SimpleAtod(kv.second, &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--resource '", r, "' is not NAME=AMOUNT (e.g. --resource ssd=1)"));
    }
    (*per->mutable_custom())[kv.first] = v;
  }
  spec.set_strategy(f.strategy == "spread" ? proto::SPREAD : proto::PACK);
  spec.set_max_restarts(f.max_restarts);
  if (!f.time_limit.empty()) {
    absl::Duration limit;
    if (!absl::ParseDuration(f.time_limit, &limit) || limit <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(absl::StrCat("--time-limit '", f.time_limit,
                                                     "' is not a positive duration (e.g. 90s, "
                                                     "30m, 2h, 1h30m)"));
    }
    spec.set_time_limit_ms(std::max<int64_t>(1, absl::ToInt64Milliseconds(limit)));
  }
  for (const auto& e : f.env) {
    auto eq = e.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(absl::StrCat("--env '", e, "' is not KEY=VALUE"));
    }
    (*spec.mutable_env())[e.substr(0, eq)] = e.substr(eq + 1);
  }
  if (!f.cwd.empty()) {
    spec.set_cwd(f.cwd);
  } else {
    char buf[4096];
    if (::getcwd(buf, sizeof(buf)) != nullptr) spec.set_cwd(buf);
  }
  return spec;
}

}  // namespace drover::cli
