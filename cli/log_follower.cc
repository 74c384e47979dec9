#include "cli/log_follower.h"

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace drover::cli {
namespace {

// How long following waits for a scheduler that cannot be reached before giving up.
constexpr absl::Duration kSchedulerPatience = absl::Seconds(60);
// How long the last read of a node's output waits for its agent to answer (it resumes
// from where it was after each attempt), and for one the scheduler has declared dead.
constexpr absl::Duration kAgentPatience = absl::Seconds(30);
constexpr absl::Duration kLastReadAttempt = absl::Seconds(5);
// The shortest attempt: a connection to an agent that is back takes well under it.
constexpr absl::Duration kShortestAttempt = absl::Milliseconds(300);

// Turns chunks into whole prefixed lines; thread-safe. Lines go above `status_line`
// (may be null).
class LinePrinter {
 public:
  LinePrinter(bool prefix, ProgressLine* status_line)
      : prefix_(prefix), status_line_(status_line) {}
  ~LinePrinter() { Flush(); }

  void Write(const LogChunk& c) {
    std::lock_guard<std::mutex> lock(mu_);
    std::string& buf = partial_[{c.rank, c.stream}];
    buf += c.data;
    size_t start = 0;
    std::string out;
    for (size_t nl; (nl = buf.find('\n', start)) != std::string::npos; start = nl + 1) {
      AppendLine(&out, c.rank, buf.substr(start, nl + 1 - start));
    }
    buf.erase(0, start);
    Emit(c.stream, out);
  }

  // A line of the CLI's own on stderr, between the job's lines.
  void Note(const std::string& line) {
    std::lock_guard<std::mutex> lock(mu_);
    Emit(LogStream::kStderr, line);
  }

  void Flush() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [key, buf] : partial_) {
      if (buf.empty()) continue;
      std::string out;
      AppendLine(&out, key.first, buf + "\n");
      Emit(key.second, out);
      buf.clear();
    }
  }

 private:
  void AppendLine(std::string* out, int rank, const std::string& line) {
    if (prefix_) absl::StrAppend(out, "[rank", rank, "]: ");
    out->append(line);
  }
  void Emit(LogStream stream, const std::string& s) {
    if (s.empty()) return;
    int fd = stream == LogStream::kStderr ? STDERR_FILENO : STDOUT_FILENO;
    auto write_all = [&] {
      size_t done = 0;
      while (done < s.size()) {
        ssize_t n = ::write(fd, s.data() + done, s.size() - done);
        if (n <= 0) return;
        done += n;
      }
    };
    if (status_line_ == nullptr) {
      write_all();
    } else {
      status_line_->PrintAbove(write_all);
    }
  }

  const bool prefix_;
  ProgressLine* const status_line_;
  std::mutex mu_;
  std::map<std::pair<int, LogStream>, std::string> partial_;
};

}  // namespace

