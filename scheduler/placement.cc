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

}  // namespace

int ProcessesThatFit(const proto::Resources& avail, const proto::Resources& per) {
  long cap = std::numeric_limits<int>::max();
  auto limit = [&cap](double have, double need) {
    if (need <= kEps) return;
    const double fits = std::floor((have + kEps) / need);
    // NaN (from a NaN or infinite amount) fits nothing. Cast only what fits in `cap`:
    // a huge quotient (1e300 CPUs over 1e-8 each) is undefined as a long.
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

namespace {

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

// The first resource kind for which `k` processes do not fit on any node (whose most
// free of each kind is `best`), phrased as "needs X on one node; the most free on any
// node is Y". "" if every kind fits.
std::string ExplainPerNode(int k, const proto::Resources& per, const ResourceMaxima& best) {
  struct Kind {
    std::string name;
    double need;
    double best;
  };
  std::vector<Kind> kinds = {{"GPU", 1.0 * k * per.gpus(), best.gpus},
                             {"CPU", k * per.cpus(), best.cpus},
                             {"memory", 1.0 * k * per.memory_bytes(), best.memory_bytes}};
  for (const auto& [name, need] : per.custom()) {
    auto it = best.custom.find(name);
    kinds.push_back({name, k * need, it == best.custom.end() ? 0.0 : it->second});
  }
  for (const auto& kd : kinds) {
    if (kd.need > kEps && kd.need > kd.best + kEps) {
      return absl::StrCat("needs ", FormatAmount(kd.name, kd.need), " on one node; the most ",
                          "free on any node is ", FormatAmount(kd.name, kd.best));
    }
  }
  return "";
}

}  // namespace

ResourceMaxima MaximaOf(const std::vector<const NodeCapacity*>& nodes) {
  ResourceMaxima best;
  for (const NodeCapacity* n : nodes) {
    const auto& a = n->available;
    best.gpus = std::max(best.gpus, 1.0 * a.gpus());
    best.cpus = std::max(best.cpus, a.cpus());
    best.memory_bytes = std::max(best.memory_bytes, 1.0 * a.memory_bytes());
    for (const auto& [name, v] : a.custom()) {
      double& b = best.custom[name];  // 0 if new: as for a node without the kind
      b = std::max(b, v);
    }
  }
  return best;
}

std::string PlacementShortfall(const proto::JobSpec& spec, const ResourceMaxima& best,
                               size_t nodes, long fit) {
  const auto& per = spec.per_process();
  if (spec.nproc_per_node() > 0) {
    const int ppn = spec.nproc_per_node();
    std::string per_node = ExplainPerNode(ppn, per, best);
    if (!per_node.empty()) return per_node;
    return absl::StrCat("needs ", spec.nproc() / ppn, " nodes with room for ", ppn,
                        " processes (", DescribeResources(per), " each); ", fit, " of ", nodes,
                        " nodes have that free now");
  }
  std::string per_node = ExplainPerNode(1, per, best);
  if (!per_node.empty()) return per_node;
  return absl::StrCat("needs ", spec.nproc(), " processes of ", DescribeResources(per),
                      "; the free resources of all ", nodes, " nodes hold only ", fit);
}

std::vector<proto::RankPlacement> AssignRanks(
    const proto::Resources& per, const std::vector<std::pair<const NodeCapacity*, int>>& counts) {
  std::vector<proto::RankPlacement> out;
  int next_rank = 0, group = 0;
  for (const auto& [node, count] : counts) {
    size_t gpu_cursor = 0;
    for (int i = 0; i < count; ++i) {
      proto::RankPlacement p;
      p.set_rank(next_rank++);
      p.set_node_id(node->node_id);
      p.set_node_ip(node->node_ip);
      p.set_local_rank(i);
      p.set_group_rank(group);
      for (int g = 0; g < per.gpus(); ++g) p.add_gpu_ids(node->gpu_ids[gpu_cursor++]);
      out.push_back(std::move(p));
    }
    ++group;
  }
  return out;
}

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
    result.reason = kNoNodesAlive;
    return result;
  }
  std::vector<int> caps;
  caps.reserve(nodes.size());
  for (const NodeCapacity* n : nodes) caps.push_back(ProcessesThatFit(n->available, per));
  std::vector<std::pair<const NodeCapacity*, int>> counts;  // in preference order

  if (spec.nproc_per_node() > 0) {
    const int ppn = spec.nproc_per_node();
    const size_t nnodes = nproc / ppn;
    for (size_t i = 0; i < nodes.size() && counts.size() < nnodes; ++i) {
      if (caps[i] >= ppn) counts.emplace_back(nodes[i], ppn);
    }
    if (counts.size() < nnodes) {
      result.reason = PlacementShortfall(spec, MaximaOf(nodes), nodes.size(),
                                         static_cast<long>(counts.size()));
      return result;
    }
    result.ranks = AssignRanks(per, counts);
    result.ok = true;
    return result;
  }

  long total_cap = 0;
  for (int c : caps) total_cap += c;
  if (total_cap < nproc) {
    result.reason = PlacementShortfall(spec, MaximaOf(nodes), nodes.size(), total_cap);
    return result;
  }
  std::vector<int> taken(nodes.size(), 0);
  int left = nproc;
  if (spec.strategy() == proto::SPREAD) {
    while (left > 0) {
      for (size_t i = 0; i < nodes.size() && left > 0; ++i) {
        if (taken[i] < caps[i]) {
          ++taken[i];
          --left;
        }
      }
    }
  } else {
    // PACK: biggest capacity first (fewest nodes), ties in preference order. A gang
    // that fits on a few nodes takes the first largest one at a time (one scan of the
    // nodes each, the order a stable sort by capacity gives); bigger ones sort.
    constexpr int kScans = 8;
    for (int scan = 0; scan < kScans && left > 0; ++scan) {
      size_t best = nodes.size();
      for (size_t i = 0; i < nodes.size(); ++i) {
        if (taken[i] == 0 && caps[i] > 0 && (best == nodes.size() || caps[i] > caps[best])) {
          best = i;
        }
      }
      const int take = std::min(left, caps[best]);
      taken[best] = take;
      left -= take;
    }
    if (left > 0) {
      std::vector<size_t> order;
      for (size_t i = 0; i < nodes.size(); ++i) {
        if (taken[i] == 0) order.push_back(i);
      }
      std::stable_sort(order.begin(), order.end(),
                       [&caps](size_t a, size_t b) { return caps[a] > caps[b]; });
      for (size_t i : order) {
        int take = std::min(left, caps[i]);
        taken[i] = take;
        left -= take;
        if (left == 0) break;
      }
    }
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (taken[i] > 0) counts.emplace_back(nodes[i], taken[i]);
  }
  result.ranks = AssignRanks(per, counts);
  result.ok = true;
  return result;
}

}  // namespace drover
