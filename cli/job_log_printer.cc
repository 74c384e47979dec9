#include "cli/job_log_printer.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace drover::cli {
namespace {

// The longest single attempt of a node's last read; a long read is cut into attempts
// that resume from the offsets.
constexpr absl::Duration kLastReadAttempt = absl::Seconds(5);
// The shortest attempt: a connection to an agent that is back takes well under it.
constexpr absl::Duration kShortestAttempt = absl::Milliseconds(300);
// A wait shorter than this for an agent (a dead node's, in `drover run`) is not
// announced: what it could not read is said after the job's outcome.
constexpr absl::Duration kAnnouncedWait = absl::Seconds(2);

}  // namespace

absl::StatusOr<JobInfo> ClientLogSource::GetJob(const std::string& job_id,
                                                int64_t after_version, absl::Duration wait) {
  return client_.GetJob(job_id, after_version, wait);
}

absl::StatusOr<ClusterStatus> ClientLogSource::Status() { return client_.Status(); }

absl::Status ClientLogSource::StreamLogs(const std::string& agent_address,
                                         const std::string& job_id, bool follow,
                                         const std::vector<LogOffset>& offsets,
                                         const std::function<void(const LogChunk&)>& on_chunk,
                                         const std::atomic<bool>* cancel,
                                         absl::Duration timeout) {
  return client_.StreamLogs(agent_address, job_id, follow, offsets, on_chunk, cancel, timeout);
}

