#include "scheduler/placement.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace drover {
namespace {

constexpr double kEps = 1e-9;

// How many processes needing `per` fit into `avail` (INT_MAX if `per` needs nothing).
int Capacity(const proto::Resources& avail, const proto::Resources& per) {
  long cap = std::numeric_limits<int>::max();
  auto limit = [&cap](double have, double need) {
    if (need <= kEps) return;
    const double fits = std::floor((have + kEps) / need);
    // NaN (from a NaN or infinite amount) fits nothing. Cast only what fits in `cap`:
    // a huge quotient (1e300 CPUs over 1e-8 each) is undefined as a long (found by
    // //fuzz:scheduler_core).
    if (!(fits >= 0)) {
      cap = 0;
    } else if (fits < static_cast<double>(cap)) {
      cap = static_cast<long>(fits);
    }
  };
  limit(avail.cpus(), per.cpus());
  limit(static_cast<double>(avail.memory_bytes()), static_cast<double>(per.memory_bytes()));
  limit(avail.gpus(), per.gpus());
  for (const auto& [name, need] : per.custom()) {
    auto it = avail.custom().find(name);
    limit(it == avail.custom().end() ? 0.0 : it->second, need);
  }
  return static_cast<int>(std::max(0L, cap));
}

std::string FormatBytes(double b) {
  if (b >= (1LL << 30)) return absl::StrFormat("%.1f GiB", b / (1LL << 30));
  if (b >= (1 << 20)) return absl::StrFormat("%.1f MiB", b / (1 << 20));
  return absl::StrFormat("%.0f bytes", b);
}

std::string FormatAmount(const std::string& kind, double v) {
  if (kind == "memory") return FormatBytes(v) + " memory";
  std::string num = std::fabs(v - std::round(v)) < kEps ? absl::StrCat(std::llround(v))
                                                         : absl::StrFormat("%.2f", v);
  if (kind == "CPU" || kind == "GPU") return absl::StrCat(num, " ", kind, v == 1 ? "" : "s");
  return absl::StrCat(num, " of '", kind, "'");
}

// The first resource kind for which `k` processes do not fit on any node, phrased as
// "needs X on one node; the most free on any node is Y". "" if every kind fits.
std::string ExplainPerNode(int k, const proto::Resources& per,
                           const std::vector<const NodeCapacity*>& nodes) {
  struct Kind {
    std::string name;
    double need;
    double best;
  };
  std::vector<Kind> kinds = {{"GPU", 1.0 * k * per.gpus(), 0},
                             {"CPU", k * per.cpus(), 0},
                             {"memory", 1.0 * k * per.memory_bytes(), 0}};
  for (const auto& [name, need] : per.custom()) kinds.push_back({name, k * need, 0});
  for (const NodeCapacity* n : nodes) {
    const auto& a = n->available;
    kinds[0].best = std::max(kinds[0].best, 1.0 * a.gpus());
    kinds[1].best = std::max(kinds[1].best, a.cpus());
    kinds[2].best = std::max(kinds[2].best, 1.0 * a.memory_bytes());
    for (size_t i = 3; i < kinds.size(); ++i) {
      auto it = a.custom().find(kinds[i].name);
      if (it != a.custom().end()) kinds[i].best = std::max(kinds[i].best, it->second);
    }
  }
  for (const auto& kd : kinds) {
    if (kd.need > kEps && kd.need > kd.best + kEps) {
      return absl::StrCat("needs ", FormatAmount(kd.name, kd.need), " on one node; the most ",
                          "free on any node is ", FormatAmount(kd.name, kd.best));
    }
  }
  return "";
}

void Assign(const NodeCapacity& node, int count, int group_rank, int* next_rank,
            const proto::Resources& per, std::vector<proto::RankPlacement>* out) {
  size_t gpu_cursor = 0;
  for (int i = 0; i < count; ++i) {
    proto::RankPlacement p;
    p.set_rank((*next_rank)++);
    p.set_node_id(node.node_id);
    p.set_node_ip(node.node_ip);
    p.set_local_rank(i);
    p.set_group_rank(group_rank);
    for (int g = 0; g < per.gpus(); ++g) p.add_gpu_ids(node.gpu_ids[gpu_cursor++]);
    out->push_back(std::move(p));
  }
}

}  // namespace

