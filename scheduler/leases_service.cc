#include "scheduler/leases_service.h"

#include "absl/time/clock.h"
#include "common/auth.h"
#include "common/log.h"
#include "common/status.h"

namespace drover {
namespace {

// How often an open driver session checks whether its client is still there.
constexpr absl::Duration kSessionPoll = absl::Milliseconds(100);

}  // namespace


grpc::Status LeasesService::RegisterDriver(grpc::ServerContext* ctx,
                                           const proto::RegisterDriverRequest* req,
                                           proto::RegisterDriverReply* reply) {
  if (grpc::Status s = CheckToken(*ctx, token_); !s.ok()) return s;
  absl::StatusOr<std::string> job = core_->RegisterDriver(*req);
  if (!job.ok()) return ToGrpcStatus(job.status());
  reply->set_job_id(*job);
  return grpc::Status::OK;
}

grpc::Status LeasesService::DriverSession(grpc::ServerContext* ctx,
                                          const proto::DriverSessionRequest* req,
                                          grpc::ServerWriter<proto::DriverNotice>* writer) {
  if (grpc::Status s = CheckToken(*ctx, token_); !s.ok()) return s;
  if (absl::Status s = core_->CheckDriver(req->job_id()); !s.ok()) return ToGrpcStatus(s);
  core_->DriverAttached(req->job_id());
  // The first notice lists every node; later ones the nodes that changed (a death, a
  // store restart), as they change: the driver never polls for them.
  NodeFeed* feed = core_->node_feed();
  uint64_t seen = 0;
  proto::DriverNotice attached;
  attached.set_attached(true);
  for (proto::DriverNodeState& n : feed->Next(&seen, absl::InfinitePast())) {
    *attached.add_nodes() = std::move(n);
  }
  writer->Write(attached);
  // The sync API has no close callback: look every 100 ms (waiting for node news
  // meanwhile). A driver that exits (or is killed) closes its connection, and the call
  // is cancelled.
  while (!ctx->IsCancelled() && !stopping_ && core_->CheckDriver(req->job_id()).ok()) {
    std::vector<proto::DriverNodeState> changed = feed->Next(&seen, absl::Now() + kSessionPoll);
    if (changed.empty()) continue;
    proto::DriverNotice notice;
    for (proto::DriverNodeState& n : changed) *notice.add_nodes() = std::move(n);
    if (!writer->Write(notice)) break;
  }
  if (ctx->IsCancelled()) core_->EndDriver(req->job_id(), "its driver disconnected");
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* LeasesService::RequestLease(grpc::CallbackServerContext* ctx,
                                                      const proto::RequestLeaseRequest* req,
                                                      proto::RequestLeaseReply* reply) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (grpc::Status s = CheckToken(*ctx, token_); !s.ok()) {
    reactor->Finish(s);
    return reactor;
  }
  // Answered once, maybe before this returns, maybe from the thread of its grant.
  leases_->RequestLease(*req, [reactor, reply](absl::StatusOr<proto::RequestLeaseReply> r) {
    if (!r.ok()) return reactor->Finish(ToGrpcStatus(r.status()));
    *reply = *std::move(r);
    reactor->Finish(grpc::Status::OK);
  });
  return reactor;
}

grpc::Status LeasesService::ReturnLease(grpc::ServerContext* ctx, const proto::ReturnWorkerLeaseRequest* req,
                                        proto::ReturnWorkerLeaseReply*) {
  if (grpc::Status s = CheckToken(*ctx, token_); !s.ok()) return s;
  leases_->ReturnLease(req->lease_id(), req->reason());
  return grpc::Status::OK;
}

grpc::Status LeasesService::ReportWorkerExit(grpc::ServerContext* ctx,
                                             const proto::ReportWorkerExitRequest* req,
                                             proto::ReportWorkerExitReply*) {
  if (grpc::Status s = CheckToken(*ctx, token_); !s.ok()) return s;
  leases_->WorkerExited(*req);
  return grpc::Status::OK;
}

grpc::Status LeasesService::CreateActor(grpc::ServerContext* ctx, const proto::CreateActorRequest* req,
                                        proto::CreateActorReply* reply) {
  if (grpc::Status s = CheckToken(*ctx, token_); !s.ok()) return s;
  absl::StatusOr<proto::ActorInfo> a = leases_->CreateActor(*req);
  if (!a.ok()) return ToGrpcStatus(a.status());
  *reply->mutable_actor() = *std::move(a);
  return grpc::Status::OK;
}

grpc::Status LeasesService::GetActor(grpc::ServerContext* ctx, const proto::GetActorRequest* req,
                                     proto::GetActorReply* reply) {
  if (grpc::Status s = CheckToken(*ctx, token_); !s.ok()) return s;
  absl::StatusOr<proto::ActorInfo> a = leases_->GetActor(*req);
  if (!a.ok()) return ToGrpcStatus(a.status());
  *reply->mutable_actor() = *std::move(a);
  return grpc::Status::OK;
}

grpc::Status LeasesService::KillActor(grpc::ServerContext* ctx, const proto::KillActorRequest* req,
                                      proto::KillActorReply*) {
  if (grpc::Status s = CheckToken(*ctx, token_); !s.ok()) return s;
  return ToGrpcStatus(leases_->KillActor(req->actor_id(), req->reason()));
}

grpc::Status LeasesService::HasPackage(grpc::ServerContext* ctx, const proto::HasPackageRequest* req,
                                       proto::HasPackageReply* reply) {
  if (grpc::Status s = CheckToken(*ctx, token_); !s.ok()) return s;
  reply->set_present(packages_->Has(req->hash()));
  return grpc::Status::OK;
}

grpc::Status LeasesService::PutPackage(grpc::ServerContext* ctx,
                                       grpc::ServerReader<proto::PackageChunk>* reader,
                                       proto::PutPackageReply*) {
  if (grpc::Status s = CheckToken(*ctx, token_); !s.ok()) return s;
  return ToGrpcStatus(packages_->Put(reader));
}

grpc::Status LeasesService::GetPackage(grpc::ServerContext* ctx, const proto::GetPackageRequest* req,
                                       grpc::ServerWriter<proto::PackageChunk>* writer) {
  if (grpc::Status s = CheckToken(*ctx, token_); !s.ok()) return s;
  return ToGrpcStatus(packages_->Get(req->hash(), writer));
}

}  // namespace drover
