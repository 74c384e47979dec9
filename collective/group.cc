#include <signal.h>

#include <cstdlib>
#include <map>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "collective/group.h"
#include "collective/group_internal.h"
#include "collective/timed_group.h"
#include "common/auth.h"
#include "common/net.h"
#include "common/timeline_reporter.h"

namespace drover::collective {

size_t DataTypeSize(DataType type) {
  switch (type) {
    case DataType::kFloat32: return 4;
    case DataType::kFloat64: return 8;
    case DataType::kFloat16: return 2;
    case DataType::kInt32: return 4;
    case DataType::kInt64: return 8;
    case DataType::kUint8: return 1;
  }
  return 0;
}

const char* DataTypeName(DataType type) {
  switch (type) {
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
    case DataType::kFloat16: return "float16";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
    case DataType::kUint8: return "uint8";
  }
  return "unknown";
}

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "unknown";
}

const char* AlgorithmName(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kAuto: return "auto";
    case Algorithm::kGloo: return "gloo";
    case Algorithm::kShm: return "shm";
    case Algorithm::kHierarchical: return "hierarchical";
  }
  return "unknown";
}

namespace {

absl::StatusOr<std::string> Env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') {
    return absl::InvalidArgumentError(absl::StrCat(
        "collective group from environment: ", name,
        " is not set (drover sets it for every process of a job; outside drover, fill "
        "GroupOptions yourself)"));
  }
  return std::string(v);
}

absl::StatusOr<int> EnvInt(const char* name) {
  auto v = Env(name);
  if (!v.ok()) return v.status();
  int out;
  if (!absl::SimpleAtoi(*v, &out)) {
    return absl::InvalidArgumentError(
        absl::StrCat("collective group from environment: ", name, "='", *v,
                     "' is not an integer"));
  }
  return out;
}

struct Registry {
  absl::Mutex mu;
  std::map<Backend, GroupFactory> factories ABSL_GUARDED_BY(mu);
};

Registry& GetRegistry() {
  static Registry* r = new Registry;
  return *r;
}

}  // namespace

absl::StatusOr<GroupOptions> GroupOptionsFromEnvironment(const std::string& name) {
  GroupOptions o;
  o.name = name;
  auto rank = EnvInt("RANK");
  if (!rank.ok()) return rank.status();
  auto size = EnvInt("WORLD_SIZE");
  if (!size.ok()) return size.status();
  auto job = Env("DROVER_JOB_ID");
  if (!job.ok()) return job.status();
  auto gen = EnvInt("DROVER_GENERATION");
  if (!gen.ok()) return gen.status();
  auto sched = Env("DROVER_SCHEDULER_ADDRESS");
  if (!sched.ok()) return sched.status();
  auto token = Env("DROVER_TOKEN_FILE");
  if (!token.ok()) return token.status();
  o.rank = *rank;
  o.size = *size;
  o.job_id = *job;
  o.generation = *gen;
  o.scheduler_address = *sched;
  o.token_file = *token;
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
    o.interface = ifname;
  }
  if (auto local = EnvInt("LOCAL_RANK"); local.ok()) o.device = *local;
  if (const char* node = std::getenv("DROVER_NODE_ID"); node && *node) o.node_id = node;
  o.timeline = TimelineSwitch("DROVER_TIMELINE_COLLECTIVES", false);
  if (const char* alg = std::getenv("DROVER_COLLECTIVE_ALGORITHM"); alg && *alg) {
    std::string a = alg;
    if (a == "auto") o.algorithm = Algorithm::kAuto;
    else if (a == "gloo") o.algorithm = Algorithm::kGloo;
    else if (a == "shm") o.algorithm = Algorithm::kShm;
    else if (a == "hierarchical") o.algorithm = Algorithm::kHierarchical;
    else {
      return absl::InvalidArgumentError(absl::StrCat(
          "collective group from environment: DROVER_COLLECTIVE_ALGORITHM='", a,
          "' is not one of auto, gloo, shm, hierarchical"));
    }
  }
  return o;
}

bool RegisterGroupFactory(Backend backend, GroupFactory factory) {
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  r.factories[backend] = std::move(factory);
  return true;
}

