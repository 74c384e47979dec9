#include "drover/client.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/auth.h"
#include "common/paths.h"
#include "common/files.h"
#include "common/rpc.h"
#include "common/status.h"
#include "common/status_macros.h"
#include "common/tls.h"
#include "common/utf8.h"
#include "nlohmann/json.hpp"
#include "proto/node_agent.grpc.pb.h"
#include "proto/scheduler.grpc.pb.h"
#include "sdk/internal/convert.h"

namespace drover {

namespace {

// The status payload that carries AcceptedJobId.
constexpr char kAcceptedJobPayload[] = "drover/accepted-job";

// A string field of a small JSON object file ("" if absent or unreadable).
std::string JsonField(const std::string& json, const std::string& key) {
  auto j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) return "";
  return j[key].get<std::string>();
}

}  // namespace

absl::StatusOr<ClusterAddress> ResolveCluster(const std::string& address,
                                              const std::string& token_file,
                                              const std::string& tls_ca_file) {
  ClusterAddress c{address, token_file, tls_ca_file};
  if (c.address.empty()) {
    if (const char* a = std::getenv("DROVER_ADDRESS")) c.address = a;
  }
  if (c.token_file.empty()) {
    if (const char* t = std::getenv("DROVER_TOKEN_FILE")) c.token_file = t;
  }
  if (c.tls_ca_file.empty()) {
    if (const char* t = std::getenv(kTlsCaEnv)) c.tls_ca_file = t;
  }
  const std::string cluster_file = DroverHome() + "/cluster.json";
  if (c.address.empty() || c.token_file.empty() || c.tls_ca_file.empty()) {
    auto json = ReadFile(cluster_file);
    if (json.ok()) {
      const std::string recorded = JsonField(*json, "address");
      if (c.address.empty()) c.address = recorded;
      if (c.token_file.empty()) c.token_file = JsonField(*json, "token_file");
      // The recorded cluster's CA, for that cluster only.
      if (c.tls_ca_file.empty() && c.address == recorded) {
        c.tls_ca_file = JsonField(*json, "tls_ca");
      }
    }
  }
  if (c.address.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no cluster to talk to: start one with `drover up`, or pass --address HOST:PORT "
        "(or set DROVER_ADDRESS); looked for ", cluster_file));
  }
  if (c.token_file.empty()) c.token_file = DroverHome() + "/token";
  return c;
}

struct Client::Stubs {
  std::shared_ptr<const TransportSecurity> transport;
  std::unique_ptr<proto::Scheduler::Stub> scheduler;
  absl::Mutex mu;
  std::map<std::string, std::unique_ptr<proto::NodeAgent::Stub>> agents ABSL_GUARDED_BY(mu);

  proto::NodeAgent::Stub* Agent(const std::string& address) {
    absl::MutexLock lock(&mu);
    auto& s = agents[address];
    if (!s) s = proto::NodeAgent::NewStub(MakeChannel(address, *transport));
    return s.get();
  }
};

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClusterAddress& cluster) {
  DROVER_ASSIGN_OR_RETURN(std::string token, ReadTokenFile(cluster.token_file));
  DROVER_ASSIGN_OR_RETURN(std::shared_ptr<const TransportSecurity> transport,
                          TransportSecurity::Load(TlsFiles{cluster.tls_ca_file, "", ""}));
  std::unique_ptr<Client> c(new Client(cluster.address, std::move(token)));
  c->stubs_->transport = std::move(transport);
  std::shared_ptr<grpc::Channel> channel = MakeChannel(c->address_, *c->stubs_->transport);
  c->stubs_->scheduler = proto::Scheduler::NewStub(channel);
  // A client that cannot speak the scheduler's transport (no CA for a TLS cluster,
  // another cluster's CA, TLS to a plain-text one) is told why within ~1 s: its calls
  // would wait for a channel that never becomes ready until their deadline (5 s) and
  // only then ask why. The connection is one the first call makes anyway; a scheduler
  // that is down or slow to answer is left to the calls, which wait for it.
  const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(1);
  for (grpc_connectivity_state st = channel->GetState(/*try_to_connect=*/true);
       st != GRPC_CHANNEL_READY; st = channel->GetState(/*try_to_connect=*/true)) {
    if (st == GRPC_CHANNEL_TRANSIENT_FAILURE) {
      std::string why = TransportMismatch(c->address_, *c->stubs_->transport);
      if (!why.empty()) {
        return absl::UnavailableError(absl::StrCat("cannot talk to the scheduler: ", why));
      }
      break;
    }
    if (!channel->WaitForStateChange(st, deadline)) break;
  }
  return c;
}

