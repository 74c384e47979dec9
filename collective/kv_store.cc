#include "collective/kv_store.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/rpc.h"
#include "common/status.h"
#include "gloo/common/error.h"

namespace drover::collective {
namespace {

std::chrono::milliseconds ToChrono(absl::Duration d) {
  return std::chrono::milliseconds(std::max<int64_t>(0, absl::ToInt64Milliseconds(d)));
}

std::string RandomHex() {
  std::random_device rd;
  return absl::StrCat(absl::Hex(static_cast<uint64_t>(rd()) << 32 | rd(), absl::kZeroPad16));
}

}  // namespace

absl::StatusOr<std::unique_ptr<KvClient>> KvClient::Create(const KvClientOptions& options) {
  if (options.scheduler_address.empty()) {
    return absl::InvalidArgumentError(
        "KV client: no scheduler address (DROVER_SCHEDULER_ADDRESS is set for drover jobs)");
  }
  if (options.job_id.empty()) {
    return absl::InvalidArgumentError("KV client: no job id (DROVER_JOB_ID)");
  }
  std::shared_ptr<proto::Scheduler::StubInterface> stub =
      proto::Scheduler::NewStub(MakeChannel(options.scheduler_address));
  return std::make_unique<KvClient>(std::move(stub), options);
}

KvClient::KvClient(std::shared_ptr<proto::Scheduler::StubInterface> stub,
                   KvClientOptions options)
    : stub_(std::move(stub)),
      options_(std::move(options)),
      request_id_prefix_(absl::StrCat(RandomHex(), "-", ::getpid(), "-")) {}

absl::Status KvClient::Call(const char* what, const std::string& key,
                            absl::Duration attempt_timeout,
                            const std::function<grpc::Status(grpc::ClientContext*)>& attempt) {
  const absl::Time give_up = absl::Now() + options_.retry_for;
  absl::Duration backoff = absl::Milliseconds(20);
  int attempts = 0;
  absl::Status status;
  while (true) {
    ++attempts;
    grpc::ClientContext ctx;
    PrepareContext(&ctx, options_.token, ToChrono(attempt_timeout));
    status = FromGrpcStatus(attempt(&ctx));
    if (status.code() != absl::StatusCode::kUnavailable) break;
    absl::Time now = absl::Now();
    if (now + backoff >= give_up) break;
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(1));
  }
  if (status.ok()) return status;
  std::string msg = absl::StrCat("KV ", what, " of key '", key, "' (job ", options_.job_id,
                                 " generation ", options_.generation, ", scheduler ",
                                 options_.scheduler_address, ")");
  if (status.code() == absl::StatusCode::kUnavailable) {
    absl::StrAppend(&msg, " failed ", attempts, " times over ",
                    absl::FormatDuration(options_.retry_for),
                    "; is the scheduler up and reachable?");
  }
  return absl::Status(status.code(), absl::StrCat(msg, ": ", status.message()));
}

absl::Status KvClient::Set(const std::string& key, const std::string& value) {
  proto::KvSetRequest req;
  req.mutable_scope()->set_job_id(options_.job_id);
  req.mutable_scope()->set_generation(options_.generation);
  req.set_key(key);
  req.set_value(value);
  return Call("Set", key, options_.call_timeout, [&](grpc::ClientContext* ctx) {
    proto::KvSetReply reply;
    return stub_->KvSet(ctx, req, &reply);
  });
}

