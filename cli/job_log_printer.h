// Streams a job's output from every node it runs on, prefixing each line with its
// rank ("[rank3]: ..."), stdout lines to stdout and stderr lines to stderr.
//
// JobLogPrinter reads through two seams: JobLogSource (the scheduler's job record and
// node table, each node agent's stream of the job's output; ClientLogSource is the
// real one over a drover::Client) and LogSink (where whole lines go; FdLogSink writes
// to this process's stdout/stderr above a terminal status line). Tests give fakes.
//
// Threading: Run() starts one streaming thread per node the job has been placed on
// and joins them all before it returns. The source's calls may come from any of those
// threads at once; the sink's Write is called by one thread at a time, with whole
// lines only. No lock of the printer is held across a source call or `on_job`.
#ifndef DROVER_CLI_JOB_LOG_PRINTER_H_
#define DROVER_CLI_JOB_LOG_PRINTER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/progress_line.h"
#include "drover/client.h"
#include "drover/types.h"

namespace drover::cli {

// What the printer reads. Thread-safe: called from several threads at once.
class JobLogSource {
 public:
  virtual ~JobLogSource() = default;
  // As Client::GetJob: the job's record, waiting up to `wait` for a version newer than
  // `after_version`.
  virtual absl::StatusOr<JobInfo> GetJob(const std::string& job_id, int64_t after_version,
                                         absl::Duration wait) = 0;
  // As Client::Status: the node table (each node's agent address and state).
  virtual absl::StatusOr<ClusterStatus> Status() = 0;
  // As Client::StreamLogs: the job's output on the node whose agent listens at
  // `agent_address`, from `offsets` on.
  virtual absl::Status StreamLogs(const std::string& agent_address, const std::string& job_id,
                                  bool follow, const std::vector<LogOffset>& offsets,
                                  const std::function<void(const LogChunk&)>& on_chunk,
                                  const std::atomic<bool>* cancel, absl::Duration timeout) = 0;
};

// The real source: a connected client (borrowed; it outlives the source).
class ClientLogSource : public JobLogSource {
 public:
  explicit ClientLogSource(Client& client) : client_(client) {}
  absl::StatusOr<JobInfo> GetJob(const std::string& job_id, int64_t after_version,
                                 absl::Duration wait) override;
  absl::StatusOr<ClusterStatus> Status() override;
  absl::Status StreamLogs(const std::string& agent_address, const std::string& job_id,
                          bool follow, const std::vector<LogOffset>& offsets,
                          const std::function<void(const LogChunk&)>& on_chunk,
                          const std::atomic<bool>* cancel, absl::Duration timeout) override;

 private:
  Client& client_;
};

// Where the printer's lines go. Write gets one or more whole lines ending in '\n',
// from one thread at a time.
class LogSink {
 public:
  virtual ~LogSink() = default;
  virtual void Write(LogStream stream, absl::string_view lines) = 0;
};

// This process's stdout and stderr; lines go above `status_line` (may be null).
class FdLogSink : public LogSink {
 public:
  explicit FdLogSink(ProgressLine* status_line = nullptr) : status_line_(status_line) {}
  void Write(LogStream stream, absl::string_view lines) override;

 private:
  ProgressLine* const status_line_;
};

struct JobLogOptions {
  // false: print what the job has written so far. true: keep printing until the job
  // has ended and all its output is out, across restarts.
  bool follow = false;
  // "[rankN]: " before each line.
  bool prefix = true;
  // May be null: ends following early.
  const std::atomic<bool>* stop = nullptr;
  // May be null: gets every record of the job that following sees, on Run's thread.
  std::function<void(const JobInfo&)> on_job;
  // Output that cannot be read (an agent that did not answer, a dead node) is, when
  // true, collected as one line per node saying what and why (unread()), and then is
  // not an error of Run: a caller can say how the job ended first and name what it
  // could not read after. When false, it is printed as a note at once and the first
  // failure to read is Run's error.
  bool collect_unread = false;
  // How long the last read of a node waits for its agent once the scheduler calls the
  // node dead (an agent started again in that time is still read).
  absl::Duration dead_agent_patience = absl::Seconds(10);
  // How long the last read waits for an agent that merely does not answer (it resumes
  // from where it was after each attempt).
  absl::Duration agent_patience = absl::Seconds(30);
  // How long following waits for a scheduler that cannot be reached before giving up.
  absl::Duration scheduler_patience = absl::Seconds(60);
};

class JobLogPrinter {
 public:
  // `source` and `sink` are borrowed and outlive the printer.
  JobLogPrinter(JobLogSource& source, LogSink& sink, std::string job_id, JobLogOptions options);
  ~JobLogPrinter();
  JobLogPrinter(const JobLogPrinter&) = delete;
  JobLogPrinter& operator=(const JobLogPrinter&) = delete;

