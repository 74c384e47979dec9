#include "cli/chrome_trace.h"

#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace drover::cli {
namespace {

using nlohmann::json;

constexpr int kSchedulerPid = 1;

const char* KindName(TimelineEventKind k) {
  switch (k) {
    case TimelineEventKind::kSubmitted: return "submitted";
    case TimelineEventKind::kPlaced: return "placed";
    case TimelineEventKind::kRanksStarted: return "ranks started";
    case TimelineEventKind::kRankExited: return "rank exited";
    case TimelineEventKind::kRestarting: return "restarting";
    case TimelineEventKind::kEnded: return "ended";
    case TimelineEventKind::kLeaseGranted: return "lease granted";
    case TimelineEventKind::kLeaseReturned: return "lease ended";
    case TimelineEventKind::kActor: return "actor";
    case TimelineEventKind::kWorkerExited: return "worker exited";
    case TimelineEventKind::kRequeued: return "requeued";
  }
  return "event";
}

std::string ExitWords(const ExitInfo& e) {
  if (!e.error.empty()) return e.error;
  if (e.signal != 0) return absl::StrCat("killed by signal ", e.signal);
  return absl::StrCat("exited with code ", e.exit_code);
}

bool Failed(const ExitInfo& e) { return !e.error.empty() || e.signal != 0 || e.exit_code != 0; }

// Assigns pids to nodes and tids to tracks, and writes their names once.
class Tracks {
 public:
  explicit Tracks(json* out) : out_(out) {
    Name("process_name", kSchedulerPid, 0, "scheduler");
    Name("thread_name", kSchedulerPid, 0, "job");
  }
  int Pid(const std::string& node) {
    auto [it, fresh] = pids_.emplace(node, static_cast<int>(pids_.size()) + 2);
    if (fresh) {
      Name("process_name", it->second, 0, node.empty() ? "(no node)" : node);
      (*out_).push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", it->second},
                         {"args", {{"sort_index", it->second}}}});
    }
    return it->second;
  }
  // A track on `node`: ranks use their rank + 1, others get numbers from 100000 up.
  int Tid(const std::string& node, const std::string& track, int rank = -1) {
    const int pid = Pid(node);
    auto key = std::make_pair(pid, track);
    auto it = tids_.find(key);
    if (it != tids_.end()) return it->second;
    const int tid = rank >= 0 ? rank + 1 : 100000 + static_cast<int>(tids_.size());
    tids_[key] = tid;
    Name("thread_name", pid, tid, track);
    return tid;
  }

 private:
  void Name(const char* what, int pid, int tid, const std::string& name) {
    out_->push_back({{"ph", "M"}, {"name", what}, {"pid", pid}, {"tid", tid},
                     {"args", {{"name", name}}}});
  }
  json* out_;
  std::map<std::string, int> pids_;
  std::map<std::pair<int, std::string>, int> tids_;
};

}  // namespace

