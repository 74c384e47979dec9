// The Redis StateStore, over the hiredis 0.14 synchronous API.
//
// Layout (every key starts with the store's prefix):
//   <prefix>jobs            HASH  job_id -> JobInfo.SerializeAsString()
//   <prefix>job-versions    HASH  job_id -> JobInfo.version of the stored record
//   <prefix>actors          HASH  actor_id -> the record LeaseManager encodes
//   <prefix>actor-versions  HASH  actor_id -> its version
//   <prefix>counter:<name>  STRING, advanced with INCRBY
//
// PutJob (and PutActor) is one Lua script (atomic on the server) that writes the record and its
// version unless a higher version is stored: a command that timed out here may still
// be executed by a server that was only slow, after a newer write on a new connection.
//
// One connection, guarded by mu_: calls are serialized, which is plenty for the
// scheduler (a sync round trip is ~30 us on loopback). A connection that broke
// (Redis restarted, network error, timeout) is dropped and replaced by a new one on
// the next command. Retries are limited to what cannot apply a command twice:
// PutJob and HGETALL are idempotent and are retried once on a fresh connection; INCRBY
// is retried only if it never left this process, otherwise the caller gets UNAVAILABLE
// (the counter may or may not have moved, and only the caller can decide to skip an id).
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/log.h"
#include "scheduler/state_store.h"

namespace drover {
namespace {

constexpr struct timeval kConnectTimeout = {1, 0};

// KEYS: records hash, versions hash. ARGV: id, record, version.
constexpr char kPutJobScript[] =
    "local v = redis.call('HGET', KEYS[2], ARGV[1]) "
    "if v and tonumber(v) > tonumber(ARGV[3]) then return 0 end "
    "redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) "
    "redis.call('HSET', KEYS[2], ARGV[1], ARGV[3]) "
    "return 1";
constexpr struct timeval kCommandTimeout = {2, 0};

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

// A RESP command built with hiredis' printf-like formatter, where "%b" takes a
// (const char*, size_t) pair and is binary-safe. Returns "" if formatting fails.
std::string FormatCommand(const char* format, ...) {
  va_list ap;
  va_start(ap, format);
  char* cmd = nullptr;
  int len = redisvFormatCommand(&cmd, format, ap);
  va_end(ap);
  if (len < 0 || cmd == nullptr) return "";
  std::string out(cmd, static_cast<size_t>(len));
  redisFreeCommand(cmd);
  return out;
}

// hiredis 0.14 writes with write(2), so a write to a connection the server closed
// raises SIGPIPE, whose default action kills the process. For the lifetime of this
// object SIGPIPE is blocked in the calling thread (only), and one raised meanwhile is
// discarded, so a Redis restart is an error status instead of a dead scheduler.
class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock() {
    sigset_t pending;
    sigemptyset(&pending);
    sigpending(&pending);
    already_pending_ = sigismember(&pending, SIGPIPE) == 1;
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &block, &old_mask_);
  }
  ~ScopedSigpipeBlock() {
    if (!already_pending_) {
      sigset_t pending;
      sigemptyset(&pending);
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        sigset_t pipe;
        sigemptyset(&pipe);
        sigaddset(&pipe, SIGPIPE);
        struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe, nullptr, &zero) < 0 && errno == EINTR) {
        }
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  }
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

 private:
  sigset_t old_mask_;
  bool already_pending_ = false;
};

// True if the server has not closed the connection (checked without blocking).
// Catches the common case of Redis having restarted since the last command, so that
// even a non-idempotent command goes out on a fresh connection instead of failing.
bool PeerStillOpen(int fd) {
  char byte;
  ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  // n == 0: orderly shutdown. n > 0: bytes nobody asked for; the reply stream is out
  // of step with our commands, so the connection is useless either way.
  return false;
}

