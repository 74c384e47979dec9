#include "tests/chaos/workload.h"

#include <unistd.h>


#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace drover::chaos {
namespace {

// The id after "drover: submitted " in a drover run's stderr ("" if absent), or after
// "chaos_tasks job " in a driver's stdout.
std::string IdAfter(const std::string& text, const std::string& marker) {
  size_t at = text.find(marker);
  if (at == std::string::npos) return "";
  at += marker.size();
  return text.substr(at, text.find_first_of(" \n", at) - at);
}

}  // namespace

const char* JobKindName(JobKind k) {
  switch (k) {
    case JobKind::kGang: return "gang";
    case JobKind::kSmall: return "small";
    case JobKind::kFailing: return "failing";
    case JobKind::kCancelled: return "cancelled";
    case JobKind::kObjects: return "objects";
    case JobKind::kEcho: return "echo";
    case JobKind::kTasks: return "tasks";
    case JobKind::kReadback: return "readback";
    case JobKind::kAfter: return "after";
  }
  return "?";
}

Workload::Workload(WorkloadOptions options) : options_(std::move(options)) {}

Workload::~Workload() { Stop(); }

absl::Status Workload::Start() {
  auto client = Client::Connect({options_.env.address, options_.env.token_file});
  if (!client.ok()) return client.status();
  client_ = std::move(*client);
  const std::string truth = "--truth";
  Loop([this](int64_t) { SubmitAndWait(JobKind::kGang, SpecOf(JobKind::kGang)); });
  for (int i = 0; i < 2; ++i) {
    Loop([this](int64_t n) {
      const JobKind kind = n % 6 == 5   ? JobKind::kCancelled
                           : n % 4 == 3 ? JobKind::kFailing
                                        : JobKind::kSmall;
      SubmitAndWait(kind, SpecOf(kind));
    });
  }
  Loop([this](int64_t) { SubmitAndWait(JobKind::kObjects, SpecOf(JobKind::kObjects)); });
  Loop([this, truth](int64_t n) {
    if (n % 2 == 0) {
      const std::string token = absl::StrCat("chaos-echo-", serial_++);
      DroverRun(JobKind::kEcho, {"--", "/bin/echo", token}, 0, token);
    } else {
      DroverRun(JobKind::kSmall,
                {"--nproc", "2", "--", options_.worker, "small", truth, options_.truth_dir,
                 "--lines", "4"},
                0);
    }
  });
  Loop([this, truth](int64_t n) {
    if (n % 2 == 0) {
      PlainDriver();
    } else {
      DroverRun(JobKind::kTasks,
                {"--", options_.tasks, truth, options_.truth_dir, "--rounds", "2"}, 0);
    }
  });
  return absl::OkStatus();
}

void Workload::Loop(const std::function<void(int64_t)>& step) {
  threads_.emplace_back([this, step] {
    for (int64_t n = 0; !stop_.load(); ++n) {
      step(n);
      absl::SleepFor(absl::Milliseconds(200));
    }
  });
}

void Workload::Stop() {
  stop_ = true;
  for (auto& t : threads_) t.join();
  threads_.clear();
}

std::vector<JobRecord> Workload::Records() const {
  absl::MutexLock lock(&mu_);
  return records_;
}

void Workload::Keep(const JobRecord& r) {
  absl::MutexLock lock(&mu_);
  records_.push_back(r);
}