Client::Client(std::string address, std::string token)
    : address_(std::move(address)), token_(std::move(token)), stubs_(new Stubs) {}

Client::~Client() = default;

namespace {

// Client calls wait (within their deadline) for a scheduler that is restarting instead
// of failing on the first refused connection; every call is safe to retry.
void PrepareClientContext(grpc::ClientContext* ctx, const std::string& token,
                          std::chrono::milliseconds timeout = kDefaultRpcTimeout) {
  PrepareContext(ctx, token, timeout);
  ctx->set_wait_for_ready(true);
}

// Runs `call` (which makes one RPC with a fresh context) again while it fails with
// UNAVAILABLE, e.g. on a connection the scheduler closed when it restarted. Only for
// calls that are safe to repeat (all of drover's are).
template <typename Call>
grpc::Status WithRetry(Call call) {
  grpc::Status s;
  for (int attempt = 0; attempt < 4; ++attempt) {
    s = call();
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(100 << attempt));
  }
  return s;
}

absl::Status Annotate(const std::string& address, const grpc::Status& s,
                      const TransportSecurity& transport) {
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
      s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    // Up, but speaking TLS to a plain-text client (or the other way round): say so.
    if (std::string why = TransportMismatch(address, transport); !why.empty()) {
      return absl::UnavailableError(absl::StrCat("cannot talk to the scheduler: ", why));
    }
    return absl::UnavailableError(absl::StrCat(
        "cannot reach the scheduler at ", address, " (", s.error_message(),
        "); is the cluster up? `drover status` checks, `drover up` starts a local one"));
  }
  return FromGrpcStatus(s);
}

}  // namespace

std::optional<std::string> AcceptedJobId(const absl::Status& submit_error) {
  auto id = submit_error.GetPayload(kAcceptedJobPayload);
  if (!id) return std::nullopt;
  return std::string(*id);
}

namespace {

// A job spec's text travels as protobuf strings, which must be UTF-8: other bytes are
// refused here, naming where they are (they made the scheduler drop the call, and the
// CLI print an empty "drover: " line after a libprotobuf error).
absl::Status CheckUtf8(const JobSpec& spec) {
  // An environment value is not shown: it may be a secret.
  auto check = [](const std::string& what, const std::string& s,
                  bool show = true) -> absl::Status {
    const size_t at = InvalidUtf8At(s);
    if (at == absl::string_view::npos) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        what, show ? absl::StrCat(" \"", absl::CHexEscape(s), "\"") : "",
        " is not valid UTF-8 (byte ", at,
        "): a job's command, name, directory and environment travel as UTF-8 text; give "
        "such bytes to the program another way (a file it reads, an escape it decodes)"));
  };
  for (size_t i = 0; i < spec.command.size(); ++i) {
    DROVER_RETURN_IF_ERROR(check(
        i == 0 ? std::string("the command") : absl::StrCat("argument ", i, " of the command"),
        spec.command[i]));
  }
  DROVER_RETURN_IF_ERROR(check("the job name", spec.name));
  DROVER_RETURN_IF_ERROR(check("the working directory", spec.cwd));
  for (const auto& [k, v] : spec.env) {
    DROVER_RETURN_IF_ERROR(check("the environment variable name", k));
    DROVER_RETURN_IF_ERROR(check(absl::StrCat("the value of ", k), v, /*show=*/false));
  }
  return check("the request id", spec.idempotency_key);
}

}  // namespace

