// The scheduler's Leases gRPC service (proto/lease.proto): token check, then the lease
// manager (leases, actors), the package store, and driver jobs in the core.
// RequestLease is a callback method: a call waiting for its lease holds no thread (the
// lease manager answers it when its request is granted or its wait ends).
#ifndef DROVER_SCHEDULER_LEASES_SERVICE_H_
#define DROVER_SCHEDULER_LEASES_SERVICE_H_

#include <atomic>
#include <string>

#include "proto/lease.grpc.pb.h"
#include "scheduler/lease_manager.h"
#include "scheduler/package_store.h"
#include "scheduler/scheduler_core.h"

namespace drover {

class LeasesService final
    : public proto::Leases::WithCallbackMethod_RequestLease<proto::Leases::Service> {
 public:
  // All three must outlive the service.
  LeasesService(SchedulerCore* core, LeaseManager* leases, PackageStore* packages, std::string token)
      : core_(core), leases_(leases), packages_(packages), token_(std::move(token)) {}
  // Ends open driver sessions promptly, and answers waiting lease requests (shutdown).
  void BeginShutdown() {
    stopping_ = true;
    leases_->Stop();
  }

  grpc::Status RegisterDriver(grpc::ServerContext* ctx, const proto::RegisterDriverRequest* req,
                              proto::RegisterDriverReply* reply) override;
  grpc::Status DriverSession(grpc::ServerContext* ctx, const proto::DriverSessionRequest* req,
                             grpc::ServerWriter<proto::DriverNotice>* writer) override;
  grpc::ServerUnaryReactor* RequestLease(grpc::CallbackServerContext* ctx,
                                         const proto::RequestLeaseRequest* req,
                                         proto::RequestLeaseReply* reply) override;
  grpc::Status ReturnLease(grpc::ServerContext* ctx, const proto::ReturnWorkerLeaseRequest* req,
                           proto::ReturnWorkerLeaseReply* reply) override;
  grpc::Status ReportWorkerExit(grpc::ServerContext* ctx, const proto::ReportWorkerExitRequest* req,
                                proto::ReportWorkerExitReply* reply) override;
  grpc::Status CreateActor(grpc::ServerContext* ctx, const proto::CreateActorRequest* req,
                           proto::CreateActorReply* reply) override;
  grpc::Status GetActor(grpc::ServerContext* ctx, const proto::GetActorRequest* req,
                        proto::GetActorReply* reply) override;
  grpc::Status KillActor(grpc::ServerContext* ctx, const proto::KillActorRequest* req,
                         proto::KillActorReply* reply) override;
  grpc::Status HasPackage(grpc::ServerContext* ctx, const proto::HasPackageRequest* req,
                          proto::HasPackageReply* reply) override;
  grpc::Status PutPackage(grpc::ServerContext* ctx, grpc::ServerReader<proto::PackageChunk>* reader,
                          proto::PutPackageReply* reply) override;
  grpc::Status GetPackage(grpc::ServerContext* ctx, const proto::GetPackageRequest* req,
                          grpc::ServerWriter<proto::PackageChunk>* writer) override;

 private:
  SchedulerCore* const core_;
  LeaseManager* const leases_;
  PackageStore* const packages_;
  const std::string token_;
  std::atomic<bool> stopping_{false};
};

}  // namespace drover

#endif  // DROVER_SCHEDULER_LEASES_SERVICE_H_