class RedisStateStore final : public StateStore {
 public:
  RedisStateStore(std::string host, int port, std::string key_prefix, std::string password)
      : host_(std::move(host)),
        port_(port),
        password_(std::move(password)),
        address_(absl::StrCat(absl::StrContains(host_, ':') ? "[" : "", host_,
                              absl::StrContains(host_, ':') ? "]" : "", ":", port_)),
        jobs_key_(absl::StrCat(key_prefix, "jobs")),
        versions_key_(absl::StrCat(key_prefix, "job-versions")),
        actors_key_(absl::StrCat(key_prefix, "actors")),
        actor_versions_key_(absl::StrCat(key_prefix, "actor-versions")),
        counter_key_prefix_(absl::StrCat(key_prefix, "counter:")) {}

  ~RedisStateStore() override {
    absl::MutexLock lock(&mu_);
    DropConnection();
  }

  // Connects and checks that the server answers PING.
  absl::Status Init() {
    absl::StatusOr<ReplyPtr> reply = Run(FormatCommand("PING"), Retry::kIdempotent);
    return reply.status();
  }

  absl::Status PutJob(const proto::JobInfo& job) override {
    if (job.job_id().empty()) {
      return absl::InvalidArgumentError("cannot store a job with an empty job_id");
    }
    const std::string record = job.SerializeAsString();
    const std::string& id = job.job_id();
    const std::string version = absl::StrCat(job.version());
    absl::StatusOr<ReplyPtr> reply =
        Run(FormatCommand("EVAL %s 2 %b %b %b %b %b", kPutJobScript, jobs_key_.data(),
                          jobs_key_.size(), versions_key_.data(), versions_key_.size(),
                          id.data(), id.size(), record.data(), record.size(), version.data(),
                          version.size()),
            Retry::kIdempotent);
    if (!reply.ok()) {
      return Annotate(reply.status(), absl::StrCat("storing job ", id));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<proto::JobInfo>> LoadJobs() override {
    absl::StatusOr<ReplyPtr> reply =
        Run(FormatCommand("HGETALL %b", jobs_key_.data(), jobs_key_.size()),
            Retry::kIdempotent);
    if (!reply.ok()) return Annotate(reply.status(), "loading jobs");
    const redisReply* r = reply->get();
    if (r->type != REDIS_REPLY_ARRAY || r->elements % 2 != 0) {
      return absl::InternalError(absl::StrCat(
          "redis ", address_, ": unexpected reply type ", r->type, " to HGETALL ",
          jobs_key_));
    }
    std::vector<proto::JobInfo> jobs;
    jobs.reserve(r->elements / 2);
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
      const redisReply* field = r->element[i];
      const redisReply* value = r->element[i + 1];
      if (field->type != REDIS_REPLY_STRING || value->type != REDIS_REPLY_STRING) {
        DROVER_LOG(WARNING) << "redis " << address_ << ": skipping a non-string entry in "
                            << jobs_key_;
        continue;
      }
      absl::string_view id(field->str, field->len);
      proto::JobInfo job;
      if (!job.ParseFromArray(value->str, static_cast<int>(value->len)) ||
          job.job_id() != id) {
        DROVER_LOG(WARNING) << "redis " << address_ << ": skipping corrupt job record "
                            << jobs_key_ << "[" << id << "] (" << value->len
                            << " bytes); delete it with: redis-cli HDEL " << jobs_key_
                            << " " << id;
        continue;
      }
      jobs.push_back(std::move(job));
    }
    return jobs;
  }

  absl::Status PutActor(const std::string& actor_id, int64_t version,
                        const std::string& record) override {
    if (actor_id.empty()) return absl::InvalidArgumentError("cannot store an actor with an empty id");
    const std::string v = absl::StrCat(version);
    absl::StatusOr<ReplyPtr> reply =
        Run(FormatCommand("EVAL %s 2 %b %b %b %b %b", kPutJobScript, actors_key_.data(),
                          actors_key_.size(), actor_versions_key_.data(),
                          actor_versions_key_.size(), actor_id.data(), actor_id.size(),
                          record.data(), record.size(), v.data(), v.size()),
            Retry::kIdempotent);
    if (!reply.ok()) return Annotate(reply.status(), absl::StrCat("storing actor ", actor_id));
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<std::string>> LoadActors() override {
    absl::StatusOr<ReplyPtr> reply =
        Run(FormatCommand("HGETALL %b", actors_key_.data(), actors_key_.size()),
            Retry::kIdempotent);
    if (!reply.ok()) return Annotate(reply.status(), "loading actors");
    const redisReply* r = reply->get();
    if (r->type != REDIS_REPLY_ARRAY || r->elements % 2 != 0) {
      return absl::InternalError(absl::StrCat("redis ", address_, ": unexpected reply type ",
                                              r->type, " to HGETALL ", actors_key_));
    }
    std::vector<std::string> records;
    records.reserve(r->elements / 2);
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
      const redisReply* value = r->element[i + 1];
      if (value->type != REDIS_REPLY_STRING) continue;
      records.emplace_back(value->str, value->len);
    }
    return records;
  }

  absl::StatusOr<int64_t> ReserveIds(const std::string& counter, int64_t count) override {
    if (count < 1) return absl::InvalidArgumentError("ReserveIds: count must be >= 1");
    const std::string key = absl::StrCat(counter_key_prefix_, counter);
    const std::string by = absl::StrCat(count);
    absl::StatusOr<ReplyPtr> reply =
        Run(FormatCommand("INCRBY %b %b", key.data(), key.size(), by.data(), by.size()),
            Retry::kOnlyIfUnsent);
    if (!reply.ok()) {
      return Annotate(reply.status(), absl::StrCat("incrementing counter ", key));
    }
    const redisReply* r = reply->get();
    if (r->type != REDIS_REPLY_INTEGER) {
      return absl::InternalError(absl::StrCat("redis ", address_,
                                              ": unexpected reply type ", r->type,
                                              " to INCRBY ", key));
    }
    return static_cast<int64_t>(r->integer);
  }

  std::string Describe() const override { return absl::StrCat("redis ", address_); }

 private:
  enum class Retry {
    // Safe to run twice: retry once on a new connection after any connection error.
    kIdempotent,
    // Retry only if the command was certainly not delivered (it failed while being
    // written, or before). Once written, a lost reply means UNAVAILABLE.
    kOnlyIfUnsent,
  };

  // Sends one formatted command and returns its reply. Error replies from Redis come
  // back as a non-OK status; the connection is kept for them.
  absl::StatusOr<ReplyPtr> Run(const std::string& cmd, Retry retry) ABSL_LOCKS_EXCLUDED(mu_) {
    if (cmd.empty()) return absl::InternalError("cannot format a redis command");
    absl::MutexLock lock(&mu_);
    ScopedSigpipeBlock no_sigpipe;
    std::string last_error;
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (ctx_ != nullptr && (ctx_->err != 0 || !PeerStillOpen(ctx_->fd))) {
        DropConnection();
      }
      if (ctx_ == nullptr) {
        absl::Status connected = ConnectLocked();
        if (!connected.ok()) return connected;
      }
      bool sent = false;
      ReplyPtr reply = SendLocked(cmd, &sent);
      if (reply != nullptr) {
        if (reply->type == REDIS_REPLY_ERROR) {
          return ErrorReply(absl::string_view(reply->str, reply->len));
        }
        return reply;
      }
      last_error = ctx_->errstr[0] != '\0' ? ctx_->errstr : "connection lost";
      DropConnection();
      if (retry == Retry::kOnlyIfUnsent && sent) break;
    }
    return Unavailable(last_error);
  }

