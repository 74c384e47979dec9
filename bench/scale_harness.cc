#include "bench/scale_harness.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <iostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "common/auth.h"
#include "common/files.h"
#include "common/spawn.h"

namespace drover::bench {
namespace {

// The value of "key":"..." in the scheduler's ready file.
std::string JsonString(const std::string& json, const std::string& key) {
  const std::string needle = absl::StrCat("\"", key, "\":\"");
  auto pos = json.find(needle);
  if (pos == std::string::npos) return "";
  pos += needle.size();
  return json.substr(pos, json.find('"', pos) - pos);
}

template <typename T>
void Append(std::vector<T>* to, const std::vector<T>& from) {
  to->insert(to->end(), from.begin(), from.end());
}

}  // namespace

absl::StatusOr<std::unique_ptr<SchedulerProcess>> SchedulerProcess::Start(
    const std::string& binary, const std::string& dir, const std::vector<std::string>& flags) {
  std::unique_ptr<SchedulerProcess> p(new SchedulerProcess);
  p->token_file_ = dir + "/token";
  absl::StatusOr<std::string> token = LoadOrCreateTokenFile(p->token_file_);
  if (!token.ok()) return token.status();
  p->token_ = *token;
  p->log_ = dir + "/scheduler.log";
  const std::string ready = dir + "/scheduler.ready";
  SpawnOptions o;
  o.argv = {binary, "--bind", "127.0.0.1", "--port", "0", "--token-file", p->token_file_,
            "--ready-file", ready};
  o.argv.insert(o.argv.end(), flags.begin(), flags.end());
  o.stdout_path = o.stderr_path = p->log_;
  absl::StatusOr<pid_t> pid = Spawn(o);
  if (!pid.ok()) return pid.status();
  p->pid_ = *pid;
  for (absl::Time deadline = absl::Now() + absl::Seconds(30); absl::Now() < deadline;) {
    absl::StatusOr<std::string> json = ReadFile(ready);
    if (json.ok()) p->address_ = JsonString(*json, "address");
    if (!p->address_.empty()) return p;
    if (!p->Running()) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::UnavailableError(
      absl::StrCat("drover-scheduler did not start; its log:\n", p->LogTail()));
}

SchedulerProcess::~SchedulerProcess() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  int status;
  for (absl::Time deadline = absl::Now() + absl::Seconds(15); absl::Now() < deadline;) {
    if (::waitpid(pid_, &status, WNOHANG) != 0) return;
    absl::SleepFor(absl::Milliseconds(10));
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, &status, 0);
}

absl::Duration SchedulerProcess::CpuTime() const {
  std::ifstream in(absl::StrCat("/proc/", pid_, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Fields after the command name (which may hold spaces) in parentheses: state is the
  // 3rd field of the line, utime the 14th and stime the 15th.
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return absl::ZeroDuration();
  std::vector<std::string> f = absl::StrSplit(stat.substr(close + 2), ' ');
  if (f.size() < 13) return absl::ZeroDuration();
  const double ticks = std::stod(f[11]) + std::stod(f[12]);
  return absl::Seconds(ticks / static_cast<double>(::sysconf(_SC_CLK_TCK)));
}

namespace {

// The number after `key` in /proc/<pid>/status, 0 if absent.
int64_t StatusField(pid_t pid, const std::string& key) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(key.size()));
  }
  return 0;
}

}  // namespace

int64_t SchedulerProcess::RssBytes() const { return StatusField(pid_, "VmRSS:") * 1024; }

int SchedulerProcess::Threads() const { return static_cast<int>(StatusField(pid_, "Threads:")); }

absl::Duration SchedulerProcess::RunQueueWait() const {
  // Per thread: time on a CPU, time waiting for one (ns), time slices.
  absl::Duration wait;
  std::error_code ec;
  for (const auto& task :
       std::filesystem::directory_iterator(absl::StrCat("/proc/", pid_, "/task"), ec)) {
    std::ifstream in(task.path() / "schedstat");
    int64_t on_cpu = 0, waiting = 0;
    if (in >> on_cpu >> waiting) wait += absl::Nanoseconds(waiting);
  }
  return wait;
}

bool SchedulerProcess::Running() {
  if (pid_ <= 0) return false;
  int status;
  if (::waitpid(pid_, &status, WNOHANG) == 0) return true;
  pid_ = -1;
  return false;
}

std::string SchedulerProcess::LogTail() const {
  absl::StatusOr<std::string> log = ReadFile(log_);
  if (!log.ok()) return std::string(log.status().message());
  return log->size() > 4000 ? log->substr(log->size() - 4000) : *log;
}

LatencyProbe::LatencyProbe(Client* client, absl::Duration pause)
    : client_(client), pause_(pause) {
  thread_ = std::thread([this] {
    while (!stop_) {
      absl::Time t0 = absl::Now();
      absl::Status jobs = client_->ListJobs({}, 50).status();
      absl::Time t1 = absl::Now();
      absl::Status status = client_->Status().status();
      absl::Time t2 = absl::Now();
      {
        absl::MutexLock l(&mu_);
        for (const absl::Status& s : {jobs, status}) {
          if (!s.ok()) samples_.errors.Add(s);
        }
        if (jobs.ok()) samples_.jobs_ms.push_back(absl::ToDoubleMilliseconds(t1 - t0));
        if (status.ok()) samples_.status_ms.push_back(absl::ToDoubleMilliseconds(t2 - t1));
      }
      absl::SleepFor(pause_);
    }
  });
}

