#include "cli/job_log_printer.h"

#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace drover::cli {
namespace {

// A scheduler and its agents in memory. Each agent holds the job's output per
// (rank, stream) and answers a read with it from the asked offsets on, in chunks of
// `chunk` bytes.
class FakeSource : public JobLogSource {
 public:
  struct Agent {
    std::map<std::pair<int, LogStream>, std::string> output;
    // Every read fails with this (UNAVAILABLE: an agent that does not answer).
    absl::Status fail;
    // A following read blocks until it is cancelled (a stalled agent).
    bool stall_follow = false;
    // The first last-pass read stops after this many bytes with DEADLINE_EXCEEDED and
    // the next one resends `overlap` bytes before the offsets it was asked for.
    int cut_after = -1;
    int overlap = 0;
    int reads = 0;
  };

  explicit FakeSource(size_t chunk = 5) : chunk_(chunk) {}

  void SetJob(JobInfo job) {
    absl::MutexLock lock(&mu_);
    job.version = ++version_;
    job_ = std::move(job);
  }
  void AddNode(const std::string& node, NodeState state = NodeState::kAlive) {
    absl::MutexLock lock(&mu_);
    NodeInfo n;
    n.node_id = node;
    n.agent_address = "agent-of-" + node;
    n.state = state;
    nodes_.push_back(n);
    agents_[n.agent_address];
  }
  void Append(const std::string& node, int rank, LogStream stream, const std::string& data) {
    absl::MutexLock lock(&mu_);
    agents_["agent-of-" + node].output[{rank, stream}] += data;
  }
  void Configure(const std::string& node, const std::function<void(Agent&)>& f) {
    absl::MutexLock lock(&mu_);
    f(agents_["agent-of-" + node]);
  }
  void FailGetJob(int times) {
    absl::MutexLock lock(&mu_);
    get_job_failures_ = times;
  }
  int GetJobFailuresLeft() {
    absl::MutexLock lock(&mu_);
    return get_job_failures_;
  }
  int Reads(const std::string& node) {
    absl::MutexLock lock(&mu_);
    return agents_["agent-of-" + node].reads;
  }

  absl::StatusOr<JobInfo> GetJob(const std::string& job_id, int64_t after_version,
                                 absl::Duration wait) override {
    absl::MutexLock lock(&mu_);
    if (job_id != job_.job_id) return absl::NotFoundError(job_id);
    if (get_job_failures_ > 0 && after_version > 0) {
      --get_job_failures_;
      return absl::UnavailableError("scheduler at fake:1 is unreachable");
    }
    auto newer = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return job_.version > after_version; };
    mu_.AwaitWithTimeout(absl::Condition(&newer), wait);
    return job_;
  }

  absl::StatusOr<ClusterStatus> Status() override {
    absl::MutexLock lock(&mu_);
    ClusterStatus s;
    s.nodes = nodes_;
    return s;
  }

  absl::Status StreamLogs(const std::string& agent_address, const std::string& job_id,
                          bool follow, const std::vector<LogOffset>& offsets,
                          const std::function<void(const LogChunk&)>& on_chunk,
                          const std::atomic<bool>* cancel, absl::Duration timeout) override {
    std::vector<LogChunk> chunks;
    absl::Status end = absl::OkStatus();
    bool stall = false;
    {
      absl::MutexLock lock(&mu_);
      auto it = agents_.find(agent_address);
      if (it == agents_.end()) return absl::UnavailableError("no agent at " + agent_address);
      Agent& a = it->second;
      ++a.reads;
      if (!a.fail.ok()) return a.fail;
      stall = follow && a.stall_follow;
      int budget = -1;
      int back = 0;
      if (!follow && a.cut_after >= 0) {
        budget = a.cut_after;
        a.cut_after = -1;
        end = absl::DeadlineExceededError("read of " + agent_address + " timed out");
      } else if (!follow) {
        back = a.overlap;
      }
      for (const auto& [key, data] : a.output) {
        int64_t from = 0;
        for (const auto& o : offsets) {
          if (o.rank == key.first && o.stream == key.second) from = o.offset;
        }
        from = std::max<int64_t>(0, from - back);
        for (int64_t at = from; at < static_cast<int64_t>(data.size()); at += chunk_) {
          LogChunk c;
          c.rank = key.first;
          c.stream = key.second;
          c.offset = at;
          c.data = data.substr(at, chunk_);
          if (budget >= 0) {
            if (budget == 0) break;
            c.data.resize(std::min<size_t>(c.data.size(), budget));
            budget -= c.data.size();
          }
          chunks.push_back(c);
        }
      }
    }
    for (const auto& c : chunks) on_chunk(c);
    if (stall) {
      // Until the job ends (the printer's cancel), however long the timeout.
      while (cancel == nullptr || !cancel->load()) absl::SleepFor(absl::Milliseconds(5));
      return absl::CancelledError("cancelled");
    }
    return end;
  }