std::string ChromeTraceJson(const std::string& job_id, const JobTimeline& timeline,
                            absl::Time now) {
  json events = json::array();
  Tracks tracks(&events);
  auto us = [](absl::Time t) { return absl::ToUnixMicros(t); };
  auto instant = [&](int pid, int tid, const std::string& name, absl::Time t, json args) {
    events.push_back({{"ph", "i"}, {"s", "t"}, {"name", name}, {"pid", pid}, {"tid", tid},
                      {"ts", us(t)}, {"args", std::move(args)}});
  };
  auto span = [&](int pid, int tid, const std::string& name, absl::Time a, absl::Time b,
                  json args) {
    events.push_back({{"ph", "X"}, {"name", name}, {"pid", pid}, {"tid", tid}, {"ts", us(a)},
                      {"dur", std::max<int64_t>(0, us(b) - us(a))}, {"args", std::move(args)}});
  };
  struct Open {
    absl::Time start;
    int pid = 0, tid = 0;
    std::string name;
  };
  std::map<std::string, Open> open;  // "rank3", "lease-7", "actor-x", "pending"
  // A rank that exits at once may be reported before its agent's start reply comes
  // back: its span then runs from its placement, and the late start is ignored.
  std::map<int, absl::Time> placed_at;             // rank -> its last placement
  std::set<std::pair<int, int>> exited;            // (rank, generation)
  for (const TimelineEvent& e : timeline.events) {
    json args = {{"generation", e.generation}};
    if (!e.detail.empty()) args["detail"] = e.detail;
    if (!e.node_id.empty()) args["node"] = e.node_id;
    switch (e.kind) {
      case TimelineEventKind::kSubmitted:
      case TimelineEventKind::kRequeued:
        instant(kSchedulerPid, 0, KindName(e.kind), e.time, args);
        open["pending"] = {e.time, kSchedulerPid, 0, absl::StrCat("pending (generation ", e.generation, ")")};
        break;
      case TimelineEventKind::kPlaced: {
        args["ranks"] = e.ranks;
        for (int r : e.ranks) placed_at[r] = e.time;
        instant(kSchedulerPid, 0, absl::StrCat("placed on ", e.node_id), e.time, args);
        tracks.Pid(e.node_id);
        auto p = open.find("pending");
        if (p != open.end()) {
          span(kSchedulerPid, 0, p->second.name, p->second.start, e.time, json::object());
          open.erase(p);
        }
        break;
      }
      case TimelineEventKind::kRestarting:
      case TimelineEventKind::kEnded:
        if (!e.state.empty()) args["state"] = e.state;
        instant(kSchedulerPid, 0, KindName(e.kind), e.time, args);
        break;
      case TimelineEventKind::kRanksStarted:
        for (int r : e.ranks) {
          if (exited.count({r, e.generation})) continue;
          open[absl::StrCat("rank", r)] = {e.time, tracks.Pid(e.node_id),
                                           tracks.Tid(e.node_id, absl::StrCat("rank ", r), r),
                                           absl::StrCat("rank ", r, " gen ", e.generation)};
        }
        break;
      case TimelineEventKind::kRankExited: {
        const int r = e.ranks.empty() ? 0 : e.ranks[0];
        const std::string key = absl::StrCat("rank", r);
        exited.insert({r, e.generation});
        const absl::Time placed = placed_at.count(r) ? placed_at[r] : e.time;
        Open o = open.count(key) ? open[key]
                                 : Open{placed, tracks.Pid(e.node_id),
                                        tracks.Tid(e.node_id, absl::StrCat("rank ", r), r),
                                        absl::StrCat("rank ", r, " gen ", e.generation)};
        if (e.exit) {
          args["exit"] = ExitWords(*e.exit);
          args["failed"] = Failed(*e.exit);
          if (!e.exit->stderr_tail.empty()) args["stderr_tail"] = e.exit->stderr_tail;
        }
        span(o.pid, o.tid, o.name, o.start, e.time, args);
        open.erase(key);
        break;
      }
      case TimelineEventKind::kLeaseGranted:
        args["lease"] = e.lease_id;
        if (!e.actor_id.empty()) args["actor"] = e.actor_id;
        open[e.lease_id] = {e.time, tracks.Pid(e.node_id),
                            tracks.Tid(e.node_id, absl::StrCat("worker ", e.worker_id)),
                            e.actor_id.empty() ? e.lease_id : absl::StrCat(e.lease_id, " (", e.actor_id, ")")};
        break;
      case TimelineEventKind::kLeaseReturned: {
        auto it = open.find(e.lease_id);
        if (it != open.end()) {
          span(it->second.pid, it->second.tid, it->second.name, it->second.start, e.time, args);
          open.erase(it);
        }
        break;
      }
      case TimelineEventKind::kActor: {
        const std::string key = absl::StrCat("actor ", e.actor_id);
        auto it = open.find(key);
        if (it != open.end()) {
          span(it->second.pid, it->second.tid, it->second.name, it->second.start, e.time,
               {{"until", e.state}});
          open.erase(it);
        }
        if (e.state == "ACTOR_ALIVE") {
          open[key] = {e.time, tracks.Pid(e.node_id), tracks.Tid(e.node_id, key),
                       absl::StrCat(e.actor_id, " alive")};
        } else {
          args["state"] = e.state;
          instant(tracks.Pid(e.node_id), tracks.Tid(e.node_id, key), e.state, e.time, args);
        }
        break;
      }
      case TimelineEventKind::kWorkerExited:
        if (e.exit) args["exit"] = ExitWords(*e.exit);
        instant(tracks.Pid(e.node_id), tracks.Tid(e.node_id, absl::StrCat("worker ", e.worker_id)),
                KindName(e.kind), e.time, args);
        break;
    }
  }
  for (const auto& [key, o] : open) {
    span(o.pid, o.tid, o.name, o.start, std::max(now, o.start), {{"open", true}});
  }
  json out = {{"traceEvents", events},
              {"displayTimeUnit", "ms"},
              {"otherData", {{"job", job_id}, {"dropped_events", timeline.dropped}}}};
  return out.dump(1);
}

}  // namespace drover::cli