void AddResources(proto::Resources* acc, const proto::Resources& r, int sign) {
  acc->set_cpus(acc->cpus() + sign * r.cpus());
  acc->set_memory_bytes(acc->memory_bytes() + sign * r.memory_bytes());
  acc->set_gpus(acc->gpus() + sign * r.gpus());
  for (const auto& [k, v] : r.custom()) (*acc->mutable_custom())[k] += sign * v;
}

proto::Resources SubtractResources(const proto::Resources& total, const proto::Resources& used) {
  proto::Resources out = total;
  AddResources(&out, used, -1);
  if (out.cpus() < 1e-9) out.set_cpus(std::max(0.0, out.cpus()));
  return out;
}

std::string DescribeResources(const proto::Resources& r) {
  std::vector<std::string> parts;
  parts.push_back(FormatAmount("CPU", r.cpus()));
  if (r.gpus() > 0) parts.push_back(FormatAmount("GPU", r.gpus()));
  if (r.memory_bytes() > 0) parts.push_back(FormatAmount("memory", r.memory_bytes()));
  std::vector<std::pair<std::string, double>> custom(r.custom().begin(), r.custom().end());
  std::sort(custom.begin(), custom.end());
  for (const auto& [name, v] : custom) parts.push_back(FormatAmount(name, v));
  return absl::StrJoin(parts, ", ");
}

namespace {

// Why `r` is not a usable amount of resources ("" if it is): every amount finite and
// not negative, custom resources named.
std::string ResourcesProblem(const proto::Resources& r) {
  if (!std::isfinite(r.cpus()) || r.cpus() < 0 || r.gpus() < 0 || r.memory_bytes() < 0) {
    return absl::StrCat("resources must be finite and not negative (got ", DescribeResources(r),
                        ")");
  }
  for (const auto& [name, v] : r.custom()) {
    if (name.empty()) return "a custom resource has an empty name";
    if (!std::isfinite(v) || v < 0) {
      return absl::StrCat("custom resource '", name, "' must be finite and not negative");
    }
  }
  return "";
}

}  // namespace

std::string ValidateNodeOffer(const proto::Resources& total,
                              const google::protobuf::RepeatedField<int32_t>& gpu_ids) {
  if (std::string bad = ResourcesProblem(total); !bad.empty()) return "the node's " + bad;
  std::set<int32_t> ids(gpu_ids.begin(), gpu_ids.end());
  if (gpu_ids.size() != total.gpus() || ids.size() != static_cast<size_t>(gpu_ids.size()) ||
      (!ids.empty() && *ids.begin() < 0)) {
    return absl::StrCat("gpu_ids must name each of the node's ", total.gpus(),
                        " GPUs once, with ids >= 0 (got ", gpu_ids.size(), " ids, ",
                        ids.size(), " distinct)");
  }
  return "";
}

std::string ValidateJobSpec(const proto::JobSpec& spec) {
  if (spec.command_size() == 0 || spec.command(0).empty()) {
    return "the job has no command; put it after `--`, e.g. `drover run -- python3 train.py`";
  }
  if (spec.nproc() < 1) {
    return absl::StrCat("the job asks for ", spec.nproc(),
                        " processes; a job needs at least 1 (--nproc)");
  }
  if (spec.nproc() > 100000) {
    return absl::StrCat("the job asks for ", spec.nproc(), " processes; the limit is 100000");
  }
  if (spec.time_limit_ms() < 0) {
    return absl::StrCat("the time limit is ", spec.time_limit_ms(),
                        " ms; it must be positive, or 0 for none");
  }
  if (spec.nproc_per_node() < 0) {
    return absl::StrCat("--nproc-per-node is ", spec.nproc_per_node(), "; it must be >= 1");
  }
  if (spec.nproc_per_node() > 0 && spec.nproc() % spec.nproc_per_node() != 0) {
    return absl::StrCat("--nproc ", spec.nproc(), " is not a multiple of --nproc-per-node ",
                        spec.nproc_per_node());
  }
  if (std::string bad = ResourcesProblem(spec.per_process()); !bad.empty()) {
    return "per-process " + bad;
  }
  if (spec.max_restarts() < 0) {
    return absl::StrCat("--max-restarts is ", spec.max_restarts(), "; it must be >= 0");
  }
  if (spec.strategy() != proto::PACK && spec.strategy() != proto::SPREAD) {
    return absl::StrCat("unknown placement strategy ", static_cast<int>(spec.strategy()));
  }
  for (const auto& [k, v] : spec.env()) {
    if (k.empty() || k.find('=') != std::string::npos) {
      return absl::StrCat("environment variable name '", k, "' is invalid");
    }
  }
  return "";
}

