#include "object_store/subscriber.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "object_store/wire_status.h"
#include "proto/object_store.pb.h"

namespace drover::object_store {
namespace {

constexpr uint64_t kSubscribeRequestId = 1;

StoreEvent FromProto(const proto::StoreEvent& e) {
  StoreEvent out;
  out.kind = e.kind() == proto::StoreEvent::REMOVED ? StoreEvent::Kind::kRemoved
                                                    : StoreEvent::Kind::kSealed;
  out.id = e.id();
  out.data_size = e.data_size();
  out.primary = e.primary();
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Subscriber>> Subscriber::Connect(
    const std::string& socket_path, std::vector<StoreEvent>* snapshot, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  // The hello carries the arena descriptor, which a subscriber does not need.
  proto::StoreHello hello;
  DROVER_ASSIGN_OR_RETURN(const StoreGreeting greeting,
                          ConnectAndReceiveHello(socket_path, timeout, &hello));
  const int fd = greeting.fd;
  close(greeting.arena_fd);
  proto::StoreRequest req;
  req.set_request_id(kSubscribeRequestId);
  req.mutable_subscribe()->set_snapshot(snapshot != nullptr);
  std::string scratch;
  if (absl::Status s = WriteFrame(fd, req, &scratch); !s.ok()) {
    close(fd);
    return s;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  int wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake < 0) {
    close(fd);
    return absl::InternalError(absl::StrCat("eventfd: ", strerror(errno)));
  }
  std::unique_ptr<Subscriber> sub(new Subscriber(fd, wake, kSubscribeRequestId));
  // Snapshot events, then the reply.
  proto::StoreReply reply;
  while (true) {
    DROVER_RETURN_IF_ERROR(sub->ReadReply(deadline, &reply));
    if (reply.has_event()) {
      if (snapshot != nullptr) snapshot->push_back(FromProto(reply.event()));
      continue;
    }
    if (ReplyCode(reply) != absl::StatusCode::kOk) {
      return absl::Status(ReplyCode(reply), absl::StrCat("object store at ", socket_path,
                                                         " refused Subscribe: ", reply.message()));
    }
    return sub;
  }
}

Subscriber::Subscriber(int fd, int wake_fd, uint64_t request_id)
    : fd_(fd), wake_fd_(wake_fd), request_id_(request_id) {}

Subscriber::~Subscriber() {
  close(fd_);
  close(wake_fd_);
}

void Subscriber::Interrupt() {
  interrupted_ = true;
  uint64_t one = 1;
  ssize_t n = write(wake_fd_, &one, sizeof(one));
  (void)n;
}

absl::Status Subscriber::ReadReply(absl::Time deadline, proto::StoreReply* reply) {
  constexpr size_t kChunk = 64u << 10;
  while (true) {
    if (interrupted_) return absl::CancelledError("object store subscriber interrupted");
    absl::string_view body;
    DROVER_ASSIGN_OR_RETURN(const bool got, in_.Next(&body));
    if (got) {
      if (!reply->ParseFromArray(body.data(), static_cast<int>(body.size()))) {
        return absl::InvalidArgumentError(absl::StrCat(
            "object store sent a frame of ", body.size(), " bytes that is not a StoreReply"));
      }
      return absl::OkStatus();
    }
    char* p = in_.PrepareWrite(kChunk);
    ssize_t n = read(fd_, p, kChunk);
    if (n > 0) {
      in_.Commit(static_cast<size_t>(n));
      continue;
    }
    if (n == 0) return absl::UnavailableError("the object store closed the event stream");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return absl::UnavailableError(
          absl::StrCat("reading object store events: ", strerror(errno)));
    }
    std::optional<int> timeout_ms = PollTimeoutMs(deadline);
    if (!timeout_ms) {
      return absl::DeadlineExceededError("no object store event before the deadline");
    }
    pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (poll(fds, 2, *timeout_ms) < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat("poll: ", strerror(errno)));
    }
  }
}

absl::StatusOr<StoreEvent> Subscriber::Next(absl::Duration timeout) {
  absl::Time deadline =
      timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout;
  proto::StoreReply reply;
  while (true) {
    DROVER_RETURN_IF_ERROR(ReadReply(deadline, &reply));
    if (reply.has_event() && reply.request_id() == request_id_) return FromProto(reply.event());
    // Anything else (there should be nothing) is skipped.
  }
}

}  // namespace drover::object_store