absl::StatusOr<JobInfo> Client::Submit(const JobSpec& spec) {
  DROVER_RETURN_IF_ERROR(CheckUtf8(spec));
  proto::SubmitJobRequest req;
  *req.mutable_spec() = internal::ToProto(spec);
  // Retry-safe: the same key returns the same job if a retry reaches the scheduler twice.
  if (req.spec().idempotency_key().empty()) {
    req.mutable_spec()->set_idempotency_key(GenerateToken().substr(0, 24));
  }
  proto::SubmitJobReply reply;
  std::string accepted;  // the job a failed call made anyway
  grpc::Status s = WithRetry([&] {
    grpc::ClientContext ctx;
    PrepareClientContext(&ctx, token_);
    grpc::Status st = stubs_->scheduler->SubmitJob(&ctx, req, &reply);
    const auto& trailers = ctx.GetServerTrailingMetadata();
    if (auto it = trailers.find("x-drover-accepted-job"); it != trailers.end()) {
      accepted.assign(it->second.data(), it->second.size());
    }
    return st;
  });
  if (!s.ok()) {
    absl::Status status = Annotate(address_, s, *stubs_->transport);
    if (!accepted.empty()) {
      status = absl::Status(status.code(),
                            absl::StrCat(status.message(), " (its request id: \"",
                                         req.spec().idempotency_key(), "\")"));
      status.SetPayload(kAcceptedJobPayload, absl::Cord(accepted));
    }
    return status;
  }
  return internal::FromProto(reply.job());
}

absl::StatusOr<JobInfo> Client::GetJob(const std::string& job_id, int64_t after_version,
                                       absl::Duration wait) {
  proto::GetJobRequest req;
  req.set_job_id(job_id);
  req.set_after_version(after_version);
  req.set_wait_timeout_ms(absl::ToInt64Milliseconds(wait));
  proto::GetJobReply reply;
  grpc::Status s = WithRetry([&] {
    grpc::ClientContext ctx;
    PrepareClientContext(&ctx, token_, kDefaultRpcTimeout + absl::ToChronoMilliseconds(wait));
    return stubs_->scheduler->GetJob(&ctx, req, &reply);
  });
  if (!s.ok()) return Annotate(address_, s, *stubs_->transport);
  return internal::FromProto(reply.job());
}

absl::StatusOr<JobInfo> Client::WaitJob(const std::string& job_id, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  int64_t version = 0;
  int unavailable = 0;
  for (;;) {
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          absl::StrCat("job ", job_id, " did not finish within ", absl::FormatDuration(timeout)));
    }
    auto job = GetJob(job_id, version, std::min(left, absl::Seconds(10)));
    if (!job.ok()) {
      // Ride out a scheduler restart for a while.
      if (absl::IsUnavailable(job.status()) && ++unavailable < 20) {
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
        continue;
      }
      return job.status();
    }
    unavailable = 0;
    if (IsTerminal(job->state) && job->live_processes == 0) return job;
    version = job->version;
  }
}

absl::StatusOr<std::vector<JobInfo>> Client::ListJobs(const std::vector<JobState>& states,
                                                      int limit) {
  proto::ListJobsRequest req;
  for (JobState s : states) req.add_states(internal::ToProto(s));
  req.set_limit(limit);
  proto::ListJobsReply reply;
  grpc::Status s = WithRetry([&] {
    grpc::ClientContext ctx;
    PrepareClientContext(&ctx, token_);
    return stubs_->scheduler->ListJobs(&ctx, req, &reply);
  });
  if (!s.ok()) return Annotate(address_, s, *stubs_->transport);
  std::vector<JobInfo> jobs;
  jobs.reserve(reply.jobs_size());
  for (const auto& j : reply.jobs()) jobs.push_back(internal::FromProto(j));
  return jobs;
}