namespace {

// Gloo writes to its sockets with plain writev: a peer that died would kill this process
// with SIGPIPE instead of failing the operation with UNAVAILABLE (and then ABORTED naming
// the dead rank). A disposition the program chose itself (a handler, or already
// ignored) is left alone.
void IgnoreSigpipe() {
  struct sigaction current;
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL &&
      (current.sa_flags & SA_SIGINFO) == 0) {
    signal(SIGPIPE, SIG_IGN);
  }
}

absl::StatusOr<std::unique_ptr<Group>> Watched(
    absl::StatusOr<std::unique_ptr<internal::GroupBase>> group) {
  if (!group.ok()) return group.status();
  if (absl::Status s = (*group)->WatchGeneration(); !s.ok()) return s;
  return std::unique_ptr<Group>(std::move(*group));
}

absl::StatusOr<std::unique_ptr<Group>> NewUntimedGroup(const GroupOptions& options) {
  if (options.backend == Backend::kGloo) {
    if (options.algorithm == Algorithm::kGloo || options.size == 1) {
      return Watched(internal::NewGlooGroup(options));
    }
    return Watched(internal::NewHybridGroup(options));
  }
  GroupFactory factory;
  {
    Registry& r = GetRegistry();
    absl::MutexLock lock(&r.mu);
    auto it = r.factories.find(options.backend);
    if (it != r.factories.end()) factory = it->second;
  }
  if (!factory) {
    return absl::FailedPreconditionError(absl::StrCat(
        "group '", options.name,
        "': the NCCL backend is not linked into this program; add //collective:nccl_group "
        "to its deps"));
  }
  auto group = factory(options);
  if (!group.ok()) return group.status();
  if (auto* base = dynamic_cast<internal::GroupBase*>(group->get())) {
    if (absl::Status s = base->WatchGeneration(); !s.ok()) return s;
  }
  return group;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Group>> NewGroup(const GroupOptions& options) {
  IgnoreSigpipe();
  absl::StatusOr<std::unique_ptr<Group>> group = NewUntimedGroup(options);
  if (!group.ok() || !options.timeline) return group;
  return internal::TimedGroup::Wrap(*std::move(group), options);
}

namespace internal {

absl::Status ValidateOptions(const GroupOptions& o) {
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("group '", o.name, "': ", what));
  };
  if (o.name.empty() || o.name.find('/') != std::string::npos) {
    return bad("the name must be non-empty and contain no '/'");
  }
  if (o.size < 1) return bad(absl::StrCat("size ", o.size, " < 1"));
  if (o.rank < 0 || o.rank >= o.size) {
    return bad(absl::StrCat("rank ", o.rank, " outside [0, ", o.size, ")"));
  }
  if (o.job_id.empty()) return bad("no job id");
  if (o.scheduler_address.empty()) return bad("no scheduler address");
  if (o.timeout <= absl::ZeroDuration()) return bad("timeout must be positive");
  return absl::OkStatus();
}

absl::StatusOr<KvClientOptions> KvOptionsFor(const GroupOptions& options) {
  KvClientOptions kv;
  kv.scheduler_address = options.scheduler_address;
  kv.job_id = options.job_id;
  kv.generation = options.generation;
  kv.retry_for = options.timeout;
  if (!options.token_file.empty()) {
    auto token = ReadTokenFile(options.token_file);
    if (!token.ok()) {
      return absl::Status(token.status().code(),
                          absl::StrCat("group '", options.name, "': reading the token file: ",
                                       token.status().message()));
    }
    kv.token = *token;
  }
  return kv;
}

absl::StatusOr<std::unique_ptr<KvClient>> ConnectKv(const GroupOptions& options) {
  auto kv = KvOptionsFor(options);
  if (!kv.ok()) return kv.status();
  return KvClient::Create(*kv);
}

// ---------------------------------------------------------------------------
// GroupBase

namespace {
// After a peer's connection broke, how long an operation waits for the cluster's notice
// saying which process failed and how (the scheduler hears of an exit within
// milliseconds; a lost node takes its node timeout, and then the plain error stands).
constexpr absl::Duration kNoticeWait = absl::Seconds(2);
}  // namespace

