#include "bench/scale_harness.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
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

int64_t SchedulerProcess::RssBytes() const {
  std::ifstream in(absl::StrCat("/proc/", pid_, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return 0;
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
          if (s.ok()) continue;
          if (samples_.errors++ == 0) samples_.first_error = std::string(s.message());
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
          if (mine.errors++ == 0) mine.first_error = std::string(job.status().message());
          continue;
        }
        mine.latency_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
        mine.job_ids.push_back(job->job_id);
      }
      absl::MutexLock l(&mu);
      result.latency_ms.insert(result.latency_ms.end(), mine.latency_ms.begin(),
                               mine.latency_ms.end());
      result.job_ids.insert(result.job_ids.end(), mine.job_ids.begin(), mine.job_ids.end());
      if (result.errors == 0) result.first_error = mine.first_error;
      result.errors += mine.errors;
    });
  }
  for (auto& w : workers) w.join();
  result.wall = absl::Now() - start;
  return result;
}

std::string DescribeLatencies(const std::vector<double>& ms) {
  if (ms.empty()) return "(no samples)";
  return absl::StrFormat("p50 %.2f ms p99 %.2f ms max %.2f ms (n %d)", Median(ms),
                         Percentile(ms, 0.99), Percentile(ms, 1.0), ms.size());
}

}  // namespace drover::bench
