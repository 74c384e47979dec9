#include "drover/objects.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/auth.h"
#include "common/rpc.h"
#include "proto/node_agent.grpc.pb.h"

namespace drover {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

absl::Status FromGrpc(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

}  // namespace

struct Objects::Agent {
  std::string address;
  std::string token;
  std::unique_ptr<proto::ObjectTransfer::Stub> stub;
};

Objects::Objects(std::unique_ptr<object_store::Client> store, std::unique_ptr<Agent> agent)
    : store_(std::move(store)), agent_(std::move(agent)) {}

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
    absl::StatusOr<std::string> t = ReadTokenFile(token_file);
    if (!t.ok()) return t.status();
    token = *t;
  }
  return Connect(socket, agent, token);
}

absl::StatusOr<std::unique_ptr<Objects>> Objects::Connect(const std::string& store_socket,
                                                          const std::string& agent_address,
                                                          const std::string& token) {
  absl::StatusOr<std::unique_ptr<object_store::Client>> store =
      object_store::Client::Connect(store_socket);
  if (!store.ok()) return store.status();
  std::unique_ptr<Agent> agent;
  if (!agent_address.empty()) {
    agent = std::make_unique<Agent>();
    agent->address = agent_address;
    agent->token = token;
    agent->stub = proto::ObjectTransfer::NewStub(MakeChannel(agent_address));
  }
  return std::unique_ptr<Objects>(new Objects(std::move(*store), std::move(agent)));
}

absl::Status Objects::Put(const std::string& id, absl::Span<const uint8_t> bytes,
                          absl::string_view metadata) {
  return store_->Put(id, bytes, metadata);
}

absl::Status Objects::Put(const std::string& id, absl::string_view bytes,
                          absl::string_view metadata) {
  return store_->Put(id, bytes, metadata);
}

absl::Status Objects::Delete(const std::string& id) { return store_->Delete(id); }

absl::Status Objects::Fetch(const std::string& id, absl::Time deadline) {
  absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return absl::DeadlineExceededError("no time left");
  proto::FetchObjectRequest req;
  req.set_object_id(id);
  req.set_timeout_ms(std::max<int64_t>(1, absl::ToInt64Milliseconds(left)));
  grpc::ClientContext ctx;
  PrepareContext(&ctx, agent_->token,
                 std::chrono::milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(left))));
  proto::FetchObjectReply reply;
  return FromGrpc(agent_->stub->FetchObject(&ctx, req, &reply));
}

absl::StatusOr<object_store::ObjectRef> Objects::Get(const std::string& id,
                                                     absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  absl::Duration pause = absl::Milliseconds(10);
  absl::Status last;
  while (true) {
    absl::StatusOr<object_store::ObjectRef> ref = store_->Get(id, absl::ZeroDuration());
    if (ref.ok()) return ref;
    // NOT_FOUND: not here. UNAVAILABLE: being written here (a pull or a local put)
    // or the store is gone; the waiting Get below tells which.
    if (ref.status().code() != absl::StatusCode::kNotFound &&
        ref.status().code() != absl::StatusCode::kUnavailable) {
      return ref.status();
    }
    if (agent_ != nullptr && ref.status().code() == absl::StatusCode::kNotFound) {
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
                                                      agent_->address, ": ", f.message()));
      }
    }
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "object ", id, " did not appear in this node's store",
          agent_ != nullptr ? " or on any other node" : "", " within ",
          absl::FormatDuration(timeout),
          last.ok() ? "" : absl::StrCat(" (last fetch: ", last.message(), ")")));
    }
    // Wait here for a while: a local put or a pull by someone else ends it early.
    ref = store_->Get(id, std::min(pause, left));
    if (ref.ok()) return ref;
    if (ref.status().code() == absl::StatusCode::kUnavailable) return ref.status();
    pause = std::min(pause * 2, absl::Milliseconds(500));
  }
}

absl::Status Objects::PutTensor(const std::string& id, const object_store::TensorMeta& meta,
                                absl::Span<const uint8_t> data) {
  if (data.size() != meta.data_size) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", id, ": ", data.size(),
                                                   " bytes of data for a header that says ",
                                                   meta.data_size));
  }
  absl::StatusOr<std::string> header = object_store::EncodeTensorHeader(meta);
  if (!header.ok()) return header.status();
  return store_->Put(id, data, *header);
}

absl::StatusOr<TensorRef> Objects::GetTensor(const std::string& id, absl::Duration timeout) {
  absl::StatusOr<object_store::ObjectRef> ref = Get(id, timeout);
  if (!ref.ok()) return ref.status();
  absl::StatusOr<object_store::TensorMeta> meta =
      object_store::DecodeTensorHeader(ref->metadata_view(), ref->data().size());
  if (!meta.ok()) {
    return absl::Status(meta.status().code(), absl::StrCat("object ", id,
                                                           " is not a valid tensor: ",
                                                           meta.status().message()));
  }
  TensorRef out;
  out.ref = std::move(*ref);
  out.meta = std::move(*meta);
  return out;
}

}  // namespace drover