 private:
  const size_t chunk_;
  absl::Mutex mu_;
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  JobInfo job_ ABSL_GUARDED_BY(mu_);
  int get_job_failures_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<NodeInfo> nodes_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Agent> agents_ ABSL_GUARDED_BY(mu_);
};

// Keeps what was written; fails the test if two writes overlap in time or a write is
// not whole lines.
class RecordingSink : public LogSink {
 public:
  void Write(LogStream stream, absl::string_view lines) override {
    EXPECT_FALSE(inside_.exchange(true)) << "two writes at once";
    EXPECT_TRUE(absl::EndsWith(lines, "\n")) << "not whole lines: " << lines;
    {
      absl::MutexLock lock(&mu_);
      (stream == LogStream::kStderr ? err_ : out_).append(lines.data(), lines.size());
    }
    inside_ = false;
  }
  std::string out() {
    absl::MutexLock lock(&mu_);
    return out_;
  }
  std::string err() {
    absl::MutexLock lock(&mu_);
    return err_;
  }
  // The lines of `text` that start with "[rankN]: ", without the prefix.
  static std::vector<std::string> LinesOf(const std::string& text, int rank) {
    std::vector<std::string> lines;
    const std::string prefix = absl::StrCat("[rank", rank, "]: ");
    for (absl::string_view l : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      if (absl::ConsumePrefix(&l, prefix)) lines.emplace_back(l);
    }
    return lines;
  }

 private:
  std::atomic<bool> inside_{false};
  absl::Mutex mu_;
  std::string out_ ABSL_GUARDED_BY(mu_);
  std::string err_ ABSL_GUARDED_BY(mu_);
};

JobInfo Job(JobState state, std::vector<std::pair<int, std::string>> ranks, int live = 0) {
  JobInfo j;
  j.job_id = "job-1";
  j.state = state;
  j.live_processes = live;
  for (const auto& [rank, node] : ranks) {
    RankPlacement p;
    p.rank = rank;
    p.node_id = node;
    j.placement.push_back(p);
  }
  return j;
}

std::vector<std::string> Numbered(const std::string& what, int n) {
  std::vector<std::string> lines;
  for (int i = 0; i < n; ++i) lines.push_back(absl::StrCat(what, " line ", i));
  return lines;
}

std::string Joined(const std::vector<std::string>& lines) {
  return absl::StrJoin(lines, "\n") + "\n";
}

