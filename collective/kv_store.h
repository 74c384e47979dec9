// Clients of the scheduler's rendezvous key-value store (the Kv* rpcs of
// proto/scheduler.proto) for one job generation.
//
// KvClient talks to the scheduler; GlooKvStore adapts it to Gloo's rendezvous Store so a
// Gloo context can connect its full mesh through the cluster instead of a separate Redis
// or shared file system.
//
// Ownership: a KvClient owns its gRPC channel. A GlooKvStore borrows its KvClient, which
// must outlive it.
// Thread safety: KvClient is safe to call from several threads (gRPC stubs are).
// GlooKvStore is used by one Gloo context during its rendezvous, from one thread.
// Errors: every call has a deadline. UNAVAILABLE from the scheduler (restarting,
// unreachable) is retried with backoff until `retry_for` has passed; what is left is
// returned with a message naming the call, the key, the job and the generation.
// FAILED_PRECONDITION means the job no longer runs this generation: the process should
// exit (the gang restart gives the next generation its own scope).
#ifndef DROVER_COLLECTIVE_KV_STORE_H_
#define DROVER_COLLECTIVE_KV_STORE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gloo/rendezvous/store.h"
#include "proto/scheduler.grpc.pb.h"

namespace drover::collective {

struct KvClientOptions {
  // host:port of the scheduler (DROVER_SCHEDULER_ADDRESS).
  std::string scheduler_address;
  // The cluster token (read from DROVER_TOKEN_FILE with ReadTokenFile).
  std::string token;
  // The scope: job id and restart generation.
  std::string job_id;
  int generation = 0;
  // Deadline of one attempt of a call that does not wait.
  absl::Duration call_timeout = absl::Seconds(5);
  // How long UNAVAILABLE is retried (with backoff) before it is returned.
  absl::Duration retry_for = absl::Seconds(30);
};

class KvClient {
 public:
  // Creates the channel (connects lazily). INVALID_ARGUMENT if the address or job id is
  // empty.
  static absl::StatusOr<std::unique_ptr<KvClient>> Create(const KvClientOptions& options);
  // Over an existing stub (tests, or sharing a channel).
  KvClient(std::shared_ptr<proto::Scheduler::StubInterface> stub, KvClientOptions options);

  // Sets `key` to `value` (overwrites). Idempotent, so retried freely.
  absl::Status Set(const std::string& key, const std::string& value);
  // Reads `key`. With `wait` zero returns nullopt if it is absent; with `wait` > 0
  // waits up to `wait` for it to appear and returns DEADLINE_EXCEEDED naming the key if
  // it does not (never nullopt). ABORTED if the generation ends while waiting.
  absl::StatusOr<std::optional<std::string>> Get(const std::string& key,
                                                 absl::Duration wait = absl::ZeroDuration());

  struct CasResult {
    bool swapped = false;
    // The value after the call; nullopt if the key does not exist.
    std::optional<std::string> current;
  };
  // Sets `key` to `desired` if its value is `expected` (nullopt: only if it is absent).
  // A call retried after UNAVAILABLE may find its own earlier write: it then reports
  // swapped = false with current == desired.
  absl::StatusOr<CasResult> CompareAndSet(const std::string& key,
                                          const std::optional<std::string>& expected,
                                          const std::string& desired);
  // Adds `delta` to the integer in `key` (absent = 0) and returns the sum. Each call
  // carries a fresh request id, so a retry never adds twice.
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta);

  const KvClientOptions& options() const { return options_; }

 private:
  // Runs `attempt` (one RPC with the deadline it is given) until it succeeds, fails
  // with something other than UNAVAILABLE, or retry_for passes; names the call.
  absl::Status Call(const char* what, const std::string& key, absl::Duration attempt_timeout,
                    const std::function<grpc::Status(grpc::ClientContext*)>& attempt);

  std::shared_ptr<proto::Scheduler::StubInterface> stub_;
  KvClientOptions options_;
  std::string request_id_prefix_;
};

// Gloo's rendezvous store over a KvClient. Every key is prefixed with `prefix` (the
// group name, generation and incarnation; see MakeGroupPrefix) so groups never see each
// other's keys, and a restarted generation never sees the old ones.
//
// Gloo expects its store to throw: failures throw gloo::IoException, and the
// drover status of the last failure is kept in last_error() so the caller can return
// it instead of the exception's text.
class GlooKvStore : public gloo::rendezvous::Store {
 public:
  // REQUIRES: `client` outlives this store.
  GlooKvStore(KvClient* client, std::string prefix,
              std::chrono::milliseconds timeout = kDefaultTimeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  // Waits up to the store's timeout for the key (Gloo calls get after wait, but a get
  // of a key that is still coming must not fail).
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  const std::string& prefix() const { return prefix_; }
  absl::Status last_error() const { return last_error_; }

 private:
  [[noreturn]] void Fail(absl::Status status);

  KvClient* client_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
  absl::Status last_error_;
};

// "collective/<group>/g<generation>/i<incarnation>/": the key prefix of one group
// instance.
std::string MakeGroupPrefix(const std::string& group, int generation, int64_t incarnation);

}  // namespace drover::collective

#endif  // DROVER_COLLECTIVE_KV_STORE_H_