absl::StatusOr<std::optional<std::string>> KvClient::Get(const std::string& key,
                                                         absl::Duration wait) {
  proto::KvGetRequest req;
  req.mutable_scope()->set_job_id(options_.job_id);
  req.mutable_scope()->set_generation(options_.generation);
  req.set_key(key);
  const absl::Time deadline = absl::Now() + wait;
  proto::KvGetReply reply;
  absl::Status s = Call("Get", key, options_.call_timeout + wait, [&](grpc::ClientContext* ctx) {
    // A retry waits only for what is left of the caller's wait.
    if (wait > absl::ZeroDuration()) {
      req.set_wait_timeout_ms(
          std::max<int64_t>(1, absl::ToInt64Milliseconds(deadline - absl::Now())));
    }
    return stub_->KvGet(ctx, req, &reply);
  });
  if (!s.ok()) return s;
  if (!reply.found()) {
    if (wait > absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "KV Get of key '", key, "' (job ", options_.job_id, " generation ",
          options_.generation, "): did not appear within ", absl::FormatDuration(wait)));
    }
    return std::optional<std::string>();
  }
  return std::optional<std::string>(reply.value());
}

absl::StatusOr<KvClient::CasResult> KvClient::CompareAndSet(
    const std::string& key, const std::optional<std::string>& expected,
    const std::string& desired) {
  proto::KvCompareAndSetRequest req;
  req.mutable_scope()->set_job_id(options_.job_id);
  req.mutable_scope()->set_generation(options_.generation);
  req.set_key(key);
  if (expected) {
    req.set_expected(*expected);
  } else {
    req.set_expect_absent(true);
  }
  req.set_desired(desired);
  proto::KvCompareAndSetReply reply;
  absl::Status s = Call("CompareAndSet", key, options_.call_timeout,
                        [&](grpc::ClientContext* ctx) {
                          return stub_->KvCompareAndSet(ctx, req, &reply);
                        });
  if (!s.ok()) return s;
  CasResult r;
  r.swapped = reply.swapped();
  if (reply.found()) r.current = reply.current();
  return r;
}

absl::StatusOr<int64_t> KvClient::Add(const std::string& key, int64_t delta) {
  static std::atomic<uint64_t> counter{0};
  proto::KvAddRequest req;
  req.mutable_scope()->set_job_id(options_.job_id);
  req.mutable_scope()->set_generation(options_.generation);
  req.set_key(key);
  req.set_delta(delta);
  req.set_request_id(absl::StrCat(request_id_prefix_, counter.fetch_add(1)));
  proto::KvAddReply reply;
  absl::Status s = Call("Add", key, options_.call_timeout, [&](grpc::ClientContext* ctx) {
    return stub_->KvAdd(ctx, req, &reply);
  });
  if (!s.ok()) return s;
  return reply.value();
}

// ---------------------------------------------------------------------------

GlooKvStore::GlooKvStore(KvClient* client, std::string prefix,
                         std::chrono::milliseconds timeout)
    : client_(client), prefix_(std::move(prefix)), timeout_(timeout) {}

void GlooKvStore::Fail(absl::Status status) {
  last_error_ = status;
  throw ::gloo::IoException(status.ToString());
}

void GlooKvStore::set(const std::string& key, const std::vector<char>& data) {
  absl::Status s = client_->Set(prefix_ + key, std::string(data.begin(), data.end()));
  if (!s.ok()) Fail(s);
}

std::vector<char> GlooKvStore::get(const std::string& key) {
  auto v = client_->Get(prefix_ + key, absl::FromChrono(timeout_));
  if (!v.ok()) Fail(v.status());
  return std::vector<char>((*v)->begin(), (*v)->end());
}

void GlooKvStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void GlooKvStore::wait(const std::vector<std::string>& keys,
                       const std::chrono::milliseconds& timeout) {
  const absl::Time deadline = absl::Now() + absl::FromChrono(timeout);
  for (const std::string& key : keys) {
    absl::Duration left = std::max(deadline - absl::Now(), absl::Milliseconds(1));
    auto v = client_->Get(prefix_ + key, left);
    if (!v.ok()) Fail(v.status());
  }
}

std::string MakeGroupPrefix(const std::string& group, int generation, int64_t incarnation) {
  return absl::StrCat("collective/", group, "/g", generation, "/i", incarnation, "/");
}

}  // namespace drover::collective
