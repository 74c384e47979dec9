#include "drover/objects.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/auth.h"
#include "common/clock.h"
#include "common/progress_line.h"
#include "common/rpc.h"
#include "common/status.h"
#include "grpcpp/client_context.h"
#include "proto/node_agent.grpc.pb.h"
#include "sdk/internal/objects_internal.h"
#include "sdk/internal/pull_progress.h"
#include "sdk/internal/tensor_internal.h"

namespace drover {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// How long one wait on this node's store may hold its connection (other calls on the
// same Objects wait meanwhile), and how late a failed fetch may be noticed. A seal
// answers the wait at once, whatever the turn.
constexpr absl::Duration kStoreWaitTurn = absl::Milliseconds(100);

// This node's agent, for pulls from other nodes.
struct Agent {
  std::string address;
  std::string token;
  std::unique_ptr<proto::ObjectTransfer::Stub> stub;
};

// One FetchObject call in flight (gRPC's callback API), so that Get can wait on this
// node's store meanwhile.
struct PendingFetch {
  grpc::ClientContext ctx;
  proto::FetchObjectRequest req;
  proto::FetchObjectReply reply;
  grpc::Status status;  // written before `done` is notified
  absl::Notification done;

  // Cancels the call if it still runs, and waits until gRPC lets go of it.
  ~PendingFetch() {
    ctx.TryCancel();
    done.WaitForNotification();
  }
};

}  // namespace

struct Objects::Impl {
  // Asks this node's agent (without waiting for the answer) to make `id` present here:
  // the agent waits until `deadline` for some node to hold it (this one included: a put
  // here is reported to the directory too) and pulls it here if it is elsewhere.
  std::unique_ptr<PendingFetch> StartFetch(const std::string& id, absl::Time deadline);
  // DEADLINE_EXCEEDED: `id` did not come within `timeout`; `last_fetch` the agent's last
  // error, if any.
  // `cause`: the latest fetch that failed for a reason other than running out of time
  // (a holder's refusal, say), named too when the last fetch only ran out of time.
  absl::Status NotInTime(const std::string& id, absl::Duration timeout,
                         const absl::Status& last_fetch, const absl::Status& cause) const;
  // Objects::Get with the store's reference.
  absl::StatusOr<object_store::ObjectRef> Get(const std::string& id, absl::Duration timeout);
  // The bar of a pull of `id` (null without a terminal).
  std::unique_ptr<internal::PullProgress> PullBar(const std::string& id);

  std::unique_ptr<object_store::Client> store;
  std::unique_ptr<Agent> agent;  // null: this node only
  // Long pulls' progress bars: on stderr when it is a terminal, else none.
  std::unique_ptr<ProgressLine> progress_line = ProgressLine::ForStderr();
  Clock* progress_clock = Clock::Real();
  internal::PullProgressOptions progress_options;
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

std::unique_ptr<PendingFetch> Objects::Impl::StartFetch(const std::string& id,
                                                        absl::Time deadline) {
  const int64_t left_ms = std::max<int64_t>(1, absl::ToInt64Milliseconds(deadline - absl::Now()));
  auto fetch = std::make_unique<PendingFetch>();
  fetch->req.set_object_id(id);
  fetch->req.set_timeout_ms(left_ms);
  fetch->req.set_wait_for_holder(true);
  fetch->req.set_job_id(Env("DROVER_JOB_ID"));  // the job whose timeline shows the pull
  PrepareContext(&fetch->ctx, agent->token, std::chrono::milliseconds(left_ms) + kServerAnswerGrace);
  PendingFetch* f = fetch.get();  // lives until `done` (its destructor waits)
  agent->stub->async()->FetchObject(&f->ctx, &f->req, &f->reply, [f](grpc::Status status) {
    f->status = std::move(status);
    f->done.Notify();
  });
  return fetch;
}

std::unique_ptr<internal::PullProgress> Objects::Impl::PullBar(const std::string& id) {
  if (progress_line == nullptr || agent == nullptr) return nullptr;
  Agent* a = agent.get();
  return std::make_unique<internal::PullProgress>(
      progress_line.get(), progress_clock, progress_options, id,
      [a, id]() -> absl::StatusOr<internal::FetchProgress> {
        grpc::ClientContext ctx;
        PrepareContext(&ctx, a->token, std::chrono::milliseconds(1000));
        proto::GetFetchProgressRequest req;
        req.set_object_id(id);
        proto::GetFetchProgressReply reply;
        DROVER_RETURN_IF_ERROR(FromGrpcStatus(a->stub->GetFetchProgress(&ctx, req, &reply)));
        return internal::FetchProgress{reply.pulling(), reply.received_bytes(),
                                       reply.total_bytes(), reply.source_node()};
      });
}

absl::Status Objects::Impl::NotInTime(const std::string& id, absl::Duration timeout,
                                      const absl::Status& last_fetch,
                                      const absl::Status& cause) const {
  std::string fetches;
  if (!last_fetch.ok()) {
    fetches = absl::StrCat(" (last fetch: ", last_fetch.message());
    if (!cause.ok() && cause.message() != last_fetch.message()) {
      absl::StrAppend(&fetches, "; an earlier fetch: ", cause.message());
    }
    fetches += ")";
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "object ", id, " did not appear in this node's store",
      agent != nullptr ? " or on any other node" : "", " within ", absl::FormatDuration(timeout),
      fetches));
}

