#include "sdk/runtime/queue_host.h"

#include <errno.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/env.h"
#include "common/frame_server.h"
#include "common/framed_socket.h"
#include "common/log.h"
#include "common/socket_stream.h"
#include "common/status_macros.h"
#include "drover/task.h"
#include "sdk/runtime/context.h"
#include "sdk/runtime/queue_book.h"

namespace drover::internal {
class QueueServer : private FrameServer::Handler {
 public:
  QueueServer(QueueSpec spec, RuntimeContext* ctx)
      : spec_(std::move(spec)),
        ctx_(ctx),
        book_(absl::StrCat("queue '", spec_.name, "'"), spec_.capacity),
        server_(this, ServerOptions(spec_, ctx)) {}

  ~QueueServer() {
    if (thread_.joinable()) {
      server_.Wake();
      thread_.join();
    }
    std::vector<StoredRef> left;
    for (const proto::StoredObject& o : book_.Owned()) left.push_back(StoredRef{o.object_id(), o.node_id(), o.size()});
    if (!left.empty()) ctx_->store->Delete(left);
    // server_ closes every socket and removes the Unix socket's file.
  }

  absl::Status Start() {
    std::string dir = Env("DROVER_WORKER_DIR");
    if (dir.empty()) dir = "/tmp";
    std::string ip = Env("DROVER_NODE_IP");
    if (ip.empty()) ip = ctx_->node_ip.empty() ? "127.0.0.1" : ctx_->node_ip;
    endpoint_.spec = spec_;
    endpoint_.node_id = ctx_->node_id;
    endpoint_.pid = ::getpid();
    endpoint_.unix_path = absl::StrCat(dir, "/q-", ::getpid(), "-", spec_.queue_id.substr(spec_.queue_id.size() > 8 ? spec_.queue_id.size() - 8 : 0), ".sock");
    DROVER_RETURN_IF_ERROR(server_.Init());
    DROVER_RETURN_IF_ERROR(server_.ListenUnix(endpoint_.unix_path));
    DROVER_ASSIGN_OR_RETURN(int port, server_.ListenTcp(ip));
    endpoint_.tcp_address = absl::StrCat(ip, ":", port);
    thread_ = std::thread([this] { Loop(); });
    return absl::OkStatus();
  }

  const QueueEndpoint& endpoint() const { return endpoint_; }

 private:
  struct Conn : FrameConn {
    bool hello = false;
  };

  static FrameServer::Options ServerOptions(const QueueSpec& spec, RuntimeContext* ctx) {
    FrameServer::Options o;
    o.name = absl::StrCat("queue '", spec.name, "'");
    o.tcp_security = ctx->transport.get();  // TLS for TCP clients of a TLS cluster
    return o;
  }

  void Loop() {
    while (!server_.woken()) {
      if (server_.Poll(EventLoop::TimeoutMs(book_.NextDeadline())) < 0) {
        DROVER_LOG(ERROR) << "queue " << spec_.name << ": epoll_wait: " << std::strerror(errno);
        return;
      }
      Send(book_.Expire(absl::Now()));
    }
  }

  std::shared_ptr<FrameConn> NewConnection() override { return std::make_shared<Conn>(); }

  void OnFrame(const std::shared_ptr<FrameConn>& fc, std::string_view payload) override {
    proto::QueueRequest req;
    if (!req.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
      fc->MarkClosed();
      return;
    }
    Conn& c = static_cast<Conn&>(*fc);
    const absl::Time now = absl::Now();
    if (!c.hello) {
      QueueBook::Answer a;
      a.conn = c.id();
      a.reply.set_request_id(req.request_id());
      if (!req.has_hello() || !ConstantTimeEquals(req.hello().token(), ctx_->token)) {
        a.reply.set_code(static_cast<int>(absl::StatusCode::kUnauthenticated));
        a.reply.set_message("wrong or missing cluster token");
      } else if (req.hello().queue_id() != spec_.queue_id) {
        a.reply.set_code(static_cast<int>(absl::StatusCode::kNotFound));
        a.reply.set_message(absl::StrCat("this is the host of queue ", spec_.queue_id, ", not of ",
                                         req.hello().queue_id()));
      } else {
        c.hello = true;
      }
      server_.Send(fc, a.reply);
      if (!c.hello) fc->MarkClosed();
      return;
    }
    switch (req.op_case()) {
      case proto::QueueRequest::kPut:
        Send(book_.Put(c.id(), req.request_id(), std::move(*req.mutable_put()), now));
        break;
      case proto::QueueRequest::kGet:
        Send(book_.Get(c.id(), req.request_id(), req.get(), now));
        break;
      case proto::QueueRequest::kClose:
        Send(book_.Close(c.id(), req.request_id()));
        break;
      default: {
        QueueBook::Answer a;
        a.conn = c.id();
        a.reply.set_request_id(req.request_id());
        if (req.has_stats()) {
          *a.reply.mutable_stats() = book_.Stats();
        } else {
          a.reply.set_code(static_cast<int>(absl::StatusCode::kInvalidArgument));
          a.reply.set_message("a queue request with no operation this host knows");
        }
        Send({std::move(a)});
      }
    }
  }

  void OnClosed(const std::shared_ptr<FrameConn>& c, std::string_view why) override {
    std::vector<StoredRef> dropped;
    for (const proto::StoredObject& o : book_.Disconnected(c->id())) {
      dropped.push_back(StoredRef{o.object_id(), o.node_id(), o.size()});
    }
    if (!dropped.empty()) ctx_->store->Delete(dropped);
  }

  void Send(std::vector<QueueBook::Answer> answers) {
    std::vector<std::shared_ptr<FrameConn>> touched;
    for (QueueBook::Answer& a : answers) {
      std::shared_ptr<FrameConn> c = server_.Find(a.conn);
      if (c == nullptr) continue;
      c->Queue(a.reply);
      touched.push_back(std::move(c));
    }
    for (const std::shared_ptr<FrameConn>& c : touched) server_.Flush(*c);
  }

  const QueueSpec spec_;
  RuntimeContext* const ctx_;
  QueueEndpoint endpoint_;
  QueueBook book_;
  FrameServer server_;
  std::thread thread_;
};

QueueHost::QueueHost(QueueSpec spec) {
  RuntimeContext* ctx = CurrentRuntimeContext();
  if (ctx == nullptr) throw std::runtime_error("a queue host needs the task runtime");
  auto server = std::make_unique<QueueServer>(std::move(spec), ctx);
  if (absl::Status s = server->Start(); !s.ok()) {
    throw std::runtime_error(absl::StrCat("cannot start the queue's server: ", s.message()));
  }
  server_ = std::move(server);
}

QueueHost::~QueueHost() = default;

QueueEndpoint QueueHost::Endpoint() { return server_->endpoint(); }

QueueHost* MakeQueueHost(QueueSpec spec) { return new QueueHost(std::move(spec)); }

}  // namespace drover::internal

DROVER_REMOTE(drover::internal::MakeQueueHost, &drover::internal::QueueHost::Endpoint);
