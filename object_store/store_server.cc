#include "object_store/store_server.h"

#include <errno.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/files.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "object_store/arena.h"
#include "object_store/request_switch.h"
#include "object_store/store_reactor.h"

namespace drover::object_store {
namespace {

// Bytes one connection may have read per wake-up, so that one busy client cannot
// starve the others.
constexpr size_t kMaxReadPerWakeup = 1u << 20;

}  // namespace

// The store's event loop: the reactor's events, each readable connection's frames
// handed to the request switch, Get timeouts, and closing. Owns the arena, the reactor
// and the switch; one thread runs it.
class StoreServer::Loop {
 public:
  Loop(std::unique_ptr<Arena> arena, const ServerOptions& options)
      : arena_(std::move(arena)),
        reactor_(arena_->fd(), arena_->capacity(), options.stay_awake),
        requests_(arena_.get(), &reactor_, options) {}

  uint64_t capacity() const { return arena_->capacity(); }
  StoreReactor& reactor() { return reactor_; }

  void StartThread() { thread_ = std::thread([this] { Run(); }); }

  void StopAndJoin() {
    reactor_.Wake();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() {
    constexpr int kMaxEvents = 64;
    epoll_event events[kMaxEvents];
    bool stopping = false;
    std::vector<std::pair<ClientId, std::string>> closed;
    while (!stopping) {
      int n = reactor_.Wait(events, kMaxEvents, requests_.NextDeadline());
      if (n < 0) {
        if (errno == EINTR) continue;
        DROVER_LOG(ERROR) << "object store: epoll_wait failed: " << strerror(errno);
        break;
      }
      for (int i = 0; i < n; ++i) {
        if (StoreConn* c = reactor_.Dispatch(events[i], &stopping)) ServeReadable(*c);
      }
      requests_.ExpireGets(absl::Now());
      reactor_.CloseMarked(&closed);
      for (const auto& [client, why] : closed) requests_.OnDisconnected(client, why);
      closed.clear();
      // Disconnects release references; nothing else to wake (Gets wait only for seals).
      requests_.ProcessSealed();
    }
  }

  // Handles what `c` sent. Replies to the frames of one read go out with one send() at
  // the end, not one each: a pipelining client (PutMany, batched releases) pays one
  // syscall per batch.
  void ServeReadable(StoreConn& c) {
    StoreReactor::ReplyBatch batch(&reactor_, c);
    size_t budget = kMaxReadPerWakeup;
    StoreReactor::ReadResult read;
    do {
      read = reactor_.Read(c, &budget);
      if (read == StoreReactor::ReadResult::kNothing) return;
      absl::string_view body;
      while (reactor_.NextFrame(c, &body)) {
        requests_.HandleFrame(c, body);
        requests_.ProcessSealed();
        // A leased put's reply goes out before the store turns to the frames behind
        // it (the client's next lease): the put waits only for its own seal.
        if (requests_.TakeFlushNow()) reactor_.FlushBeforeMore(c);
      }
    } while (read == StoreReactor::ReadResult::kMore);
  }

  std::unique_ptr<Arena> arena_;
  StoreReactor reactor_;
  RequestSwitch requests_;
  std::thread thread_;
};

StoreServer::StoreServer() = default;

StoreServer::~StoreServer() { Stop(); }

absl::Status StoreServer::Start(const std::string& socket_path, ServerOptions options) {
  if (loop_ != nullptr) return absl::FailedPreconditionError("object store already started");
  uint64_t capacity = options.capacity;
  if (capacity == 0) {
    DROVER_ASSIGN_OR_RETURN(capacity, DefaultArenaCapacity());
  }
  if (!options.spill_dir.empty()) DROVER_RETURN_IF_ERROR(MakeDirs(options.spill_dir, 0700));
  DROVER_ASSIGN_OR_RETURN(std::unique_ptr<Arena> arena,
                          Arena::Create(capacity, options.huge_pages));
  if (options.prefault) {
    absl::Time t0 = absl::Now();
    DROVER_RETURN_IF_ERROR(arena->Prefault(0, arena->capacity()));
    DROVER_LOG(INFO) << "object store: prefaulted " << arena->capacity() << " bytes in "
                     << absl::FormatDuration(absl::Now() - t0);
  }
  auto loop = std::make_unique<Loop>(std::move(arena), options);
  if (absl::Status s = loop->reactor().Listen(socket_path); !s.ok()) {
    if (loop->reactor().bound()) unlink(socket_path.c_str());
    return s;
  }
  socket_path_ = socket_path;
  loop->StartThread();
  loop_ = std::move(loop);
  DROVER_LOG(INFO) << "object store: serving " << loop_->capacity() << " bytes on " << socket_path;
  return absl::OkStatus();
}

void StoreServer::Stop() {
  if (loop_ == nullptr) return;
  loop_->StopAndJoin();
  loop_.reset();
  unlink(socket_path_.c_str());
}

const std::string& StoreServer::socket_path() const { return socket_path_; }

uint64_t StoreServer::capacity() const { return loop_ == nullptr ? 0 : loop_->capacity(); }

}  // namespace drover::object_store