JobSpec Workload::SpecOf(JobKind kind) const {
  const std::string& w = options_.worker;
  const std::string& t = options_.truth_dir;
  JobSpec spec;
  spec.nproc = 1;
  spec.strategy = PlacementStrategy::kPack;
  spec.per_process.cpus = 1;
  switch (kind) {
    case JobKind::kGang:
      spec.command = {w, "gang", "--truth", t, "--steps", "30", "--step-ms", "100"};
      spec.nproc = 4;
      spec.nproc_per_node = 2;
      spec.max_restarts = 2;
      break;
    case JobKind::kFailing:
      spec.command = {w, "small", "--truth", t, "--lines", "3", "--exit", "3"};
      break;
    case JobKind::kCancelled:
      spec.command = {w, "small", "--truth", t, "--lines", "300", "--line-ms", "100"};
      break;
    case JobKind::kObjects:
      spec.command = {w, "objects", "--truth", t, "--count", "6", "--max-kib", "2048",
                      "--timeout-s", "15"};
      spec.nproc = 2;
      spec.nproc_per_node = 1;
      break;
    default:
      spec.command = {w, "small", "--truth", t, "--lines", "5"};
      break;
  }
  spec.name = absl::StrCat("chaos-", JobKindName(kind));
  return spec;
}

JobRecord Workload::SubmitAndWait(JobKind kind, JobSpec spec, absl::Duration wait) {
  JobRecord r;
  r.kind = kind;
  r.how = "sdk";
  r.expected_exit = kind == JobKind::kFailing ? 3 : kind == JobKind::kCancelled ? 130 : 0;
  r.idempotency_key = absl::StrCat("chaos-", ::getpid(), "-", serial_++);
  spec.idempotency_key = r.idempotency_key;
  r.submitted = absl::Now();
  // The same key on every attempt: one job however many attempts reach the scheduler.
  const absl::Time give_up = r.submitted + absl::Seconds(60);
  absl::StatusOr<JobInfo> job = client_->Submit(spec);
  while (!job.ok() && absl::IsUnavailable(job.status()) && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(500));
    job = client_->Submit(spec);
  }
  if (!job.ok()) {
    r.submit_status = job.status();
    r.returned = absl::Now();
    Keep(r);
    absl::SleepFor(absl::Seconds(1));  // refused (e.g. a node is down): not in a tight loop
    return r;
  }
  r.job_id = job->job_id;
  if (kind == JobKind::kCancelled) {
    absl::SleepFor(absl::Milliseconds(1500));
    absl::StatusOr<JobInfo> c = client_->Cancel(r.job_id);
    for (int i = 0; !c.ok() && i < 60; ++i) {
      absl::SleepFor(absl::Milliseconds(500));
      c = client_->Cancel(r.job_id);
    }
  }
  (void)client_->WaitJob(r.job_id, wait > absl::ZeroDuration() ? wait : options_.job_timeout);
  r.returned = absl::Now();
  Keep(r);
  return r;
}

void Workload::RunBounded(const std::vector<std::string>& argv, JobRecord& r) {
  RunResult run = RunWithCluster(options_.env, argv, options_.job_timeout);
  r.submitted = run.started;
  r.returned = run.ended;
  r.cli_exit = run.exit;
  r.cli_timed_out = run.timed_out;
  r.cli_out = std::move(run.out);
  r.cli_err = std::move(run.err);
}

JobRecord Workload::DroverRun(JobKind kind, const std::vector<std::string>& args,
                              int expected_exit, const std::string& echo_token) {
  JobRecord r;
  r.kind = kind;
  r.how = "cli";
  r.expected_exit = expected_exit;
  r.echo_token = echo_token;
  std::vector<std::string> argv = {options_.drover, "run"};
  argv.insert(argv.end(), args.begin(), args.end());
  RunBounded(argv, r);
  r.job_id = IdAfter(r.cli_err, "drover: submitted ");
  if (r.job_id.empty()) r.submit_status = absl::UnknownError(r.cli_err);
  Keep(r);
  return r;
}

JobRecord Workload::PlainDriver() {
  JobRecord r;
  r.kind = JobKind::kTasks;
  r.how = "driver";
  RunBounded({options_.tasks, "--truth", options_.truth_dir, "--rounds", "2"}, r);
  r.job_id = IdAfter(r.cli_out, "chaos_tasks job ");
  if (r.job_id.empty()) r.submit_status = absl::UnknownError(r.cli_err);
  Keep(r);
  return r;
}

}  // namespace drover::chaos
