#include "scheduler/agent_client.h"

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/rpc.h"
#include "common/status.h"
#include "proto/node_agent.grpc.pb.h"

namespace drover {

void AgentClient::StartProcessesBatchAsync(
    const std::string& agent_address, std::vector<proto::StartProcessesRequest> reqs,
    std::function<void(std::vector<absl::StatusOr<int>>)> done) {
  if (reqs.empty()) {
    done({});
    return;
  }
  struct Pending {
    absl::Mutex mu;
    std::vector<absl::StatusOr<int>> results ABSL_GUARDED_BY(mu);
    size_t left ABSL_GUARDED_BY(mu) = 0;
    std::function<void(std::vector<absl::StatusOr<int>>)> done;
  };
  auto pending = std::make_shared<Pending>();
  {
    absl::MutexLock lock(&pending->mu);
    pending->results.assign(reqs.size(), absl::UnknownError("start not answered"));
    pending->left = reqs.size();
  }
  pending->done = std::move(done);
  for (size_t i = 0; i < reqs.size(); ++i) {
    StartProcessesAsync(agent_address, std::move(reqs[i]), [pending, i](absl::StatusOr<int> port) {
      std::vector<absl::StatusOr<int>> all;
      {
        absl::MutexLock lock(&pending->mu);
        pending->results[i] = std::move(port);
        if (--pending->left > 0) return;
        all = std::move(pending->results);
      }
      pending->done(std::move(all));
    });
  }
}

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

  void StartProcessesAsync(const std::string& address, proto::StartProcessesRequest req,
                           std::function<void(absl::StatusOr<int>)> done) override {
    Send<proto::StartProcessesReply>(
        address, std::move(req), std::chrono::seconds(10),
        [](proto::NodeAgent::Stub* stub, grpc::ClientContext* ctx,
           const proto::StartProcessesRequest* r, proto::StartProcessesReply* reply,
           std::function<void(grpc::Status)> cb) {
          stub->async()->StartProcesses(ctx, r, reply, std::move(cb));
        },
        [done = std::move(done)](absl::Status s, proto::StartProcessesRequest*,
                                 const proto::StartProcessesReply& reply) {
          if (!s.ok()) {
            done(s);
          } else {
            done(reply.master_port());
          }
        });
  }

  void StartProcessesBatchAsync(
      const std::string& address, std::vector<proto::StartProcessesRequest> reqs,
      std::function<void(std::vector<absl::StatusOr<int>>)> done) override {
    if (reqs.size() < 2 || Legacy(address)) {
      AgentClient::StartProcessesBatchAsync(address, std::move(reqs), std::move(done));
      return;
    }
    proto::StartProcessesBatchRequest batch;
    batch.mutable_starts()->Reserve(static_cast<int>(reqs.size()));
    for (auto& r : reqs) *batch.add_starts() = std::move(r);
    const size_t n = batch.starts_size();
    Send<proto::StartProcessesBatchReply>(
        address, std::move(batch), std::chrono::seconds(10),
        [](proto::NodeAgent::Stub* stub, grpc::ClientContext* ctx,
           const proto::StartProcessesBatchRequest* r, proto::StartProcessesBatchReply* reply,
           std::function<void(grpc::Status)> cb) {
          stub->async()->StartProcessesBatch(ctx, r, reply, std::move(cb));
        },
        [this, address, n, done = std::move(done)](
            absl::Status s, proto::StartProcessesBatchRequest* sent,
            const proto::StartProcessesBatchReply& reply) mutable {
          if (s.code() == absl::StatusCode::kUnimplemented) {
            // An agent older than StartProcessesBatch: one call per start from now on.
            MarkLegacy(address);
            std::vector<proto::StartProcessesRequest> again;
            again.reserve(n);
            for (auto& r : *sent->mutable_starts()) again.push_back(std::move(r));
            AgentClient::StartProcessesBatchAsync(address, std::move(again), std::move(done));
            return;
          }
          std::vector<absl::StatusOr<int>> results;
          results.reserve(n);
          if (s.ok() && static_cast<size_t>(reply.results_size()) != n) {
            s = absl::InternalError(absl::StrCat("node agent ", address, ": answered ",
                                                 reply.results_size(), " results for ", n,
                                                 " starts"));
          }
          for (size_t i = 0; i < n; ++i) {
            if (!s.ok()) {
              results.push_back(s);
              continue;
            }
            const proto::StartResult& r = reply.results(static_cast<int>(i));
            if (r.code() == 0) {
              results.push_back(r.master_port());
            } else {
              results.push_back(Annotate(
                  address, grpc::Status(static_cast<grpc::StatusCode>(r.code()), r.message())));
            }
          }
          done(std::move(results));
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
        [done = std::move(done)](absl::Status s, proto::StopJobRequest*,
                                 const proto::StopJobReply&) { done(s); });
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
  // (annotated with the agent), the request sent (for a caller that sends it again)
  // and the reply. The call's state lives until its reaction ran.
  template <typename Reply, typename Req, typename Start, typename Done>
  void Send(const std::string& address, Req req, std::chrono::milliseconds timeout,
            Start start, Done done) {
    struct Call {
      grpc::ClientContext ctx;
      Req req;
      Reply reply;
      std::string address;
      Done done;
    };
    auto* call = new Call{{}, std::move(req), {}, address, std::move(done)};
    PrepareContext(&call->ctx, token_, timeout);
    start(Stub(address), &call->ctx, &call->req, &call->reply, [call](grpc::Status s) {
      std::unique_ptr<Call> owned(call);
      owned->done(s.ok() ? absl::OkStatus() : Annotate(owned->address, s), &owned->req,
                  owned->reply);
    });
  }

  bool Legacy(const std::string& address) {
    absl::MutexLock lock(&mu_);
    return legacy_.contains(address);
  }
  void MarkLegacy(const std::string& address) {
    absl::MutexLock lock(&mu_);
    legacy_.insert(address);
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
  // Agents that answered StartProcessesBatch UNIMPLEMENTED (older ones).
  absl::flat_hash_set<std::string> legacy_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<AgentClient> NewGrpcAgentClient(const std::string& token) {
  return std::make_unique<GrpcAgentClient>(token);
}

}  // namespace drover