  // REQUIRES: ctx_ is connected. Returns null on a connection error (see ctx_->errstr)
  // and sets *sent once the whole command has been written to the socket.
  ReplyPtr SendLocked(const std::string& cmd, bool* sent)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    *sent = false;
    if (redisAppendFormattedCommand(ctx_, cmd.data(), cmd.size()) != REDIS_OK) {
      return nullptr;
    }
    int done = 0;
    while (!done) {
      if (redisBufferWrite(ctx_, &done) != REDIS_OK) return nullptr;
    }
    *sent = true;
    void* reply = nullptr;
    if (redisGetReply(ctx_, &reply) != REDIS_OK || reply == nullptr) return nullptr;
    return ReplyPtr(static_cast<redisReply*>(reply));
  }

  absl::Status ConnectLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    redisContext* c = redisConnectWithTimeout(host_.c_str(), port_, kConnectTimeout);
    if (c == nullptr) return Unavailable("cannot allocate a connection");
    if (c->err != 0) {
      std::string error = c->errstr;
      redisFree(c);
      return Unavailable(error);
    }
    if (redisSetTimeout(c, kCommandTimeout) != REDIS_OK) {
      std::string error = c->errstr;
      redisFree(c);
      return Unavailable(absl::StrCat("cannot set the socket timeout: ", error));
    }
    // Every connection, the first and each one after a reconnect, proves the password
    // before any other command: a server with `requirepass` answers NOAUTH otherwise.
    if (!password_.empty()) {
      void* raw = redisCommand(c, "AUTH %b", password_.data(), password_.size());
      if (raw == nullptr) {
        std::string error = c->errstr;
        redisFree(c);
        return Unavailable(absl::StrCat("AUTH: ", error));
      }
      ReplyPtr reply(static_cast<redisReply*>(raw));
      if (reply->type == REDIS_REPLY_ERROR) {
        std::string error(reply->str, reply->len);
        redisFree(c);
        return ErrorReply(error);
      }
    }
    ctx_ = c;
    return absl::OkStatus();
  }

  void DropConnection() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (ctx_ != nullptr) redisFree(ctx_);
    ctx_ = nullptr;
  }

  absl::Status Unavailable(absl::string_view error) const {
    return absl::UnavailableError(absl::StrCat(
        "redis ", address_, ": ", error,
        "; is redis-server running? start it or pass --redis HOST:PORT"));
  }

  absl::Status ErrorReply(absl::string_view error) const {
    // LOADING: a restarted server is still reading its AOF/RDB; BUSY: a script is
    // running; TRYAGAIN/MASTERDOWN: cluster/replica transients. All pass by themselves.
    for (absl::string_view transient : {"LOADING", "BUSY", "TRYAGAIN", "MASTERDOWN"}) {
      if (absl::StartsWith(error, transient)) {
        return absl::UnavailableError(
            absl::StrCat("redis ", address_, ": ", error, " (retry shortly)"));
      }
    }
    // The password is wrong, missing, or given to a server that has none.
    for (absl::string_view auth : {"NOAUTH", "WRONGPASS", "ERR AUTH"}) {
      if (absl::StartsWith(error, auth)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "redis ", address_, " refused this scheduler: ", error,
            password_.empty() ? "; it needs a password: pass --redis-password-file FILE"
                              : "; check the file given as --redis-password-file"));
      }
    }
    // WRONGTYPE, OOM, MISCONF...: the server or the key space needs fixing.
    return absl::FailedPreconditionError(absl::StrCat("redis ", address_, ": ", error));
  }

  static absl::Status Annotate(const absl::Status& s, absl::string_view what) {
    return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
  }

  const std::string host_;
  const int port_;
  const std::string password_;  // "" sends no AUTH
  const std::string address_;  // "host:port", for messages and Describe().
  const std::string jobs_key_;
  const std::string versions_key_;
  const std::string actors_key_;
  const std::string actor_versions_key_;
  const std::string counter_key_prefix_;

  absl::Mutex mu_;
  // Null while disconnected; the next command connects.
  redisContext* ctx_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<StateStore>> NewRedisStateStore(
    const std::string& host, int port, const std::string& key_prefix,
    const std::string& password) {
  if (host.empty() || port < 1 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid redis address '", host, ":", port, "'"));
  }
  auto store = std::make_unique<RedisStateStore>(host, port, key_prefix, password);
  absl::Status s = store->Init();
  if (!s.ok()) return s;
  return std::unique_ptr<StateStore>(std::move(store));
}

}  // namespace drover