void FdLogSink::Write(LogStream stream, absl::string_view lines) {
  const int fd = stream == LogStream::kStderr ? STDERR_FILENO : STDOUT_FILENO;
  auto write_all = [&] {
    size_t done = 0;
    while (done < lines.size()) {
      ssize_t n = ::write(fd, lines.data() + done, lines.size() - done);
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

void JobLogPrinter::Lines::Append(std::string* out, int rank, absl::string_view line) const {
  if (prefix_) absl::StrAppend(out, "[rank", rank, "]: ");
  out->append(line.data(), line.size());
}

void JobLogPrinter::Lines::Write(const std::string& node, const LogChunk& c) {
  absl::MutexLock lock(&mu_);
  std::string& buf = partial_[{node, c.rank, c.stream}];
  buf += c.data;
  size_t start = 0;
  std::string out;
  for (size_t nl; (nl = buf.find('\n', start)) != std::string::npos; start = nl + 1) {
    Append(&out, c.rank, absl::string_view(buf).substr(start, nl + 1 - start));
  }
  buf.erase(0, start);
  // Under mu_: lines of different nodes never interleave within a line.
  if (!out.empty()) sink_.Write(c.stream, out);
}

void JobLogPrinter::Lines::Note(const std::string& line) {
  absl::MutexLock lock(&mu_);
  sink_.Write(LogStream::kStderr, line);
}

void JobLogPrinter::Lines::Flush() {
  absl::MutexLock lock(&mu_);
  for (auto& [key, buf] : partial_) {
    if (buf.empty()) continue;
    std::string out;
    Append(&out, std::get<1>(key), buf + "\n");
    sink_.Write(std::get<2>(key), out);
    buf.clear();
  }
}

JobLogPrinter::JobLogPrinter(JobLogSource& source, LogSink& sink, std::string job_id,
                             JobLogOptions options)
    : source_(source),
      job_id_(std::move(job_id)),
      options_(std::move(options)),
      lines_(options_.prefix, sink) {}

JobLogPrinter::~JobLogPrinter() {
  // Run joins its streamers on every path; this only guards against a printer
  // destroyed while Run is unwinding.
  Finish();
  for (auto& [node, t] : threads_) {
    if (t.joinable()) t.join();
  }
}

absl::StatusOr<JobInfo> JobLogPrinter::Run() {
  if (!options_.follow) Finish();
  absl::StatusOr<JobInfo> first = source_.GetJob(job_id_, 0, absl::ZeroDuration());
  if (!first.ok()) return first.status();
  JobInfo job = std::move(*first);
  if (options_.on_job) options_.on_job(job);

  absl::Status status = StartStreamers(job);
  if (options_.follow) status = FollowJob(job, status);
  // The last passes read from where each node's agent is now.
  if (options_.follow) (void)RefreshNodes();
  Finish();
  for (auto& [node, t] : threads_) t.join();
  threads_.clear();
  lines_.Flush();
  absl::Status first_error;
  {
    absl::MutexLock lock(&mu_);
    unread_done_ = std::move(not_read_);
    first_error = first_error_;
  }
  if (!status.ok()) return status;
  if (!first_error.ok()) return first_error;
  return source_.GetJob(job_id_, 0, absl::ZeroDuration());
}

absl::Status JobLogPrinter::FollowJob(JobInfo& job, absl::Status status) {
  // A scheduler that restarts or stalls for a while is waited for: the job runs on
  // without it, and `drover run` must not exit 1 while its job goes on to succeed.
  absl::Time unreachable_since = absl::InfiniteFuture();
  for (;;) {
    if (absl::IsUnavailable(status) &&
        absl::Now() - unreachable_since < options_.scheduler_patience) {
      if (unreachable_since == absl::InfiniteFuture()) {
        lines_.Note(absl::StrCat("drover: ", status.message(), "; still waiting for ", job_id_,
                                 " (it runs on without the scheduler)\n"));
      }
      unreachable_since = std::min(unreachable_since, absl::Now());
      WaitStopped(absl::Milliseconds(500));
    } else if (!status.ok()) {
      return status;
    } else {
      unreachable_since = absl::InfiniteFuture();
      if (IsTerminal(job.state) && job.live_processes == 0) return absl::OkStatus();
    }
    if (Stopped()) return status;
    absl::StatusOr<JobInfo> next = source_.GetJob(job_id_, job.version, absl::Seconds(2));
    status = next.status();
    if (!next.ok()) continue;
    job = std::move(*next);
    if (options_.on_job) options_.on_job(job);
    status = StartStreamers(job);
  }
}

absl::Status JobLogPrinter::StartStreamers(const JobInfo& job) {
  // Every node that ever ran a process of the job (earlier generations may have run
  // elsewhere), and the current placement (for records from before nodes_used).
  std::set<std::string> nodes(job.nodes_used.begin(), job.nodes_used.end());
  for (const auto& p : job.placement) nodes.insert(p.node_id);
  for (auto it = nodes.begin(); it != nodes.end();) {
    it = threads_.count(*it) ? nodes.erase(it) : std::next(it);
  }
  if (nodes.empty()) return absl::OkStatus();
  bool missing = false;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& n : nodes) missing |= !agent_address_.count(n);
  }
  if (missing) DROVER_RETURN_IF_ERROR(RefreshNodes());
  for (const auto& n : nodes) {
    if (AddressOf(n).empty()) {
      if (skipped_.insert(n).second) {
        CannotRead(absl::StrCat(n, " is not known to the scheduler (it restarted and the "
                                   "node's agent has not registered since): the output its "
                                   "processes wrote there is not shown"));
      }
      continue;
    }
    if (IsDead(n)) {
      // An earlier generation ran there; what it wrote stays on that machine.
      if (skipped_.insert(n).second) {
        CannotRead(absl::StrCat(n, " is dead: the output its processes wrote there (an "
                                   "earlier generation's) is not shown"));
      }
      continue;
    }
    threads_.emplace(n, std::thread([this, n] { StreamNode(n); }));
  }
  return absl::OkStatus();
}

void JobLogPrinter::StreamNode(const std::string& node) {
  std::map<std::pair<int, LogStream>, int64_t> offsets;  // (rank, stream) -> printed bytes
  // The last pass: since when the node's agent has not answered (nor sent anything),
  // and since when the scheduler has called the node dead.
  absl::Time unanswered_since = absl::InfiniteFuture();
  absl::Time dead_since = absl::InfiniteFuture();
  const absl::Duration dead_patience = options_.dead_agent_patience;
  for (bool last_pass = false;;) {
    last_pass = last_pass || finished_.load() || Stopped();
    const std::string address = AddressOf(node);
    // A node the scheduler calls dead (its agent killed, say) is waited for only
    // `dead_agent_patience`, each attempt included, so that `drover run` can say how
    // its job ended within 2 s of the end. Attempts are no longer than that patience
    // either: an agent killed as the job ends is not called dead yet (a 1 s grace),
    // and a call to it waits out its whole deadline.
    absl::Duration attempt =
        std::min(kLastReadAttempt, std::max(dead_patience, kShortestAttempt));
    if (last_pass && IsDead(node)) {
      const absl::Time now = absl::Now();
      dead_since = std::min(dead_since, now);
      attempt = std::clamp(dead_since + dead_patience - now, kShortestAttempt, attempt);
    }
    std::vector<LogOffset> from;
    for (const auto& [key, off] : offsets) from.push_back({key.first, key.second, off});
    bool printed = false;
    // Following ends when the job does (finished_): a follow call waiting on an agent
    // that died must not outlive the job. A last-pass read resumes from its offsets
    // when its time is up.
    absl::Status s = source_.StreamLogs(
        address, job_id_, /*follow=*/!last_pass, from,
        [&](const LogChunk& c) {
          int64_t& off = offsets[{c.rank, c.stream}];
          if (c.offset + static_cast<int64_t>(c.data.size()) <= off) return;
          // A chunk that overlaps what was printed (a resumed read) prints only the rest.
          LogChunk rest = c;
          if (c.offset < off) rest.data.erase(0, off - c.offset);
          off = c.offset + c.data.size();
          lines_.Write(node, rest);
          printed = true;
        },
        last_pass ? options_.stop : &finished_, last_pass ? attempt : absl::Hours(24 * 365));
    if (!last_pass) {
      // The stream ended: this node's processes have exited for now (or have not
      // started yet). Look again shortly unless the job is over.
      WaitFinished(absl::Milliseconds(100));
      continue;
    }
    const bool stopped = Stopped();
    // An agent that is down, stalled or cut off when the job ends (killed and starting
    // again, say) still has the output on its disk: it is waited for, and read where it
    // listens now, before the output is called missing.
    if ((absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s)) && !stopped) {
      const absl::Time now = absl::Now();
      if (printed) unanswered_since = absl::InfiniteFuture();  // a long read: go on
      (void)RefreshNodes();
      const bool dead = IsDead(node);
      dead_since = dead ? std::min(dead_since, now) : absl::InfiniteFuture();
      if (unanswered_since == absl::InfiniteFuture()) {
        unanswered_since = now;
        const absl::Duration wait = dead ? dead_patience : options_.agent_patience;
        if (!printed && wait >= kAnnouncedWait) {
          lines_.Note(absl::StrCat("drover: waiting up to ", absl::FormatDuration(wait),
                                   " for the agent of ", node, " (", s.message(),
                                   ") to read the job's last output there\n"));
        }
      }
      // A node the scheduler has declared dead comes back only if its agent is started
      // again (systemd does it in seconds): it is waited for less.
      if (now - unanswered_since < options_.agent_patience &&
          now - dead_since < dead_patience) {
        WaitStopped(absl::Milliseconds(250));
        continue;
      }
    }
    // NOT_FOUND: the node never ran a process of this job (nothing to print).
    if (!s.ok() && !absl::IsNotFound(s) && !stopped) {
      if (options_.collect_unread) {
        CannotRead(absl::StrCat(
            offsets.empty() ? "the output" : "the rest of the output",
            " of the job's processes on ", node, " is not shown: ", s.message(),
            dead_since != absl::InfiniteFuture() ? " (the scheduler calls the node dead)" : "",
            "; `drover logs ", job_id_, "` reads it if the node's agent comes back"));
      } else {
        RecordError(s);
      }
    }
    return;
  }
}