TEST(JobLogPrinterTest, PrintsEachRanksLinesWholeAndInOrderOnTheirStreams) {
  FakeSource source(/*chunk=*/3);  // lines arrive cut across chunks
  source.AddNode("n1");
  source.AddNode("n2");
  source.SetJob(Job(JobState::kSucceeded, {{0, "n1"}, {1, "n1"}, {2, "n2"}}));
  const auto r0 = Numbered("zero", 20), r1 = Numbered("one", 15), r2 = Numbered("two", 30);
  source.Append("n1", 0, LogStream::kStdout, Joined(r0));
  source.Append("n1", 1, LogStream::kStdout, Joined(r1));
  source.Append("n2", 2, LogStream::kStdout, Joined(r2));
  source.Append("n2", 2, LogStream::kStderr, "an error\nno newline at the end");
  RecordingSink sink;
  JobLogPrinter printer(source, sink, "job-1", {});
  absl::StatusOr<JobInfo> job = printer.Run();
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state, JobState::kSucceeded);
  EXPECT_EQ(RecordingSink::LinesOf(sink.out(), 0), r0);
  EXPECT_EQ(RecordingSink::LinesOf(sink.out(), 1), r1);
  EXPECT_EQ(RecordingSink::LinesOf(sink.out(), 2), r2);
  EXPECT_EQ(sink.err(), "[rank2]: an error\n[rank2]: no newline at the end\n");
  EXPECT_TRUE(printer.unread().empty());
}

TEST(JobLogPrinterTest, WithoutPrefixLinesAreTheJobsOwn) {
  FakeSource source;
  source.AddNode("n1");
  source.SetJob(Job(JobState::kFailed, {{0, "n1"}}));
  source.Append("n1", 0, LogStream::kStdout, "a\nb\n");
  RecordingSink sink;
  JobLogOptions options;
  options.prefix = false;
  JobLogPrinter printer(source, sink, "job-1", options);
  ASSERT_TRUE(printer.Run().ok());
  EXPECT_EQ(sink.out(), "a\nb\n");
}

TEST(JobLogPrinterTest, FollowingPrintsOutputWrittenUntilTheEndAndReturnsTheLastRecord) {
  FakeSource source;
  source.AddNode("n1");
  source.AddNode("n2");
  source.SetJob(Job(JobState::kRunning, {{0, "n1"}}, /*live=*/1));
  source.Append("n1", 0, LogStream::kStdout, "first\n");
  std::vector<JobState> seen;
  RecordingSink sink;
  JobLogOptions options;
  options.follow = true;
  options.on_job = [&](const JobInfo& j) { seen.push_back(j.state); };
  JobLogPrinter printer(source, sink, "job-1", options);
  std::thread job_runs([&] {
    // Wait until following has printed the first line, then the job restarts on n2,
    // writes there and ends.
    for (absl::Time deadline = absl::Now() + absl::Seconds(30);
         !absl::StrContains(sink.out(), "first") && absl::Now() < deadline;) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    source.Append("n1", 0, LogStream::kStdout, "second\n");
    JobInfo moved = Job(JobState::kRunning, {{0, "n2"}}, 1);
    moved.nodes_used = {"n1", "n2"};
    source.SetJob(moved);
    source.Append("n2", 0, LogStream::kStdout, "third\n");
    source.Append("n2", 0, LogStream::kStdout, "written at the very end\n");
    JobInfo done = Job(JobState::kSucceeded, {{0, "n2"}}, 0);
    done.nodes_used = {"n1", "n2"};
    source.SetJob(done);
  });
  absl::StatusOr<JobInfo> job = printer.Run();
  job_runs.join();
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state, JobState::kSucceeded);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back(), JobState::kSucceeded);
  const std::string out = sink.out();
  // Each node's lines in its order; n1's and n2's are read by readers of their own, so
  // how the two interleave is not fixed ("second" may follow "third").
  auto at = [&](const std::string& line) { return out.find("[rank0]: " + line + "\n"); };
  ASSERT_NE(at("first"), std::string::npos) << out;
  ASSERT_NE(at("second"), std::string::npos) << out;
  ASSERT_NE(at("third"), std::string::npos) << out;
  ASSERT_NE(at("written at the very end"), std::string::npos) << out;
  EXPECT_LT(at("first"), at("second")) << out;
  EXPECT_LT(at("third"), at("written at the very end")) << out;
  EXPECT_EQ(RecordingSink::LinesOf(out, 0).size(), 4u) << out;
}

