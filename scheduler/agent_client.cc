#include "scheduler/agent_client.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/rpc.h"
#include "common/status.h"
#include "proto/node_agent.grpc.pb.h"

namespace drover {
namespace {

class GrpcAgentClient : public AgentClient {
 public:
  explicit GrpcAgentClient(std::string token) : token_(std::move(token)) {}

  absl::StatusOr<int> StartProcesses(const std::string& address,
                                     const proto::StartProcessesRequest& req) override {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, token_, std::chrono::seconds(10));
    proto::StartProcessesReply reply;
    grpc::Status s = Stub(address)->StartProcesses(&ctx, req, &reply);
    if (!s.ok()) return Annotate(address, s);
    return reply.master_port();
  }

  absl::Status StopJob(const std::string& address, const proto::StopJobRequest& req) override {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, token_);
    proto::StopJobReply reply;
    grpc::Status s = Stub(address)->StopJob(&ctx, req, &reply);
    return s.ok() ? absl::OkStatus() : Annotate(address, s);
  }

 private:
  static absl::Status Annotate(const std::string& address, const grpc::Status& s) {
    absl::Status st = FromGrpcStatus(s);
    return absl::Status(st.code(), absl::StrCat("node agent ", address, ": ", st.message()));
  }

  proto::NodeAgent::Stub* Stub(const std::string& address) {
    absl::MutexLock lock(&mu_);
    auto& stub = stubs_[address];
    if (!stub) stub = proto::NodeAgent::NewStub(MakeChannel(address));
    return stub.get();
  }

  const std::string token_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<proto::NodeAgent::Stub>> stubs_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<AgentClient> NewGrpcAgentClient(const std::string& token) {
  return std::make_unique<GrpcAgentClient>(token);
}

}  // namespace drover