PlacementResult PlaceGang(const proto::JobSpec& spec, const std::vector<NodeCapacity>& nodes) {
  std::vector<const NodeCapacity*> view;
  view.reserve(nodes.size());
  for (const NodeCapacity& n : nodes) view.push_back(&n);
  return PlaceGang(spec, view);
}

PlacementResult PlaceGang(const proto::JobSpec& spec,
                          const std::vector<const NodeCapacity*>& nodes) {
  PlacementResult result;
  const auto& per = spec.per_process();
  const int nproc = spec.nproc();
  if (nodes.empty()) {
    result.reason = "no nodes are alive; start a node agent (`drover start --address ...`)";
    return result;
  }
  std::vector<int> caps;
  caps.reserve(nodes.size());
  for (const NodeCapacity* n : nodes) caps.push_back(Capacity(n->available, per));

  int next_rank = 0;
  if (spec.nproc_per_node() > 0) {
    const int ppn = spec.nproc_per_node();
    const int nnodes = nproc / ppn;
    std::vector<size_t> chosen;
    for (size_t i = 0; i < nodes.size() && static_cast<int>(chosen.size()) < nnodes; ++i) {
      if (caps[i] >= ppn) chosen.push_back(i);
    }
    if (static_cast<int>(chosen.size()) < nnodes) {
      std::string per_node = ExplainPerNode(ppn, per, nodes);
      if (!per_node.empty()) {
        result.reason = per_node;
      } else {
        result.reason = absl::StrCat(
            "needs ", nnodes, " nodes with room for ", ppn, " processes (",
            DescribeResources(per), " each); ", chosen.size(), " of ", nodes.size(),
            " nodes have that free now");
      }
      return result;
    }
    int group = 0;
    for (size_t i : chosen) Assign(*nodes[i], ppn, group++, &next_rank, per, &result.ranks);
    result.ok = true;
    return result;
  }

  std::vector<int> counts(nodes.size(), 0);
  long total_cap = 0;
  for (int c : caps) total_cap += c;
  if (total_cap < nproc) {
    std::string per_node = ExplainPerNode(1, per, nodes);
    result.reason =
        !per_node.empty()
            ? per_node
            : absl::StrCat("needs ", nproc, " processes of ", DescribeResources(per),
                           "; the free resources of all ", nodes.size(),
                           " nodes hold only ", total_cap);
    return result;
  }
  if (spec.strategy() == proto::SPREAD) {
    int left = nproc;
    while (left > 0) {
      for (size_t i = 0; i < nodes.size() && left > 0; ++i) {
        if (counts[i] < caps[i]) {
          ++counts[i];
          --left;
        }
      }
    }
  } else {
    // PACK: biggest capacity first (fewest nodes), ties in preference order. A gang
    // that fits on a few nodes takes the first largest one at a time (one scan of the
    // nodes each, the order a stable sort by capacity gives); bigger ones sort.
    int left = nproc;
    constexpr int kScans = 8;
    for (int scan = 0; scan < kScans && left > 0; ++scan) {
      size_t best = nodes.size();
      for (size_t i = 0; i < nodes.size(); ++i) {
        if (counts[i] == 0 && caps[i] > 0 && (best == nodes.size() || caps[i] > caps[best])) {
          best = i;
        }
      }
      const int take = std::min(left, caps[best]);
      counts[best] = take;
      left -= take;
    }
    if (left > 0) {
      std::vector<size_t> order;
      for (size_t i = 0; i < nodes.size(); ++i) {
        if (counts[i] == 0) order.push_back(i);
      }
      std::stable_sort(order.begin(), order.end(),
                       [&caps](size_t a, size_t b) { return caps[a] > caps[b]; });
      for (size_t i : order) {
        int take = std::min(left, caps[i]);
        counts[i] = take;
        left -= take;
        if (left == 0) break;
      }
    }
  }
  int group = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (counts[i] > 0) Assign(*nodes[i], counts[i], group++, &next_rank, per, &result.ranks);
  }
  result.ok = true;
  return result;
}

}  // namespace drover