// Regression: `drover run` must say how its job ended first and only then which node's
// output it could not read; the node is named, never in place of the outcome.
TEST(JobLogPrinterTest, ANodeThatDoesNotAnswerIsNamedAfterTheOutcomeNeverInsteadOfIt) {
  FakeSource source;
  source.AddNode("n1");
  source.AddNode("n2");
  source.SetJob(Job(JobState::kSucceeded, {{0, "n1"}, {1, "n2"}}));
  source.Append("n1", 0, LogStream::kStdout, "from n1\n");
  source.Configure("n2", [](FakeSource::Agent& a) {
    a.fail = absl::UnavailableError("agent-of-n2 refused the connection");
  });
  RecordingSink sink;
  JobLogOptions options;
  options.collect_unread = true;
  options.agent_patience = absl::Milliseconds(600);  // waited for, then named
  JobLogPrinter printer(source, sink, "job-1", options);
  absl::StatusOr<JobInfo> job = printer.Run();
  ASSERT_TRUE(job.ok()) << "the outcome must not be replaced by the read failure: "
                        << job.status();
  EXPECT_EQ(job->state, JobState::kSucceeded);
  EXPECT_EQ(sink.out(), "[rank0]: from n1\n");
  EXPECT_FALSE(absl::StrContains(sink.err(), "n2")) << "said before the outcome: " << sink.err();
  ASSERT_EQ(printer.unread().size(), 1u);
  EXPECT_TRUE(absl::StrContains(printer.unread()[0], "on n2 is not shown")) << printer.unread()[0];
  EXPECT_TRUE(absl::StrContains(printer.unread()[0], "refused the connection"))
      << printer.unread()[0];
  EXPECT_GE(source.Reads("n2"), 2) << "the agent was not waited for";
}

TEST(JobLogPrinterTest, WithoutCollectingTheFirstReadFailureIsTheError) {
  FakeSource source;
  source.AddNode("n1");
  source.SetJob(Job(JobState::kSucceeded, {{0, "n1"}}));
  source.Configure("n1", [](FakeSource::Agent& a) {
    a.fail = absl::PermissionDeniedError("wrong cluster token");
  });
  RecordingSink sink;
  JobLogPrinter printer(source, sink, "job-1", {});
  absl::StatusOr<JobInfo> job = printer.Run();
  EXPECT_TRUE(absl::IsPermissionDenied(job.status())) << job.status();
}

TEST(JobLogPrinterTest, DeadAndUnknownNodesAreNamed) {
  FakeSource source;
  source.AddNode("n1");
  source.AddNode("n3", NodeState::kDead);
  JobInfo j = Job(JobState::kSucceeded, {{0, "n1"}});
  j.nodes_used = {"n1", "n3", "n4"};  // n4: the scheduler does not know it
  source.SetJob(j);
  source.Append("n1", 0, LogStream::kStdout, "ok\n");
  RecordingSink sink;
  JobLogOptions options;
  options.collect_unread = true;
  JobLogPrinter printer(source, sink, "job-1", options);
  ASSERT_TRUE(printer.Run().ok());
  EXPECT_EQ(sink.out(), "[rank0]: ok\n");
  const std::string unread = absl::StrJoin(printer.unread(), "\n");
  EXPECT_TRUE(absl::StrContains(unread, "n3 is dead")) << unread;
  EXPECT_TRUE(absl::StrContains(unread, "n4 is not known to the scheduler")) << unread;
  // Without collecting, they are printed as notes.
  RecordingSink sink2;
  JobLogPrinter printer2(source, sink2, "job-1", {});
  ASSERT_TRUE(printer2.Run().ok());
  EXPECT_TRUE(absl::StrContains(sink2.err(), "drover: n3 is dead")) << sink2.err();
}

