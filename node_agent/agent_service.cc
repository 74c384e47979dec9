#include "node_agent/agent_service.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/strip.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/files.h"
#include "common/log.h"
#include "common/status.h"

namespace drover {
namespace {

// How often a following stream looks for new output when nothing exited.
constexpr absl::Duration kFollowPollInterval = absl::Milliseconds(25);

// (rank, stream) of every rank<N>.out / rank<N>.err file in `dir`.
std::set<std::pair<int, int>> ListLogFiles(const std::string& dir) {
  std::set<std::pair<int, int>> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (struct dirent* e = readdir(d)) {
    absl::string_view name = e->d_name;
    if (!absl::ConsumePrefix(&name, "rank")) continue;
    int stream = 0;
    if (absl::ConsumeSuffix(&name, ".out")) {
      stream = ProcessManager::kStdout;
    } else if (absl::ConsumeSuffix(&name, ".err")) {
      stream = ProcessManager::kStderr;
    } else {
      continue;
    }
    int rank;
    if (absl::SimpleAtoi(name, &rank) && rank >= 0) out.emplace(rank, stream);
  }
  closedir(d);
  return out;
}

}  // namespace

AgentService::AgentService(std::string token, ProcessManager* pm, absl::Duration default_grace)
    : token_(std::move(token)), pm_(pm), default_grace_(default_grace) {}

void AgentService::SetNodeId(const std::string& node_id) {
  absl::MutexLock lock(&mu_);
  node_id_ = node_id;
}

std::string AgentService::NodeId() {
  absl::MutexLock lock(&mu_);
  return node_id_.empty() ? "(unregistered)" : node_id_;
}

std::string AgentService::Validate(const proto::StartProcessesRequest& req) {
  if (req.job_id().empty()) return "StartProcesses: job_id is empty";
  if (!ProcessManager::ValidJobId(req.job_id())) {
    return absl::StrCat("StartProcesses: invalid job id '", req.job_id(),
                        "' (letters, digits, '-', '_' and '.' only)");
  }
  if (req.command().empty() || req.command(0).empty()) {
    return absl::StrCat("job ", req.job_id(), ": the command is empty");
  }
  if (req.processes().empty()) {
    return absl::StrCat("job ", req.job_id(), ": no processes to start on this node");
  }
  if (req.world_size() < 1) {
    return absl::StrCat("job ", req.job_id(), ": world_size must be >= 1, got ",
                        req.world_size());
  }
  if (req.generation() < 0) {
    return absl::StrCat("job ", req.job_id(), ": generation must be >= 0");
  }
  if (req.placement_epoch() < 0) {
    return absl::StrCat("job ", req.job_id(), ": placement_epoch must be >= 0, got ",
                        req.placement_epoch());
  }
  if (req.master_port() < 0 || req.master_port() > 65535) {
    return absl::StrCat("job ", req.job_id(), ": master_port ", req.master_port(),
                        " is out of range");
  }
  std::set<int> ranks;
  for (const auto& p : req.processes()) {
    if (p.rank() < 0 || p.rank() >= req.world_size()) {
      return absl::StrCat("job ", req.job_id(), ": rank ", p.rank(), " is outside [0, ",
                          req.world_size(), ")");
    }
    if (!ranks.insert(p.rank()).second) {
      return absl::StrCat("job ", req.job_id(), ": rank ", p.rank(), " is listed twice");
    }
    if (p.local_rank() < 0) {
      return absl::StrCat("job ", req.job_id(), ": rank ", p.rank(),
                          " has a negative local_rank");
    }
    for (int g : p.gpu_ids()) {
      if (g < 0) {
        return absl::StrCat("job ", req.job_id(), ": rank ", p.rank(),
                            " has a negative GPU index ", g);
      }
    }
  }
  return "";
}

grpc::Status AgentService::StartProcesses(grpc::ServerContext* ctx,
                                          const proto::StartProcessesRequest* req,
                                          proto::StartProcessesReply* reply) {
  if (grpc::Status s = CheckToken(*ctx, token_); !s.ok()) return s;
  int port = 0;
  if (grpc::Status s = StartOne(*req, &port); !s.ok()) return s;
  reply->set_master_port(port);
  return grpc::Status::OK;
}

grpc::Status AgentService::StartProcessesBatch(grpc::ServerContext* ctx,
                                               const proto::StartProcessesBatchRequest* req,
                                               proto::StartProcessesBatchReply* reply) {
  if (grpc::Status s = CheckToken(*ctx, token_); !s.ok()) return s;
  for (const auto& start : req->starts()) {
    int port = 0;
    grpc::Status s = StartOne(start, &port);
    proto::StartResult* r = reply->add_results();
    r->set_code(static_cast<int32_t>(s.error_code()));
    r->set_message(s.error_message());
    if (s.ok()) r->set_master_port(port);
  }
  return grpc::Status::OK;
}

void AgentService::FenceStarts() {
  absl::WriterMutexLock lock(&start_mu_);  // waits for the starts admitted so far
  fenced_ = std::max(fenced_, registration_.load());
}

grpc::Status AgentService::StartOne(const proto::StartProcessesRequest& req, int* port) {
  if (std::string err = Validate(req); !err.empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, err);
  }
  // A start held up by a cut link can arrive after the scheduler gave up on it (and
  // failed the job): refused, so its processes never run.
  absl::ReaderMutexLock lock(&start_mu_);
  if (const int64_t now = std::max(registration_.load(), fenced_ + 1);
      req.node_registration() != 0 && req.node_registration() < now) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("job ", req.job_id(), " generation ", req.generation(),
                                     ": this start was sent before node ", NodeId(),
                                     " registered again (registration ", req.node_registration(),
                                     ", now ", now, "); the scheduler no longer waits for it"));
  }
  return ToGrpcStatus(pm_->Start(req, port));
}