GroupBase::GroupBase(GroupOptions options, std::string label)
    : options_(std::move(options)), label_(std::move(label)) {}

GroupBase::~GroupBase() { StopWatching(); }

void GroupBase::StopWatching() {
  if (watcher_ && subscription_ >= 0) watcher_->Unsubscribe(subscription_);
  subscription_ = -1;
}

absl::Status GroupBase::WatchGeneration() {
  if (!options_.watch_generation) return absl::OkStatus();
  auto kv = KvOptionsFor(options_);
  if (!kv.ok()) return kv.status();
  watcher_ = GenerationWatcher::Get(*kv, options_.rank);
  subscription_ = watcher_->Subscribe([this](const absl::Status& notice) { Abort(notice); });
  return absl::OkStatus();
}

void GroupBase::Abort(const absl::Status& cause) {
  {
    absl::MutexLock lock(&mu_);
    if (aborted_) return;
    aborted_ = true;
    if (broken_.ok()) broken_ = cause;
  }
  AbortTransport(cause);
}

std::string GroupBase::Where(const std::string& op) const {
  return absl::StrCat(op, " in group '", options_.name, "' (rank ", rank(), " of ", size(),
                      ", ", label_, ", job ", options_.job_id, " generation ",
                      options_.generation, ")");
}

absl::Status GroupBase::Invalid(const std::string& op, const std::string& what) const {
  return absl::InvalidArgumentError(absl::StrCat(Where(op), ": ", what));
}

absl::Status GroupBase::Usable(const std::string& op) const {
  absl::Status broken;
  std::optional<absl::Status> notice;
  {
    absl::MutexLock lock(&mu_);
    if (broken_.ok()) return absl::OkStatus();
    broken = broken_;
    if (aborted_ && broken_.code() == absl::StatusCode::kAborted) notice = broken_;
  }
  // The notice may have reached Fail() (which waits for it) before the watcher's
  // callback ran Abort(): a group broken by it is aborted all the same. Asked outside
  // mu_, which the watcher's callback takes.
  if (!notice && watcher_) notice = watcher_->Notice();
  if (notice) {
    return absl::AbortedError(absl::StrCat(
        Where(op), ": the group was aborted because ", notice->message(),
        "; exit and let the gang restart form a new group"));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      Where(op), ": the group is unusable after an earlier failure (", broken.message(),
      "); exit and let the gang restart form a new group"));
}

absl::Status GroupBase::Fail(const std::string& op, const absl::Status& s) {
  if (s.ok()) return s;
  absl::Status notice;
  {
    absl::MutexLock lock(&mu_);
    if (aborted_ && broken_.code() == absl::StatusCode::kAborted) notice = broken_;
  }
  if (notice.ok() && watcher_ &&
      (s.code() == absl::StatusCode::kUnavailable || s.code() == absl::StatusCode::kAborted)) {
    if (auto n = watcher_->Notice(kNoticeWait)) notice = *n;
  }
  absl::Status result = s;
  if (!notice.ok()) {
    // "<where>: aborted because <notice> (<what this rank saw, without the where>)".
    absl::string_view seen = s.message();
    absl::ConsumePrefix(&seen, Where(op));
    absl::ConsumePrefix(&seen, ": ");
    result = absl::AbortedError(absl::StrCat(Where(op), ": aborted because ", notice.message(),
                                             " (here: ", seen, ")"));
  }
  {
    absl::MutexLock lock(&mu_);
    if (broken_.ok()) broken_ = result;
  }
  return result;
}

absl::StatusOr<std::string> JoinPrefix(KvClient& kv, const GroupOptions& options) {
  auto joins = kv.Add(absl::StrCat("collective/", options.name, "/g", options.generation,
                                   "/rank", options.rank, "/joins"),
                      1);
  if (!joins.ok()) {
    return absl::Status(joins.status().code(),
                        absl::StrCat("group '", options.name, "' rank ", options.rank,
                                     ": joining: ", joins.status().message()));
  }
  return MakeGroupPrefix(options.name, options.generation, *joins - 1);
}

}  // namespace internal
}  // namespace drover::collective