absl::StatusOr<object_store::ObjectRef> Objects::Impl::Get(const std::string& id,
                                                           absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<object_store::ObjectRef> ref = store->Get(id, absl::ZeroDuration());
  // The agent's fetch (none without an agent), and when to start the next one.
  std::unique_ptr<PendingFetch> fetch;
  std::unique_ptr<internal::PullProgress> bar;  // on a terminal, once a fetch started
  absl::Time next_fetch = absl::InfinitePast();
  absl::Duration pause = absl::Milliseconds(10);  // before a failed fetch is retried
  absl::Status last;
  absl::Status cause;  // the latest fetch failure that did not just run out of time
  while (true) {
    if (ref.ok()) return ref;  // ~PendingFetch cancels a fetch still running
    // NOT_FOUND / DEADLINE_EXCEEDED: not here (yet). UNAVAILABLE: being written here (a
    // pull or a local put) from a Get that does not wait, the store gone from one that
    // does.
    const absl::StatusCode code = ref.status().code();
    if (code != absl::StatusCode::kNotFound && code != absl::StatusCode::kDeadlineExceeded &&
        code != absl::StatusCode::kUnavailable) {
      return ref.status();
    }
    if (fetch != nullptr && fetch->done.HasBeenNotified()) {
      absl::Status f = FromGrpcStatus(fetch->status);
      fetch.reset();
      switch (f.code()) {
        case absl::StatusCode::kOk:  // here now: the next wait finds it at once
          break;
        case absl::StatusCode::kNotFound:     // listed, but no holder had it (stale)
        case absl::StatusCode::kUnavailable:  // holders or the directory failed
        case absl::StatusCode::kAborted:      // a local writer of the same id
        case absl::StatusCode::kDeadlineExceeded:
          last = f;
          if (f.code() != absl::StatusCode::kDeadlineExceeded) cause = f;
          next_fetch = absl::Now() + pause;
          pause = std::min(pause * 2, absl::Milliseconds(500));
          break;
        default:
          return absl::Status(f.code(), absl::StrCat("fetching object ", id,
                                                      " through the agent at ",
                                                      agent->address, ": ", f.message()));
      }
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) return NotInTime(id, timeout, last, cause);
    if (agent != nullptr && fetch == nullptr && now >= next_fetch) {
      if (bar == nullptr) bar = PullBar(id);  // first: its 1 s counts from the fetch's start
      fetch = StartFetch(id, deadline);
    }
    if (bar != nullptr && fetch != nullptr) bar->Tick();
    // Wait for the object's seal here: a put on this node, or the agent's pull, ends
    // the wait at once. In turns, so that a failed fetch is retried.
    absl::Time until = std::min(deadline, now + kStoreWaitTurn);
    if (agent != nullptr && fetch == nullptr) until = std::min(until, next_fetch);
    ref = store->Get(id, until - now);
    if (!ref.ok() && ref.status().code() == absl::StatusCode::kUnavailable) return ref.status();
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

void ObjectsAccess::ShowPullProgress(Objects& objects, std::unique_ptr<ProgressLine> line,
                                     Clock* clock, PullProgressOptions options) {
  objects.impl_->progress_line = std::move(line);
  objects.impl_->progress_clock = clock;
  objects.impl_->progress_options = options;
}

}  // namespace internal
}  // namespace drover