absl::StatusOr<JobInfo> PrintJobLogs(Client& client, const std::string& job_id, bool follow,
                                     bool prefix, const std::atomic<bool>* stop,
                                     ProgressLine* status_line,
                                     const std::function<void(const JobInfo&)>& on_job,
                                     std::vector<std::string>* unread,
                                     absl::Duration dead_agent_patience) {
  LinePrinter printer(prefix, status_line);
  DROVER_ASSIGN_OR_RETURN(JobInfo job, client.GetJob(job_id));
  if (on_job) on_job(job);

  // One thread per node the job has been placed on. Each streams that node's output,
  // resuming from its own offsets, until the job has ended everywhere (`finished`);
  // then it makes one last pass for anything written at the very end.
  std::atomic<bool> finished{!follow};
  std::mutex mu;
  std::condition_variable finished_cv;  // signalled when `finished` becomes true
  std::map<std::string, std::thread> threads;  // node id -> streamer
  // Node id -> its agent's address and state, refreshed when the job ends (an agent
  // started again listens elsewhere) and by a streamer waiting for its agent: under `mu`.
  std::map<std::string, std::string> agent_address;
  std::map<std::string, NodeState> node_state;
  std::set<std::string> skipped;  // dead nodes, said once
  absl::Status first_error;
  std::vector<std::string> not_read;  // node: what was not read and why (under `mu`)
  // Output that cannot be read: told to the caller (`unread`) or printed at once.
  auto cannot_read = [&](const std::string& line) {
    if (unread == nullptr) {
      printer.Note(absl::StrCat("drover: ", line, "\n"));
      return;
    }
    std::lock_guard<std::mutex> lock(mu);
    not_read.push_back(line);
  };

  auto address_of = [&](const std::string& node) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = agent_address.find(node);
    return it == agent_address.end() ? std::string() : it->second;
  };
  auto is_dead = [&](const std::string& node) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = node_state.find(node);
    return it != node_state.end() && it->second == NodeState::kDead;
  };
  auto refresh_nodes = [&]() -> absl::Status {
    DROVER_ASSIGN_OR_RETURN(ClusterStatus status, client.Status());
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& n : status.nodes) {
      agent_address[n.node_id] = n.agent_address;
      node_state[n.node_id] = n.state;
    }
    return absl::OkStatus();
  };
  auto streamer = [&](const std::string& node) {
    std::map<std::pair<int, LogStream>, int64_t> offsets;  // (rank, stream) -> printed bytes
    // The last pass: since when the node's agent has not answered (nor sent anything),
    // and since when the scheduler has called the node dead.
    absl::Time unanswered_since = absl::InfiniteFuture();
    absl::Time dead_since = absl::InfiniteFuture();
    for (bool last_pass = false;;) {
      last_pass = last_pass || finished.load() || (stop != nullptr && stop->load());
      const std::string address = address_of(node);
      // A node the scheduler calls dead (its agent killed, say) is waited for only
      // `dead_agent_patience`, each attempt included, so that `drover run` can say how
      // its job ended within 2 s of the end. Attempts are no longer than that patience
      // either: an agent killed as the job ends is not called dead yet (a 1 s grace),
      // and a call to it waits out its whole deadline. A long read is cut into attempts
      // that resume from the offsets.
      absl::Duration attempt =
          std::min(kLastReadAttempt, std::max(dead_agent_patience, kShortestAttempt));
      if (last_pass && is_dead(node)) {
        const absl::Time now = absl::Now();
        dead_since = std::min(dead_since, now);
        attempt = std::clamp(dead_since + dead_agent_patience - now, kShortestAttempt, attempt);
      }
      std::vector<LogOffset> from;
      for (const auto& [key, off] : offsets) from.push_back({key.first, key.second, off});
      bool printed = false;
      absl::Status s = client.StreamLogs(
          address, job_id, /*follow=*/!last_pass, from,
          [&](const LogChunk& c) {
            int64_t& off = offsets[{c.rank, c.stream}];
            if (c.offset + static_cast<int64_t>(c.data.size()) <= off) return;
            off = c.offset + c.data.size();
            printer.Write(c);
            printed = true;
          },
          // Following ends when the job does: a follow call waiting on an agent that
          // died (its calls wait for it to come back) must not outlive the job (found by
          // the chaos campaign: `drover run` never returned). A last-pass read resumes
          // from its offsets when its time is up.
          last_pass ? stop : &finished, last_pass ? attempt : absl::Hours(24 * 365));
      if (last_pass) {
        const bool stopped = stop != nullptr && stop->load();
        // An agent that is down, stalled or cut off when the job ends (killed and
        // starting again, say) still has the output on its disk: it is waited for, and
        // read where it listens now, before the output is called missing (found by the
        // chaos campaign: a killed agent's last lines never reached `drover run`).
        if ((absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s)) && !stopped) {
          const absl::Time now = absl::Now();
          if (printed) unanswered_since = absl::InfiniteFuture();  // a long read: go on
          (void)refresh_nodes();
          const bool dead = is_dead(node);
          dead_since = dead ? std::min(dead_since, now) : absl::InfiniteFuture();
          if (unanswered_since == absl::InfiniteFuture()) {
            unanswered_since = now;
            // A short wait (a dead node's, in `drover run`) is not announced: what it
            // could not read is said after the job's outcome.
            const absl::Duration wait = dead ? dead_agent_patience : kAgentPatience;
            if (!printed && wait >= absl::Seconds(2)) {
              printer.Note(absl::StrCat("drover: waiting up to ", absl::FormatDuration(wait),
                                        " for the agent of ", node, " (", s.message(),
                                        ") to read the job's last output there\n"));
            }
          }
          std::unique_lock<std::mutex> lock(mu);
          // A node the scheduler has declared dead comes back only if its agent is
          // started again (systemd does it in seconds): it is waited for less.
          if (now - unanswered_since < kAgentPatience &&
              now - dead_since < dead_agent_patience) {
            finished_cv.wait_for(lock, std::chrono::milliseconds(250),
                                 [&] { return stop != nullptr && stop->load(); });
            continue;
          }
        }
        // NOT_FOUND: the node never ran a process of this job (nothing to print).
        if (!s.ok() && !absl::IsNotFound(s) && !stopped) {
          if (unread != nullptr) {
            cannot_read(absl::StrCat(
                offsets.empty() ? "the output" : "the rest of the output",
                " of the job's processes on ", node, " is not shown: ",
                s.message(),
                dead_since != absl::InfiniteFuture() ? " (the scheduler calls the node dead)" : "",
                "; `drover logs ", job_id, "` reads it if the node's agent comes back"));
          } else {
            std::lock_guard<std::mutex> lock(mu);
            if (first_error.ok()) first_error = s;
          }
        }
        return;
      }
      // The stream ended: this node's processes have exited for now (or have not
      // started yet). Look again shortly unless the job is over.
      std::unique_lock<std::mutex> lock(mu);
      finished_cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return finished.load(); });
    }
  };

  auto start_streamers = [&](const JobInfo& j) -> absl::Status {
    // Every node that ever ran a process of the job (earlier generations may have run
    // elsewhere), and the current placement (for records from before nodes_used).
    std::set<std::string> nodes(j.nodes_used.begin(), j.nodes_used.end());
    for (const auto& p : j.placement) nodes.insert(p.node_id);
    for (auto it = nodes.begin(); it != nodes.end();) {
      it = threads.count(*it) ? nodes.erase(it) : std::next(it);
    }
    if (nodes.empty()) return absl::OkStatus();
    bool missing = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      for (const auto& n : nodes) missing |= !agent_address.count(n);
    }
    if (missing) DROVER_RETURN_IF_ERROR(refresh_nodes());
    for (const auto& n : nodes) {
      if (address_of(n).empty()) {
        // Found by the chaos campaign: such output used to be left out without a word.
        if (skipped.insert(n).second) {
          cannot_read(absl::StrCat(n, " is not known to the scheduler (it restarted and the "
                                   "node's agent has not registered since): the output its "
                                   "processes wrote there is not shown"));
        }
        continue;
      }
      if (is_dead(n)) {
        // An earlier generation ran there; what it wrote stays on that machine.
        if (skipped.insert(n).second) {
          cannot_read(absl::StrCat(n, " is dead: the output its processes wrote there (an "
                                   "earlier generation's) is not shown"));
        }
        continue;
      }
      threads.emplace(n, std::thread(streamer, n));
    }
    return absl::OkStatus();
  };

  absl::Status status = start_streamers(job);
  // While following, a scheduler that restarts or stalls for a while is waited for: the
  // job runs on without it (found by the chaos campaign: `drover run` exited 1 saying it
  // could not reach the scheduler while its job went on to succeed).
  absl::Time unreachable_since = absl::InfiniteFuture();
  while (follow && !finished.load()) {
    if (absl::IsUnavailable(status) && absl::Now() - unreachable_since < kSchedulerPatience) {
      if (unreachable_since == absl::InfiniteFuture()) {
        printer.Note(absl::StrCat("drover: ", status.message(), "; still waiting for ", job_id,
                                  " (it runs on without the scheduler)\n"));
      }
      unreachable_since = std::min(unreachable_since, absl::Now());
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    } else if (!status.ok()) {
      break;
    } else {
      unreachable_since = absl::InfiniteFuture();
      if (IsTerminal(job.state) && job.live_processes == 0) break;
    }
    if (stop != nullptr && stop->load()) break;
    auto next = client.GetJob(job_id, job.version, absl::Seconds(2));
    status = next.status();
    if (!next.ok()) continue;
    job = std::move(*next);
    if (on_job) on_job(job);
    status = start_streamers(job);
  }
  // The last passes read from where each node's agent is now.
  if (follow) (void)refresh_nodes();
  {
    std::lock_guard<std::mutex> lock(mu);
    finished = true;
  }
  finished_cv.notify_all();
  for (auto& [node, t] : threads) t.join();
  printer.Flush();
  if (unread != nullptr) {
    std::lock_guard<std::mutex> lock(mu);
    unread->insert(unread->end(), not_read.begin(), not_read.end());
  }
  if (!status.ok()) return status;
  if (!first_error.ok()) return first_error;
  return client.GetJob(job_id);
}

}  // namespace drover::cli
