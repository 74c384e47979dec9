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

  void StartProcessesAsync(const std::string& address, const proto::StartProcessesRequest& req,
                           std::function<void(absl::StatusOr<int>)> done) override {
    Send<proto::StartProcessesReply>(
        address, req, std::chrono::seconds(10),
        [](proto::NodeAgent::Stub* stub, grpc::ClientContext* ctx,
           const proto::StartProcessesRequest* r, proto::StartProcessesReply* reply,
           std::function<void(grpc::Status)> cb) {
          stub->async()->StartProcesses(ctx, r, reply, std::move(cb));
        },
        [done = std::move(done)](absl::Status s, const proto::StartProcessesReply& reply) {
          if (!s.ok()) {
            done(s);
          } else {
            done(reply.master_port());
          }
        });
  }

  void StopJobAsync(const std::string& address, const proto::StopJobRequest& req,
                    std::function<void(absl::Status)> done) override {
    Send<proto::StopJobReply>(
        address, req, kDefaultRpcTimeout,
        [](proto::NodeAgent::Stub* stub, grpc::ClientContext* ctx, const proto::StopJobRequest* r,
           proto::StopJobReply* reply, std::function<void(grpc::Status)> cb) {
          stub->async()->StopJob(ctx, r, reply, std::move(cb));
        },
        [done = std::move(done)](absl::Status s, const proto::StopJobReply&) { done(s); });
  }

  absl::Status StopJob(const std::string& address, const proto::StopJobRequest& req) override {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, token_);
    proto::StopJobReply reply;
    grpc::Status s = Stub(address)->StopJob(&ctx, req, &reply);
    return s.ok() ? absl::OkStatus() : Annotate(address, s);
  }

 private:
  // One call through gRPC's callback API: `start` begins it, `done` gets its status
  // (annotated with the agent) and reply. The call's state lives until its reaction ran.
  template <typename Reply, typename Req, typename Start, typename Done>
  void Send(const std::string& address, const Req& req, std::chrono::milliseconds timeout,
            Start start, Done done) {
    struct Call {
      grpc::ClientContext ctx;
      Req req;
      Reply reply;
      std::string address;
      std::function<void(absl::Status, const Reply&)> done;
    };
    auto* call = new Call;
    call->req = req;
    call->address = address;
    call->done = std::move(done);
    PrepareContext(&call->ctx, token_, timeout);
    start(Stub(address), &call->ctx, &call->req, &call->reply, [call](grpc::Status s) {
      std::unique_ptr<Call> owned(call);
      owned->done(s.ok() ? absl::OkStatus() : Annotate(owned->address, s), owned->reply);
    });
  }

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