absl::Status JobLogPrinter::RefreshNodes() {
  DROVER_ASSIGN_OR_RETURN(ClusterStatus status, source_.Status());
  absl::MutexLock lock(&mu_);
  for (const auto& n : status.nodes) {
    agent_address_[n.node_id] = n.agent_address;
    node_state_[n.node_id] = n.state;
  }
  return absl::OkStatus();
}

std::string JobLogPrinter::AddressOf(const std::string& node) {
  absl::MutexLock lock(&mu_);
  auto it = agent_address_.find(node);
  return it == agent_address_.end() ? std::string() : it->second;
}

bool JobLogPrinter::IsDead(const std::string& node) {
  absl::MutexLock lock(&mu_);
  auto it = node_state_.find(node);
  return it != node_state_.end() && it->second == NodeState::kDead;
}

void JobLogPrinter::CannotRead(const std::string& line) {
  if (!options_.collect_unread) {
    lines_.Note(absl::StrCat("drover: ", line, "\n"));
    return;
  }
  absl::MutexLock lock(&mu_);
  not_read_.push_back(line);
}

void JobLogPrinter::RecordError(const absl::Status& s) {
  absl::MutexLock lock(&mu_);
  if (first_error_.ok()) first_error_ = s;
}

void JobLogPrinter::Finish() {
  absl::MutexLock lock(&mu_);
  finished_ = true;
}

void JobLogPrinter::WaitFinished(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(
      absl::Condition(+[](std::atomic<bool>* f) { return f->load(); }, &finished_), d);
}

void JobLogPrinter::WaitStopped(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(
      absl::Condition(+[](JobLogPrinter* p) { return p->Stopped(); }, this), d);
}

absl::StatusOr<JobInfo> PrintJobLogs(Client& client, const std::string& job_id, bool follow,
                                     bool prefix, const std::atomic<bool>* stop,
                                     ProgressLine* status_line,
                                     const std::function<void(const JobInfo&)>& on_job,
                                     std::vector<std::string>* unread,
                                     absl::Duration dead_agent_patience) {
  ClientLogSource source(client);
  FdLogSink sink(status_line);
  JobLogOptions options;
  options.follow = follow;
  options.prefix = prefix;
  options.stop = stop;
  options.on_job = on_job;
  options.collect_unread = unread != nullptr;
  options.dead_agent_patience = dead_agent_patience;
  JobLogPrinter printer(source, sink, job_id, std::move(options));
  absl::StatusOr<JobInfo> job = printer.Run();
  if (unread != nullptr) {
    unread->insert(unread->end(), printer.unread().begin(), printer.unread().end());
  }
  return job;
}

}  // namespace drover::cli
