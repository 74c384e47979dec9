// The Scheduler gRPC service: checks the cluster token, validates the request's
// shape, and hands it to SchedulerCore. No scheduling logic lives here. Every method is
// synchronous except AgentSession, a callback-API stream held by each agent (its
// sessions live in an AgentSessionHub, agent_session_hub.h).
#ifndef DROVER_SCHEDULER_SCHEDULER_SERVICE_H_
#define DROVER_SCHEDULER_SCHEDULER_SERVICE_H_

#include <string>

#include "common/tls_ca.h"
#include "proto/scheduler.grpc.pb.h"
#include "scheduler/agent_session_hub.h"
#include "scheduler/dashboard_auth.h"
#include "scheduler/job_timeline.h"
#include "scheduler/scheduler_core.h"

namespace drover {

class SchedulerService final
    : public proto::Scheduler::WithCallbackMethod_AgentSession<proto::Scheduler::Service> {
 public:
  // `core` must outlive the service; the service must outlive the gRPC server.
  SchedulerService(SchedulerCore* core, std::string token)
      : core_(core), token_(std::move(token)), sessions_(core) {}

  // Ends every agent session without counting it as the agent's death. Call before
  // the gRPC server's Shutdown (and before the core's Stop).
  void BeginShutdown() { sessions_.BeginShutdown(); }
  AgentSessionHub& sessions() { return sessions_; }

  // Where GetJobTimeline reads (null: NOT_FOUND for every job), and the dashboard that
  // CreateDashboardLogin makes links to (null: FAILED_PRECONDITION) at `http_address`
  // (host:port, also GetClusterStatus's metrics_address) over `scheme` ("http" or
  // "https"). Not owned; must outlive the service. REQUIRES: before serving.
  void SetTimeline(JobTimeline* timeline) { timeline_ = timeline; }
  void SetHttp(DashboardAuth* dashboard, std::string http_address, std::string scheme = "http") {
    dashboard_ = dashboard;
    http_address_ = std::move(http_address);
    http_scheme_ = std::move(scheme);
  }
  // The cluster CA that IssueCertificate signs with (null: the cluster does not use
  // TLS). Not owned; must outlive the service. REQUIRES: before serving.
  void SetCertificateAuthority(const CertificateAuthority* ca) { ca_ = ca; }

  grpc::Status RegisterNode(grpc::ServerContext* ctx, const proto::RegisterNodeRequest* req,
                            proto::RegisterNodeReply* reply) override;
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const proto::HeartbeatRequest* req,
                         proto::HeartbeatReply* reply) override;
  grpc::Status ReportExit(grpc::ServerContext* ctx, const proto::ReportExitRequest* req,
                          proto::ReportExitReply* reply) override;
  grpc::ServerWriteReactor<proto::AgentSessionNotice>* AgentSession(
      grpc::CallbackServerContext* ctx, const proto::AgentSessionRequest* req) override;
  grpc::Status SubmitJob(grpc::ServerContext* ctx, const proto::SubmitJobRequest* req,
                         proto::SubmitJobReply* reply) override;
  grpc::Status GetJob(grpc::ServerContext* ctx, const proto::GetJobRequest* req,
                      proto::GetJobReply* reply) override;
  grpc::Status ListJobs(grpc::ServerContext* ctx, const proto::ListJobsRequest* req,
                        proto::ListJobsReply* reply) override;
  grpc::Status CancelJob(grpc::ServerContext* ctx, const proto::CancelJobRequest* req,
                         proto::CancelJobReply* reply) override;
  grpc::Status GetClusterStatus(grpc::ServerContext* ctx,
                                const proto::GetClusterStatusRequest* req,
                                proto::GetClusterStatusReply* reply) override;
  grpc::Status KvSet(grpc::ServerContext* ctx, const proto::KvSetRequest* req,
                     proto::KvSetReply* reply) override;
  grpc::Status KvGet(grpc::ServerContext* ctx, const proto::KvGetRequest* req,
                     proto::KvGetReply* reply) override;
  grpc::Status KvCompareAndSet(grpc::ServerContext* ctx, const proto::KvCompareAndSetRequest* req,
                               proto::KvCompareAndSetReply* reply) override;
  grpc::Status KvAdd(grpc::ServerContext* ctx, const proto::KvAddRequest* req,
                     proto::KvAddReply* reply) override;
  grpc::Status WatchGeneration(grpc::ServerContext* ctx, const proto::WatchGenerationRequest* req,
                               proto::WatchGenerationReply* reply) override;
  grpc::Status AddObjectLocations(grpc::ServerContext* ctx,
                                  const proto::AddObjectLocationsRequest* req,
                                  proto::AddObjectLocationsReply* reply) override;
  grpc::Status RemoveObjectLocations(grpc::ServerContext* ctx,
                                     const proto::RemoveObjectLocationsRequest* req,
                                     proto::RemoveObjectLocationsReply* reply) override;
  grpc::Status GetObjectLocations(grpc::ServerContext* ctx,
                                  const proto::GetObjectLocationsRequest* req,
                                  proto::GetObjectLocationsReply* reply) override;
  grpc::Status GetJobTimeline(grpc::ServerContext* ctx, const proto::GetJobTimelineRequest* req,
                              proto::GetJobTimelineReply* reply) override;
  grpc::Status ReportTimeline(grpc::ServerContext* ctx, const proto::ReportTimelineRequest* req,
                              proto::ReportTimelineReply* reply) override;
  grpc::Status CreateDashboardLogin(grpc::ServerContext* ctx,
                                    const proto::CreateDashboardLoginRequest* req,
                                    proto::CreateDashboardLoginReply* reply) override;
  grpc::Status IssueCertificate(grpc::ServerContext* ctx, const proto::IssueCertificateRequest* req,
                                proto::IssueCertificateReply* reply) override;

 private:
  SchedulerCore* const core_;
  const std::string token_;
  AgentSessionHub sessions_;
  JobTimeline* timeline_ = nullptr;
  DashboardAuth* dashboard_ = nullptr;
  std::string http_address_;
  std::string http_scheme_ = "http";
  const CertificateAuthority* ca_ = nullptr;
};

}  // namespace drover

#endif  // DROVER_SCHEDULER_SCHEDULER_SERVICE_H_