absl::StatusOr<JobInfo> Client::Cancel(const std::string& job_id) {
  proto::CancelJobRequest req;
  req.set_job_id(job_id);
  proto::CancelJobReply reply;
  grpc::Status s = WithRetry([&] {
    grpc::ClientContext ctx;
    PrepareClientContext(&ctx, token_);
    return stubs_->scheduler->CancelJob(&ctx, req, &reply);
  });
  if (!s.ok()) return Annotate(address_, s, *stubs_->transport);
  return internal::FromProto(reply.job());
}

absl::StatusOr<ClusterStatus> Client::Status() {
  proto::GetClusterStatusReply reply;
  grpc::Status s = WithRetry([&] {
    grpc::ClientContext ctx;
    PrepareClientContext(&ctx, token_);
    return stubs_->scheduler->GetClusterStatus(&ctx, {}, &reply);
  });
  if (!s.ok()) return Annotate(address_, s, *stubs_->transport);
  return internal::FromProto(reply);
}

absl::StatusOr<JobTimeline> Client::Timeline(const std::string& job_id) {
  proto::GetJobTimelineRequest req;
  req.set_job_id(job_id);
  proto::GetJobTimelineReply reply;
  grpc::Status s = WithRetry([&] {
    grpc::ClientContext ctx;
    PrepareClientContext(&ctx, token_);
    return stubs_->scheduler->GetJobTimeline(&ctx, req, &reply);
  });
  if (!s.ok()) return Annotate(address_, s, *stubs_->transport);
  return internal::FromProto(reply);
}

absl::StatusOr<DashboardLogin> Client::CreateDashboardLogin() {
  proto::CreateDashboardLoginReply reply;
  grpc::Status s = WithRetry([&] {
    grpc::ClientContext ctx;
    PrepareClientContext(&ctx, token_);
    return stubs_->scheduler->CreateDashboardLogin(&ctx, {}, &reply);
  });
  if (!s.ok()) return Annotate(address_, s, *stubs_->transport);
  return DashboardLogin{reply.url(), absl::FromUnixMillis(reply.expires_ms())};
}

absl::Status Client::StreamLogs(const std::string& agent_address, const std::string& job_id,
                                bool follow, const std::vector<LogOffset>& offsets,
                                const std::function<void(const LogChunk&)>& on_chunk,
                                const std::atomic<bool>* cancel, absl::Duration timeout) {
  proto::StreamLogsRequest req;
  req.set_job_id(job_id);
  req.set_follow(follow);
  for (const auto& o : offsets) *req.add_offsets() = internal::ToProto(o);
  grpc::ClientContext ctx;
  PrepareClientContext(&ctx, token_, absl::ToChronoMilliseconds(timeout));
  // Looks at `cancel` every 20 ms while the stream lasts; told at once when it ends (a
  // sleeping watcher made every call, and so every `drover run`, ~20 ms longer).
  absl::Notification done;
  std::thread watcher;
  if (cancel != nullptr) {
    watcher = std::thread([&] {
      do {
        if (cancel->load()) {
          ctx.TryCancel();
          return;
        }
      } while (!done.WaitForNotificationWithTimeout(absl::Milliseconds(20)));
    });
  }
  auto reader = stubs_->Agent(agent_address)->StreamLogs(&ctx, req);
  proto::LogChunk chunk;
  while (reader->Read(&chunk)) on_chunk(internal::FromProto(chunk));
  grpc::Status s = reader->Finish();
  done.Notify();
  if (watcher.joinable()) watcher.join();
  if (s.error_code() == grpc::StatusCode::CANCELLED && cancel != nullptr && cancel->load()) {
    return absl::OkStatus();
  }
  absl::Status status = FromGrpcStatus(s);
  if (!status.ok()) {
    std::string why = status.code() == absl::StatusCode::kUnavailable
                          ? TransportMismatch(agent_address, *stubs_->transport)
                          : "";
    return absl::Status(status.code(), absl::StrCat("logs from node agent ", agent_address, ": ",
                                                    why.empty() ? status.message() : why));
  }
  return absl::OkStatus();
}

}  // namespace drover