grpc::Status AgentService::StopJob(grpc::ServerContext* ctx, const proto::StopJobRequest* req,
                                   proto::StopJobReply* reply) {
  if (grpc::Status s = CheckToken(*ctx, token_); !s.ok()) return s;
  if (req->job_id().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "StopJob: job_id is empty");
  }
  absl::Duration grace =
      req->grace_ms() > 0 ? absl::Milliseconds(req->grace_ms()) : default_grace_;
  reply->set_signalled(
      pm_->Stop(req->job_id(), req->generation(), grace, "the scheduler asked (StopJob)",
                req->placement_epoch()));
  return grpc::Status::OK;
}

grpc::Status AgentService::StreamLogs(grpc::ServerContext* ctx,
                                      const proto::StreamLogsRequest* req,
                                      grpc::ServerWriter<proto::LogChunk>* writer) {
  if (grpc::Status s = CheckToken(*ctx, token_); !s.ok()) return s;
  const std::string& job = req->job_id();
  std::string dir = pm_->JobLogDir(job);
  if (!ProcessManager::ValidJobId(job) || ::access(dir.c_str(), F_OK) != 0) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("no logs for job ", job, " on node ", NodeId()));
  }
  std::map<std::pair<int, int>, int64_t> offsets;  // (rank, stream) -> next offset
  for (const auto& o : req->offsets()) offsets[{o.rank(), o.stream()}] = std::max<int64_t>(0, o.offset());
  std::string buf;
  for (;;) {
    // Whether anything is alive is read BEFORE the files: if nothing was alive then,
    // everything it wrote is already in the files we are about to read.
    uint64_t seq = pm_->ChangeSeq();
    bool active = pm_->JobActive(job);
    for (const auto& key : ListLogFiles(dir)) {
      std::string path = pm_->LogPath(job, key.first, key.second);
      auto [it, fresh] = offsets.try_emplace(key, 0);
      int64_t& off = it->second;
      int64_t size = FileSize(path);
      if (fresh && req->tail_bytes() > 0) off = std::max<int64_t>(0, size - req->tail_bytes());
      if (size <= off) continue;
      int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      while (off < size) {
        int64_t want = std::min(kMaxChunkBytes, size - off);
        buf.resize(want);
        ssize_t n = ::pread(fd, buf.data(), want, off);
        if (n <= 0) break;
        proto::LogChunk chunk;
        chunk.set_rank(key.first);
        chunk.set_stream(key.second);
        chunk.set_offset(off);
        chunk.set_data(buf.data(), n);
        if (!writer->Write(chunk)) {
          ::close(fd);
          return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
        }
        off += n;
      }
      ::close(fd);
    }
    if (!req->follow() || !active) return grpc::Status::OK;
    if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    if (shutting_down_) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          absl::StrCat("node agent on ", NodeId(), " is shutting down"));
    }
    pm_->WaitForChange(seq, absl::Now() + kFollowPollInterval);
  }
}

}  // namespace drover
