#include "drover/objects.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/auth.h"
#include "common/rpc.h"
#include "common/status.h"
#include "proto/node_agent.grpc.pb.h"
#include "sdk/internal/objects_internal.h"
#include "sdk/internal/tensor_internal.h"

namespace drover {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// This node's agent, for pulls from other nodes.
struct Agent {
  std::string address;
  std::string token;
  std::unique_ptr<proto::ObjectTransfer::Stub> stub;
};

}  // namespace

struct Objects::Impl {
  // Asks this node's agent to pull `id` here, waiting until `deadline`.
  absl::Status Fetch(const std::string& id, absl::Time deadline);
  // Objects::Get with the store's reference.
  absl::StatusOr<object_store::ObjectRef> Get(const std::string& id, absl::Duration timeout);

  std::unique_ptr<object_store::Client> store;
  std::unique_ptr<Agent> agent;  // null: this node only
};

Objects::Objects(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Objects::~Objects() = default;

absl::StatusOr<std::unique_ptr<Objects>> Objects::FromEnvironment() {
  std::string socket = Env("DROVER_OBJECT_STORE_SOCKET");
  if (socket.empty()) {
    return absl::FailedPreconditionError(
        "DROVER_OBJECT_STORE_SOCKET is not set: run this under drover (an agent with its "
        "object store enabled) or use Objects::Connect with the store's socket");
  }
  std::string agent = Env("DROVER_AGENT_ADDRESS");
  std::string token;
  std::string token_file = Env("DROVER_TOKEN_FILE");
  if (!agent.empty()) {
    if (token_file.empty()) {
      return absl::FailedPreconditionError(
          "DROVER_AGENT_ADDRESS is set but DROVER_TOKEN_FILE is not: cannot talk to the agent");
    }
    DROVER_ASSIGN_OR_RETURN(token, ReadTokenFile(token_file));
  }
  return Connect(socket, agent, token);
}

absl::StatusOr<std::unique_ptr<Objects>> Objects::Connect(const std::string& store_socket,
                                                          const std::string& agent_address,
                                                          const std::string& token) {
  auto impl = std::make_unique<Impl>();
  DROVER_ASSIGN_OR_RETURN(impl->store, object_store::Client::Connect(store_socket));
  if (!agent_address.empty()) {
    impl->agent = std::make_unique<Agent>();
    impl->agent->address = agent_address;
    impl->agent->token = token;
    impl->agent->stub = proto::ObjectTransfer::NewStub(MakeChannel(agent_address));
  }
  return std::unique_ptr<Objects>(new Objects(std::move(impl)));
}

absl::Status Objects::Put(const std::string& id, absl::Span<const uint8_t> bytes,
                          absl::string_view metadata) {
  return impl_->store->Put(id, bytes, metadata);
}

absl::Status Objects::Put(const std::string& id, absl::string_view bytes,
                          absl::string_view metadata) {
  return impl_->store->Put(id, bytes, metadata);
}

absl::Status Objects::Delete(const std::string& id) { return impl_->store->Delete(id); }

absl::Status Objects::Impl::Fetch(const std::string& id, absl::Time deadline) {
  absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return absl::DeadlineExceededError("no time left");
  proto::FetchObjectRequest req;
  req.set_object_id(id);
  req.set_timeout_ms(std::max<int64_t>(1, absl::ToInt64Milliseconds(left)));
  grpc::ClientContext ctx;
  PrepareContext(&ctx, agent->token,
                 std::chrono::milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(left))));
  proto::FetchObjectReply reply;
  return FromGrpcStatus(agent->stub->FetchObject(&ctx, req, &reply));
}

absl::StatusOr<object_store::ObjectRef> Objects::Impl::Get(const std::string& id,
                                                           absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  absl::Duration pause = absl::Milliseconds(10);
  absl::Status last;
  while (true) {
    absl::StatusOr<object_store::ObjectRef> ref = store->Get(id, absl::ZeroDuration());
    if (ref.ok()) return ref;
    // NOT_FOUND: not here. UNAVAILABLE: being written here (a pull or a local put)
    // or the store is gone; the waiting Get below tells which.
    if (ref.status().code() != absl::StatusCode::kNotFound &&
        ref.status().code() != absl::StatusCode::kUnavailable) {
      return ref.status();
    }
    if (agent != nullptr && ref.status().code() == absl::StatusCode::kNotFound) {
      absl::Status f = Fetch(id, deadline);
      if (f.ok()) continue;  // here now (read it; it may have been evicted again)
      last = f;
      switch (f.code()) {
        case absl::StatusCode::kNotFound:     // nobody has it yet
        case absl::StatusCode::kUnavailable:  // holders or the directory failed
        case absl::StatusCode::kAborted:      // a local writer of the same id
        case absl::StatusCode::kDeadlineExceeded:
          break;
        default:
          return absl::Status(f.code(), absl::StrCat("fetching object ", id,
                                                      " through the agent at ",
                                                      agent->address, ": ", f.message()));
      }
    }
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "object ", id, " did not appear in this node's store",
          agent != nullptr ? " or on any other node" : "", " within ",
          absl::FormatDuration(timeout),
          last.ok() ? "" : absl::StrCat(" (last fetch: ", last.message(), ")")));
    }
    // Wait here for a while: a local put or a pull by someone else ends it early.
    ref = store->Get(id, std::min(pause, left));
    if (ref.ok()) return ref;
    if (ref.status().code() == absl::StatusCode::kUnavailable) return ref.status();
    pause = std::min(pause * 2, absl::Milliseconds(500));
  }
}

absl::StatusOr<Buffer> Objects::Get(const std::string& id, absl::Duration timeout) {
  DROVER_ASSIGN_OR_RETURN(object_store::ObjectRef ref, impl_->Get(id, timeout));
  return internal::TensorAccess::FromObject(std::move(ref));
}

absl::Status Objects::PutTensor(const std::string& id, const Tensor& tensor) {
  const object_store::TensorMeta meta = internal::TensorAccess::MetaOf(tensor);
  DROVER_ASSIGN_OR_RETURN(std::string header, object_store::EncodeTensorHeader(meta));
  return impl_->store->Put(id, internal::TensorAccess::StorageOf(tensor).span(), header);
}

absl::StatusOr<Tensor> Objects::GetTensor(const std::string& id, absl::Duration timeout) {
  DROVER_ASSIGN_OR_RETURN(object_store::ObjectRef ref, impl_->Get(id, timeout));
  return internal::TensorAccess::TensorFromObject(std::move(ref));
}

namespace internal {

object_store::Client& ObjectsAccess::Store(Objects& objects) { return *objects.impl_->store; }

absl::StatusOr<object_store::ObjectRef> ObjectsAccess::Get(Objects& objects, const std::string& id,
                                                           absl::Duration timeout) {
  return objects.impl_->Get(id, timeout);
}

}  // namespace internal
}  // namespace drover
