#include "scheduler/scheduler_service.h"

#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/status.h"

namespace drover {
namespace {

grpc::Status Invalid(const std::string& msg) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, msg);
}

// How long a long-poll call may wait: what the client asked for, but never past its
// own deadline (answered 50 ms before it, so the client hears the answer, not a
// deadline error of its own).
absl::Duration WaitWithin(const grpc::ServerContext* ctx, int64_t wait_timeout_ms) {
  absl::Duration wait = absl::Milliseconds(std::max<int64_t>(0, wait_timeout_ms));
  return std::min(wait,
                  absl::FromChrono(ctx->deadline()) - absl::Now() - absl::Milliseconds(50));
}

}  // namespace

#define DROVER_CHECK_TOKEN(ctx)                          \
  do {                                                   \
    grpc::Status _auth = CheckToken(*(ctx), token_);     \
    if (!_auth.ok()) return _auth;                       \
  } while (0)

grpc::Status SchedulerService::RegisterNode(grpc::ServerContext* ctx,
                                            const proto::RegisterNodeRequest* req,
                                            proto::RegisterNodeReply* reply) {
  DROVER_CHECK_TOKEN(ctx);
  auto r = core_->RegisterNode(*req);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *reply = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::Heartbeat(grpc::ServerContext* ctx,
                                         const proto::HeartbeatRequest* req,
                                         proto::HeartbeatReply* reply) {
  DROVER_CHECK_TOKEN(ctx);
  if (req->node_id().empty()) return Invalid("Heartbeat needs node_id");
  *reply = core_->Heartbeat(*req);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::ReportExit(grpc::ServerContext* ctx,
                                          const proto::ReportExitRequest* req,
                                          proto::ReportExitReply*) {
  DROVER_CHECK_TOKEN(ctx);
  if (req->node_id().empty() || (req->job_id().empty() && req->exits().empty())) {
    return Invalid("ReportExit needs node_id and job_id (or exits)");
  }
  for (const auto& e : req->exits()) {
    if (e.job_id().empty()) return Invalid("ReportExit: an entry of exits has no job_id");
  }
  core_->ReportExit(*req);
  return grpc::Status::OK;
}

grpc::ServerWriteReactor<proto::AgentSessionNotice>* SchedulerService::AgentSession(
    grpc::CallbackServerContext* ctx, const proto::AgentSessionRequest* req) {
  if (grpc::Status auth = CheckToken(*ctx, token_); !auth.ok()) return sessions_.Refuse(auth);
  if (req->node_id().empty()) return sessions_.Refuse(Invalid("AgentSession needs node_id"));
  return sessions_.Open(*req);
}

grpc::Status SchedulerService::SubmitJob(grpc::ServerContext* ctx,
                                         const proto::SubmitJobRequest* req,
                                         proto::SubmitJobReply* reply) {
  DROVER_CHECK_TOKEN(ctx);
  auto job = core_->SubmitJob(req->spec());
  if (!job.ok()) {
    if (auto accepted = job.status().GetPayload(kAcceptedJobPayload)) {
      ctx->AddTrailingMetadata("x-drover-accepted-job", std::string(*accepted));
    }
    return ToGrpcStatus(job.status());
  }
  *reply->mutable_job() = std::move(*job);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::GetJob(grpc::ServerContext* ctx, const proto::GetJobRequest* req,
                                      proto::GetJobReply* reply) {
  DROVER_CHECK_TOKEN(ctx);
  if (req->job_id().empty()) return Invalid("GetJob needs a job id");
  const absl::Duration wait = WaitWithin(ctx, req->wait_timeout_ms());
  auto job = core_->GetJob(req->job_id(), req->after_version(), wait);
  if (!job.ok()) return ToGrpcStatus(job.status());
  *reply->mutable_job() = std::move(*job);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::ListJobs(grpc::ServerContext* ctx,
                                        const proto::ListJobsRequest* req,
                                        proto::ListJobsReply* reply) {
  DROVER_CHECK_TOKEN(ctx);
  for (auto& j : core_->ListJobs(*req)) *reply->add_jobs() = std::move(j);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::CancelJob(grpc::ServerContext* ctx,
                                         const proto::CancelJobRequest* req,
                                         proto::CancelJobReply* reply) {
  DROVER_CHECK_TOKEN(ctx);
  if (req->job_id().empty()) return Invalid("CancelJob needs a job id");
  auto job = core_->CancelJob(req->job_id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *reply->mutable_job() = std::move(*job);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::GetClusterStatus(grpc::ServerContext* ctx,
                                                const proto::GetClusterStatusRequest*,
                                                proto::GetClusterStatusReply* reply) {
  DROVER_CHECK_TOKEN(ctx);
  *reply = core_->ClusterStatus();
  reply->set_metrics_address(http_address_);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::GetJobTimeline(grpc::ServerContext* ctx,
                                              const proto::GetJobTimelineRequest* req,
                                              proto::GetJobTimelineReply* reply) {
  DROVER_CHECK_TOKEN(ctx);
  if (req->job_id().empty()) return Invalid("GetJobTimeline needs job_id");
  std::optional<JobTimeline::Events> events;
  if (timeline_ != nullptr) events = timeline_->Get(req->job_id());
  if (!events) {
    return grpc::Status(
        grpc::StatusCode::NOT_FOUND,
        absl::StrCat("no events of job '", req->job_id(),
                     "' are kept: it is unknown, older than the ", TimelineLimits().jobs,
                     " jobs with recent events, or ran before the scheduler restarted"));
  }
  for (auto& e : events->events) *reply->add_events() = std::move(e);
  reply->set_dropped(events->dropped);
  reply->set_activity_dropped(events->activity_dropped);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::ReportTimeline(grpc::ServerContext* ctx,
                                              const proto::ReportTimelineRequest* req,
                                              proto::ReportTimelineReply* reply) {
  DROVER_CHECK_TOKEN(ctx);
  if (timeline_ == nullptr) return grpc::Status::OK;  // nothing keeps timelines here
  absl::StatusOr<proto::ReportTimelineReply> r = timeline_->Report(*req);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *reply = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::CreateDashboardLogin(grpc::ServerContext* ctx,
                                                    const proto::CreateDashboardLoginRequest*,
                                                    proto::CreateDashboardLoginReply* reply) {
  DROVER_CHECK_TOKEN(ctx);
  if (dashboard_ == nullptr || http_address_.empty()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this scheduler serves no dashboard (it was started with "
                        "--metrics-port -1); restart it with --metrics-port 0 or a port");
  }
  absl::Time expires;
  const std::string code = dashboard_->NewCode(&expires);
  reply->set_url(absl::StrCat(http_scheme_, "://", http_address_, "/login?code=", code));
  reply->set_expires_ms(absl::ToUnixMillis(expires));
  return grpc::Status::OK;
}

grpc::Status SchedulerService::IssueCertificate(grpc::ServerContext* ctx,
                                                const proto::IssueCertificateRequest* req,
                                                proto::IssueCertificateReply* reply) {
  DROVER_CHECK_TOKEN(ctx);
  if (ca_ == nullptr) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this cluster does not use TLS (its head was started without --tls): "
                        "start the agent without --tls");
  }
  absl::StatusOr<std::string> cert = ca_->Issue(req->csr_pem());
  if (!cert.ok()) return ToGrpcStatus(cert.status());
  reply->set_certificate_pem(*cert);
  reply->set_ca_pem(ca_->cert_pem());
  return grpc::Status::OK;
}

grpc::Status SchedulerService::AddObjectLocations(grpc::ServerContext* ctx,
                                                  const proto::AddObjectLocationsRequest* req,
                                                  proto::AddObjectLocationsReply*) {
  DROVER_CHECK_TOKEN(ctx);
  if (req->node_id().empty()) return Invalid("AddObjectLocations needs node_id");
  for (const auto& o : req->objects()) {
    if (o.object_id().empty() || o.size() < 0) {
      return Invalid("AddObjectLocations: every object needs an id and a size >= 0");
    }
  }
  return ToGrpcStatus(core_->AddObjectLocations(*req));
}

grpc::Status SchedulerService::RemoveObjectLocations(
    grpc::ServerContext* ctx, const proto::RemoveObjectLocationsRequest* req,
    proto::RemoveObjectLocationsReply*) {
  DROVER_CHECK_TOKEN(ctx);
  if (req->node_id().empty()) return Invalid("RemoveObjectLocations needs node_id");
  core_->RemoveObjectLocations(*req);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::GetObjectLocations(grpc::ServerContext* ctx,
                                                  const proto::GetObjectLocationsRequest* req,
                                                  proto::GetObjectLocationsReply* reply) {
  DROVER_CHECK_TOKEN(ctx);
  if (req->object_id().empty()) return Invalid("GetObjectLocations needs an object id");
  // Answered before the client's deadline: an empty list rather than an error. A
  // cancelled call (the client went away, or the server shuts down) stops waiting.
  *reply = core_->GetObjectLocations(req->object_id(), WaitWithin(ctx, req->wait_ms()),
                                     [ctx] { return ctx->IsCancelled(); });
  return grpc::Status::OK;
}

grpc::Status SchedulerService::KvSet(grpc::ServerContext* ctx, const proto::KvSetRequest* req,
                                     proto::KvSetReply*) {
  DROVER_CHECK_TOKEN(ctx);
  if (req->scope().job_id().empty()) return Invalid("KvSet needs scope.job_id");
  return ToGrpcStatus(core_->rendezvous()->Set(*req));
}

grpc::Status SchedulerService::KvGet(grpc::ServerContext* ctx, const proto::KvGetRequest* req,
                                     proto::KvGetReply* reply) {
  DROVER_CHECK_TOKEN(ctx);
  if (req->scope().job_id().empty()) return Invalid("KvGet needs scope.job_id");
  // Answered before the client's deadline, so it hears DEADLINE_EXCEEDED with the key.
  const absl::Duration wait = WaitWithin(ctx, req->wait_timeout_ms());
  auto r = core_->rendezvous()->Get(*req, wait);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *reply = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::KvCompareAndSet(grpc::ServerContext* ctx,
                                               const proto::KvCompareAndSetRequest* req,
                                               proto::KvCompareAndSetReply* reply) {
  DROVER_CHECK_TOKEN(ctx);
  if (req->scope().job_id().empty()) return Invalid("KvCompareAndSet needs scope.job_id");
  auto r = core_->rendezvous()->CompareAndSet(*req);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *reply = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::KvAdd(grpc::ServerContext* ctx, const proto::KvAddRequest* req,
                                     proto::KvAddReply* reply) {
  DROVER_CHECK_TOKEN(ctx);
  if (req->scope().job_id().empty()) return Invalid("KvAdd needs scope.job_id");
  auto r = core_->rendezvous()->Add(*req);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *reply = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::WatchGeneration(grpc::ServerContext* ctx,
                                               const proto::WatchGenerationRequest* req,
                                               proto::WatchGenerationReply* reply) {
  DROVER_CHECK_TOKEN(ctx);
  if (req->scope().job_id().empty()) return Invalid("WatchGeneration needs scope.job_id");
  // Answered before the client's deadline: "still running" rather than an error.
  const absl::Duration wait = WaitWithin(ctx, req->wait_timeout_ms());
  auto r = core_->WatchGeneration(*req, wait);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *reply = std::move(*r);
  return grpc::Status::OK;
}

}  // namespace drover