TEST(JobLogPrinterTest, AReadCutShortResumesAndPrintsNothingTwice) {
  FakeSource source(/*chunk=*/4);
  source.AddNode("n1");
  source.SetJob(Job(JobState::kSucceeded, {{0, "n1"}}));
  const auto lines = Numbered("resumed", 10);
  source.Append("n1", 0, LogStream::kStdout, Joined(lines));
  source.Configure("n1", [](FakeSource::Agent& a) {
    a.cut_after = 30;  // mid-line
    a.overlap = 3;     // the next read resends bytes already printed
  });
  RecordingSink sink;
  JobLogPrinter printer(source, sink, "job-1", {});
  ASSERT_TRUE(printer.Run().ok());
  EXPECT_EQ(RecordingSink::LinesOf(sink.out(), 0), lines) << sink.out();
  EXPECT_EQ(source.Reads("n1"), 2);
}

TEST(JobLogPrinterTest, FollowingAStalledAgentEndsWhenTheJobDoes) {
  FakeSource source;
  source.AddNode("n1");
  source.SetJob(Job(JobState::kRunning, {{0, "n1"}}, 1));
  source.Append("n1", 0, LogStream::kStdout, "before\n");
  source.Configure("n1", [](FakeSource::Agent& a) { a.stall_follow = true; });
  RecordingSink sink;
  JobLogOptions options;
  options.follow = true;
  JobLogPrinter printer(source, sink, "job-1", options);
  std::thread ender([&] {
    for (absl::Time deadline = absl::Now() + absl::Seconds(30);
         source.Reads("n1") == 0 && absl::Now() < deadline;) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    source.Append("n1", 0, LogStream::kStdout, "after\n");
    source.SetJob(Job(JobState::kFailed, {{0, "n1"}}, 0));
  });
  absl::StatusOr<JobInfo> job = printer.Run();  // hangs without the cancel
  ender.join();
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state, JobState::kFailed);
  EXPECT_EQ(sink.out(), "[rank0]: before\n[rank0]: after\n");
}

TEST(JobLogPrinterTest, AnUnreachableSchedulerIsWaitedForWhileFollowing) {
  FakeSource source;
  source.AddNode("n1");
  source.SetJob(Job(JobState::kRunning, {{0, "n1"}}, 1));
  source.FailGetJob(2);
  RecordingSink sink;
  JobLogOptions options;
  options.follow = true;
  JobLogPrinter printer(source, sink, "job-1", options);
  std::thread ender([&] {
    // The job ends only once following has met both failures (the printer waited).
    for (absl::Time deadline = absl::Now() + absl::Seconds(30);
         source.GetJobFailuresLeft() > 0 && absl::Now() < deadline;) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    source.SetJob(Job(JobState::kSucceeded, {{0, "n1"}}, 0));
  });
  absl::StatusOr<JobInfo> job = printer.Run();
  ender.join();
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state, JobState::kSucceeded);
  EXPECT_TRUE(absl::StrContains(sink.err(), "still waiting for job-1")) << sink.err();
}

// Many nodes streaming at once: every line whole, each rank's lines in order, the sink
// never written from two threads at once.
TEST(JobLogPrinterTest, ManyNodesAtOnceKeepLinesWholeAndOrdered) {
  FakeSource source(/*chunk=*/7);
  std::vector<std::pair<int, std::string>> ranks;
  for (int r = 0; r < 12; ++r) {
    const std::string node = absl::StrCat("n", r % 6);
    if (r < 6) source.AddNode(node);
    ranks.push_back({r, node});
  }
  source.SetJob(Job(JobState::kSucceeded, ranks));
  for (const auto& [r, node] : ranks) {
    source.Append(node, r, LogStream::kStdout, Joined(Numbered(absl::StrCat("r", r), 200)));
  }
  RecordingSink sink;
  JobLogPrinter printer(source, sink, "job-1", {});
  ASSERT_TRUE(printer.Run().ok());
  const std::string out = sink.out();
  for (const auto& [r, node] : ranks) {
    EXPECT_EQ(RecordingSink::LinesOf(out, r), Numbered(absl::StrCat("r", r), 200)) << r;
  }
}

}  // namespace
}  // namespace drover::cli