  // Prints the job's output (see JobLogOptions) and returns the job's last record.
  // Call once.
  absl::StatusOr<JobInfo> Run() ABSL_LOCKS_EXCLUDED(mu_);

  // After Run, with collect_unread: one line per node whose output was not (all) read,
  // naming it and why.
  const std::vector<std::string>& unread() const { return unread_done_; }

 private:
  // Turns chunks into whole prefixed lines for the sink. A leaf lock: nothing else is
  // taken under it.
  class Lines {
   public:
    Lines(bool prefix, LogSink& sink) : prefix_(prefix), sink_(sink) {}
    // `c` as read from `node`: each node's stream of a rank is its own (a rank restarted
    // elsewhere writes on two nodes, read at once by two readers).
    void Write(const std::string& node, const LogChunk& c) ABSL_LOCKS_EXCLUDED(mu_);
    // A line of the CLI's own on stderr, between the job's lines.
    void Note(const std::string& line) ABSL_LOCKS_EXCLUDED(mu_);
    // The last partial line of each stream, ended.
    void Flush() ABSL_LOCKS_EXCLUDED(mu_);

   private:
    void Append(std::string* out, int rank, absl::string_view line) const;

    const bool prefix_;
    LogSink& sink_;
    absl::Mutex mu_;
    // (node, rank, stream) -> the line begun and not ended yet.
    std::map<std::tuple<std::string, int, LogStream>, std::string> partial_ ABSL_GUARDED_BY(mu_);
  };

  // Starts a streamer for each node of `job` that has none yet; names the nodes that
  // cannot be read (dead, unknown to the scheduler).
  absl::Status StartStreamers(const JobInfo& job) ABSL_LOCKS_EXCLUDED(mu_);
  // Follows the job's record until it has ended and all its processes are gone.
  // `status`: StartStreamers' result for `job`.
  absl::Status FollowJob(JobInfo& job, absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  // One node's output, until the job is finished plus one last pass.
  void StreamNode(const std::string& node) ABSL_LOCKS_EXCLUDED(mu_);
  // The node table from the scheduler: agent addresses and states.
  absl::Status RefreshNodes() ABSL_LOCKS_EXCLUDED(mu_);
  std::string AddressOf(const std::string& node) ABSL_LOCKS_EXCLUDED(mu_);
  bool IsDead(const std::string& node) ABSL_LOCKS_EXCLUDED(mu_);
  // Output that cannot be read: collected or printed at once (collect_unread).
  void CannotRead(const std::string& line) ABSL_LOCKS_EXCLUDED(mu_);
  void RecordError(const absl::Status& s) ABSL_LOCKS_EXCLUDED(mu_);
  bool Stopped() const { return options_.stop != nullptr && options_.stop->load(); }
  // Sets finished_ and wakes the streamers.
  void Finish() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits up to `d` for finished_ (or a stop).
  void WaitFinished(absl::Duration d) ABSL_LOCKS_EXCLUDED(mu_);
  void WaitStopped(absl::Duration d) ABSL_LOCKS_EXCLUDED(mu_);

  JobLogSource& source_;
  const std::string job_id_;
  const JobLogOptions options_;
  Lines lines_;

  // Touched only by Run's thread.
  std::map<std::string, std::thread> threads_;  // node id -> streamer
  std::set<std::string> skipped_;              // nodes named as unreadable, said once
  std::vector<std::string> unread_done_;

  // The job has ended everywhere (or following is off): streamers make their last
  // pass, and a following read is cancelled. Set under mu_ so that waiters wake.
  std::atomic<bool> finished_{false};
  absl::Mutex mu_;
  // Node id -> its agent's address and state, refreshed when the job ends (an agent
  // started again listens elsewhere) and by a streamer waiting for its agent.
  std::map<std::string, std::string> agent_address_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, NodeState> node_state_ ABSL_GUARDED_BY(mu_);
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> not_read_ ABSL_GUARDED_BY(mu_);
};

// Convenience for the commands: a JobLogPrinter over `client`, printing to this
// process's stdout/stderr above `status_line` (may be null). `unread` (may be null)
// turns on collect_unread and receives its lines.
absl::StatusOr<JobInfo> PrintJobLogs(Client& client, const std::string& job_id, bool follow,
                                     bool prefix, const std::atomic<bool>* stop,
                                     ProgressLine* status_line = nullptr,
                                     const std::function<void(const JobInfo&)>& on_job = nullptr,
                                     std::vector<std::string>* unread = nullptr,
                                     absl::Duration dead_agent_patience = absl::Seconds(10));

}  // namespace drover::cli

#endif  // DROVER_CLI_JOB_LOG_PRINTER_H_