LatencyProbe::~LatencyProbe() {
  stop_ = true;
  thread_.join();
}

LatencyProbe::Samples LatencyProbe::Take() {
  absl::MutexLock l(&mu_);
  return std::exchange(samples_, {});
}

SubmitResult SubmitMany(Client& client, const JobSpec& spec, int count, int threads) {
  SubmitResult result;
  absl::Mutex mu;
  std::vector<std::thread> workers;
  const absl::Time start = absl::Now();
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      SubmitResult mine;
      for (int i = t; i < count; i += threads) {
        const absl::Time t0 = absl::Now();
        absl::StatusOr<JobInfo> job = client.Submit(spec);
        if (!job.ok()) {
          mine.errors.Add(job.status());
          continue;
        }
        mine.latency_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
        mine.job_ids.push_back(job->job_id);
      }
      absl::MutexLock l(&mu);
      Append(&result.latency_ms, mine.latency_ms);
      Append(&result.job_ids, mine.job_ids);
      result.errors.Merge(mine.errors);
    });
  }
  for (auto& w : workers) w.join();
  result.wall = absl::Now() - start;
  return result;
}

LoadResult RunLoad(const ClusterAddress& cluster, const JobSpec& spec, int clients,
                   absl::Duration duration) {
  LoadResult result;
  absl::Mutex mu;
  std::vector<std::thread> threads;
  const absl::Time start = absl::Now(), end = start + duration;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      LoadResult mine;
      auto client = Client::Connect(cluster);
      if (!client.ok()) mine.errors.Add(client.status());
      while (client.ok() && absl::Now() < end) {
        absl::Time t0 = absl::Now();
        absl::StatusOr<JobInfo> job = (*client)->Submit(spec);
        if (!job.ok()) {
          mine.errors.Add(job.status());
          continue;
        }
        mine.submit_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
        mine.job_ids.push_back(job->job_id);
        t0 = absl::Now();
        const std::string& earlier = mine.job_ids[mine.job_ids.size() / 2];
        absl::Status polled = (*client)->GetJob(earlier).status();
        if (!polled.ok()) {
          mine.errors.Add(polled);
          continue;
        }
        mine.poll_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
      }
      absl::MutexLock l(&mu);
      Append(&result.submit_ms, mine.submit_ms);
      Append(&result.poll_ms, mine.poll_ms);
      Append(&result.job_ids, mine.job_ids);
      result.errors.Merge(mine.errors);
    });
  }
  for (auto& t : threads) t.join();
  result.wall = absl::Now() - start;
  return result;
}

absl::StatusOr<int64_t> JobCount(Client& client) {
  absl::StatusOr<ClusterStatus> status = client.Status();
  if (!status.ok()) return status.status();
  int64_t n = 0;
  for (const auto& [state, count] : status->job_counts) n += count;
  return n;
}

absl::Status CheckEverySubmissionRan(Client& client, const LoadResult& load, int64_t jobs_before,
                                     absl::Duration timeout) {
  const std::set<std::string> distinct(load.job_ids.begin(), load.job_ids.end());
  if (distinct.size() != load.job_ids.size()) {
    return absl::InternalError(absl::StrCat(load.job_ids.size() - distinct.size(),
                                            " submissions returned a job id given before"));
  }
  const int64_t want = jobs_before + static_cast<int64_t>(load.job_ids.size());
  for (absl::Time deadline = absl::Now() + timeout;; absl::SleepFor(absl::Milliseconds(50))) {
    absl::StatusOr<ClusterStatus> status = client.Status();
    if (!status.ok()) return status.status();
    int64_t total = 0;
    for (const auto& [state, count] : status->job_counts) total += count;
    if (total != want) {
      return absl::InternalError(absl::StrCat("the scheduler holds ", total, " jobs; ", want,
                                              " were submitted (", load.job_ids.size(),
                                              " under load)"));
    }
    if (status->job_counts[JobState::kSucceeded] == want) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          status->job_counts[JobState::kSucceeded], " of ", want, " jobs SUCCEEDED after ",
          absl::FormatDuration(timeout)));
    }
  }
}

void Bench(const std::string& name, int nodes, double value, const std::string& unit,
           const std::string& target, bool pass) {
  std::cout << absl::StrFormat("BENCH %s_%d %.6g %s", name, nodes, value, unit);
  if (!target.empty()) std::cout << " target" << target << " " << (pass ? "PASS" : "MISS");
  std::cout << std::endl;
}

void Note(const std::string& what) { std::cout << "  " << what << std::endl; }

std::string DescribeLatencies(const std::vector<double>& ms) {
  if (ms.empty()) return "(no samples)";
  return absl::StrFormat("p50 %.2f ms p99 %.2f ms max %.2f ms (n %d)", Median(ms),
                         Percentile(ms, 0.99), Percentile(ms, 1.0), ms.size());
}

}  // namespace drover::bench
