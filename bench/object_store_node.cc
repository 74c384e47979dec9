// object_store_node: a helper process for //bench:object_store (testonly).
//
// Two modes:
//
//   object_store_node --echo SOCKET
//       Listens on a Unix socket and echoes every 64-byte message back (the baseline
//       of a raw Unix-socket round trip between two processes).
//
//   object_store_node --pool-bytes N --scheduler HOST:PORT --token-file FILE [--raw-tcp 0]
//                     [--tls-ca FILE]
//       One "node" for the cross-node pull: an ObjectTransfer (and its gRPC service on
//       127.0.0.1, port 0) over a LocalObjects backed by one pre-touched heap region of
//       N bytes that reuses freed space (as the store's arena does), registered with the scheduler's directory as a node.
//       `--raw-tcp 0` turns off the raw-TCP data path (ObjectTransferOptions::raw_tcp):
//       its pulls, and the reads it serves, move the data in gRPC messages. `--tls-ca`:
//       the scheduler is a TLS one; the node gets its certificate from it as an agent
//       does (node_agent/tls_bootstrap.h), and everything it serves or pulls is TLS,
//       the tcp_serve/tcp_recv baseline included.
//       Prints "ready <address> <node_id>" and then executes one command per stdin
//       line, answering one line each ("ok ..." or "err <message>"):
//         put ID BYTES        create ID (BYTES of a pattern) in the store, announce it
//         fetch ID            ObjectTransfer::Fetch(ID); "ok <seconds> <bytes>"
//         drop ID             delete the local copy
//         stats               "ok <raw pulls> <raw reads served>" (ObjectTransferStats)
//         sum ID              "ok <checksum>" of the local copy's data
//         tcp_serve ID        listen on 127.0.0.1:0, print "ok <port>", then send the
//                             object's bytes (from the arena) to one connection (TLS
//                             with --tls-ca)
//         tcp_recv PORT BYTES connect and receive BYTES into a store allocation;
//                             "ok <seconds>" (the TLS handshake included)
//         quit
// Timings are taken inside this process (the receiving side), for both the pull and
// its raw-TCP baseline.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/auth.h"
#include "common/net.h"
#include "common/rpc.h"
#include "common/tls.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "node_agent/local_objects.h"
#include "node_agent/object_transfer.h"
#include "node_agent/object_transfer_service.h"
#include "node_agent/tls_bootstrap.h"
#include "proto/scheduler.grpc.pb.h"

namespace drover::bench {
namespace {

[[noreturn]] void Die(const std::string& msg) {
  std::cerr << "object_store_node: " << msg << std::endl;
  std::exit(1);
}

// LocalObjects over one pre-touched heap region, reusing freed space as the store's arena
// does. (Not the store client: a binary linking both proto/object_store.proto and
// proto/scheduler.proto does not link today, both define drover.proto.ObjectLocation.)
class PoolObjects final : public LocalObjects {
 public:
  explicit PoolObjects(uint64_t capacity) : capacity_(capacity) {
    void* p = mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (p == MAP_FAILED) Die("mmap of the object pool failed");
    base_ = static_cast<uint8_t*>(p);
    std::memset(base_, 0, capacity);  // touch every page once
  }

  bool Contains(const std::string& id) override {
    absl::MutexLock lock(&mu_);
    auto it = objects_.find(id);
    return it != objects_.end() && it->second.sealed;
  }
  absl::StatusOr<ReadView> Acquire(const std::string& id) override {
    absl::MutexLock lock(&mu_);
    auto it = objects_.find(id);
    if (it == objects_.end() || !it->second.sealed) return absl::NotFoundError("no " + id);
    ++it->second.pins;
    return ReadView{base_ + it->second.offset, it->second.size, it->second.metadata};
  }
  void Release(const std::string& id) override {
    absl::MutexLock lock(&mu_);
    auto it = objects_.find(id);
    if (it != objects_.end() && it->second.pins > 0) --it->second.pins;
  }
  absl::StatusOr<WriteView> CreateSecondary(const std::string& id, int64_t size,
                                            const std::string& metadata) override {
    absl::MutexLock lock(&mu_);
    if (objects_.count(id)) return absl::AlreadyExistsError(id + " exists");
    // First fit over the gaps between allocations (64-byte aligned).
    uint64_t want = (static_cast<uint64_t>(size) + 63) & ~uint64_t{63};
    uint64_t at = 0;
    for (const auto& [off, len] : used_) {
      if (off - at >= want) break;
      at = (off + len + 63) & ~uint64_t{63};
    }
    if (at + want > capacity_) return absl::ResourceExhaustedError("pool full");
    used_[at] = want;
    objects_[id] = Object{at, size, metadata, false, 0};
    return WriteView{base_ + at, size};
  }
  absl::Status Seal(const std::string& id) override {
    absl::MutexLock lock(&mu_);
    auto it = objects_.find(id);
    if (it == objects_.end()) return absl::NotFoundError(id);
    it->second.sealed = true;
    return absl::OkStatus();
  }
  void Abort(const std::string& id) override { (void)Delete(id); }  // absent is fine

  absl::Status Delete(const std::string& id) {
    absl::MutexLock lock(&mu_);
    auto it = objects_.find(id);
    if (it == objects_.end()) return absl::NotFoundError(id);
    if (it->second.pins > 0) return absl::FailedPreconditionError(id + " is pinned");
    used_.erase(it->second.offset);
    objects_.erase(it);
    return absl::OkStatus();
  }

 private:
  struct Object {
    uint64_t offset;
    int64_t size;
    std::string metadata;
    bool sealed;
    int pins;
  };
  const uint64_t capacity_;
  uint8_t* base_;
  absl::Mutex mu_;
  std::map<uint64_t, uint64_t> used_ ABSL_GUARDED_BY(mu_);  // offset -> bytes
  std::map<std::string, Object> objects_ ABSL_GUARDED_BY(mu_);
};

void FillPattern(uint8_t* p, uint64_t n, uint64_t seed) {
  uint64_t x = seed;
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
    z ^= z >> 31;
    std::memcpy(p + i, &z, 8);
  }
  for (; i < n; ++i) p[i] = static_cast<uint8_t>(i);
}

uint64_t Checksum(const uint8_t* p, uint64_t n) {
  uint64_t h = 14695981039346656037ULL;
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ULL;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

int EchoMain(const std::string& path) {
  int l = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", path.c_str());
  ::unlink(path.c_str());
  if (bind(l, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(l, 4) != 0) {
    Die(absl::StrCat("cannot listen on ", path, ": ", std::strerror(errno)));
  }
  std::cout << "ready" << std::endl;
  while (true) {
    int c = accept(l, nullptr, nullptr);
    if (c < 0) continue;
    char buf[64];
    while (true) {
      size_t got = 0;
      while (got < sizeof(buf)) {
        ssize_t n = read(c, buf + got, sizeof(buf) - got);
        if (n <= 0) break;
        got += static_cast<size_t>(n);
      }
      if (got < sizeof(buf)) break;
      if (write(c, buf, sizeof(buf)) != static_cast<ssize_t>(sizeof(buf))) break;
    }
    close(c);
  }
}

struct Node {
  std::unique_ptr<PoolObjects> local;
  std::unique_ptr<ObjectTransfer> transfer;
  std::unique_ptr<ObjectTransferService> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<proto::Scheduler::Stub> scheduler;
  std::string token;
  std::string node_id;
  std::string address;
};

void Announce(Node& n, const std::string& id, int64_t size) {
  proto::AddObjectLocationsRequest req;
  req.set_node_id(n.node_id);
  auto* o = req.add_objects();
  o->set_object_id(id);
  o->set_size(size);
  proto::AddObjectLocationsReply reply;
  grpc::ClientContext ctx;
  PrepareContext(&ctx, n.token);
  grpc::Status s = n.scheduler->AddObjectLocations(&ctx, req, &reply);
  if (!s.ok()) Die("AddObjectLocations: " + s.error_message());
}

std::string Command(Node& n, const std::string& line) {
  std::istringstream in(line);
  std::string cmd, id;
  in >> cmd;
  if (cmd == "put") {
    uint64_t bytes = 0;
    in >> id >> bytes;
    auto obj = n.local->CreateSecondary(id, static_cast<int64_t>(bytes), "bench-meta");
    if (!obj.ok()) return "err " + obj.status().ToString();
    FillPattern(obj->data, bytes, 7);
    if (auto s = n.local->Seal(id); !s.ok()) return "err " + s.ToString();
    Announce(n, id, static_cast<int64_t>(bytes));
    return "ok";
  }
  if (cmd == "fetch") {
    in >> id;
    absl::Time t0 = absl::Now();
    auto r = n.transfer->Fetch(id, absl::Now() + absl::Minutes(5));
    double sec = absl::ToDoubleSeconds(absl::Now() - t0);
    if (!r.ok()) return "err " + r.status().ToString();
    return absl::StrCat("ok ", sec, " ", r->size);
  }
  if (cmd == "stats") {
    const ObjectTransferStats st = n.transfer->stats();
    return absl::StrCat("ok ", st.raw_pulls, " ", st.raw_reads);
  }
  if (cmd == "drop") {
    in >> id;
    if (auto s = n.local->Delete(id); !s.ok()) return "err " + s.ToString();
    return "ok";
  }
  if (cmd == "sum") {
    in >> id;
    auto v = n.local->Acquire(id);
    if (!v.ok()) return "err " + v.status().ToString();
    uint64_t sum = Checksum(v->data, static_cast<uint64_t>(v->size));
    n.local->Release(id);
    return absl::StrCat("ok ", sum);
  }
  if (cmd == "tcp_serve") {
    in >> id;
    auto v = n.local->Acquire(id);
    if (!v.ok()) return "err " + v.status().ToString();
    int l = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (bind(l, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(l, 1) != 0 ||
        getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      return absl::StrCat("err listen: ", std::strerror(errno));
    }
    PoolObjects* local = n.local.get();
    ReadView view = *v;
    std::thread([l, local, id, view] {
      int c = accept(l, nullptr, nullptr);
      close(l);
      if (c >= 0) {
        auto conn = ProcessTransport()->ServerEnd(c, "the tcp_recv peer");
        if (conn.ok()) (void)(*conn)->WriteAll(view.data, static_cast<size_t>(view.size));
      }
      local->Release(id);
    }).detach();
    return absl::StrCat("ok ", ntohs(a.sin_port));
  }
  if (cmd == "tcp_recv") {
    int port = 0;
    uint64_t bytes = 0;
    in >> port >> bytes;
    std::string tmp = "tcp-baseline";
    auto obj = n.local->CreateSecondary(tmp, static_cast<int64_t>(bytes), "");
    if (!obj.ok()) return "err " + obj.status().ToString();
    const std::string where = absl::StrCat("127.0.0.1:", port);
    absl::Time t0 = absl::Now();
    auto fd = ConnectTcp(where, absl::Now() + absl::Seconds(10));
    auto conn = fd.ok() ? ProcessTransport()->ClientEnd(*fd, where, absl::Now() + absl::Seconds(10))
                        : fd.status();
    if (!conn.ok()) {
      n.local->Abort(tmp);
      return absl::StrCat("err connect: ", conn.status().ToString());
    }
    uint64_t got = 0;
    while (got < bytes) {
      auto k = (*conn)->Read(obj->data + got, bytes - got);
      if (!k.ok() || *k == 0) break;
      got += *k;
    }
    double sec = absl::ToDoubleSeconds(absl::Now() - t0);
    conn->reset();
    n.local->Abort(tmp);
    if (got != bytes) return absl::StrCat("err received ", got, " of ", bytes);
    return absl::StrCat("ok ", sec);
  }
  return "err unknown command: " + line;
}

int NodeMain(uint64_t pool_bytes, const std::string& scheduler,
             const std::string& token_file, bool raw_tcp, const std::string& tls_ca) {
  Node n;
  auto token = ReadTokenFile(token_file);
  if (!token.ok()) Die(token.status().ToString());
  n.token = *token;
  SetProcessTransport(TransportSecurity::Plaintext());
  if (!tls_ca.empty()) {
    NodeCertificateRequest req;
    req.scheduler_address = scheduler;
    req.token = n.token;
    req.ca_file = tls_ca;
    req.dir = absl::StrCat(token_file.substr(0, token_file.rfind('/')), "/node-", getpid());
    req.common_name = absl::StrCat("bench node ", getpid());
    auto files = ObtainNodeCertificate(req);
    auto transport = files.ok() ? TransportSecurity::Load(*files) : files.status();
    if (!transport.ok()) Die("TLS: " + transport.status().ToString());
    SetProcessTransport(*transport);
  }
  n.local = std::make_unique<PoolObjects>(pool_bytes);
  ObjectTransferOptions o;
  o.token = n.token;
  o.scheduler_address = scheduler;
  o.raw_tcp = raw_tcp;
  n.transfer = std::make_unique<ObjectTransfer>(o, n.local.get());
  n.service = std::make_unique<ObjectTransferService>(n.token, n.transfer.get());
  grpc::ServerBuilder b;
  int port = 0;
  AddListeningPort(&b, "127.0.0.1:0", &port);
  ObjectTransfer::ConfigureServer(&b);
  b.RegisterService(n.service.get());
  n.server = b.BuildAndStart();
  if (n.server == nullptr || port == 0) Die("cannot start the gRPC server");
  n.address = absl::StrCat("127.0.0.1:", port);

  n.scheduler = proto::Scheduler::NewStub(MakeChannel(scheduler));
  proto::RegisterNodeRequest req;
  char host[256] = "bench";
  gethostname(host, sizeof(host) - 1);
  req.set_hostname(absl::StrCat(host, "-", getpid()));
  req.set_agent_address(n.address);
  req.set_node_ip("127.0.0.1");
  req.mutable_total()->set_cpus(1);
  proto::RegisterNodeReply reply;
  grpc::ClientContext ctx;
  PrepareContext(&ctx, n.token);
  grpc::Status s = n.scheduler->RegisterNode(&ctx, req, &reply);
  if (!s.ok()) Die("RegisterNode: " + s.error_message());
  n.node_id = reply.node_id();
  n.transfer->SetNodeId(n.node_id);
  std::cout << "ready " << n.address << " " << n.node_id << std::endl;

  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == "quit") break;
    std::cout << Command(n, line) << std::endl;
  }
  n.server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  n.transfer->Shutdown();
  std::_Exit(0);  // skip tearing down gRPC and the mapping (seconds for 3 GiB)
}

}  // namespace
}  // namespace drover::bench

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  std::string echo, scheduler, token_file, tls_ca;
  uint64_t pool = 0;
  int raw_tcp = 1;
  CLI::App app{"object_store_node: a node of the pull figure, or the echo peer"};
  app.add_option("--echo", echo, "Serve 64-byte echoes on this Unix socket and nothing else");
  app.add_option("--pool-bytes", pool, "Bytes of the node's pre-touched object pool");
  app.add_option("--scheduler", scheduler, "The scheduler's address");
  app.add_option("--token-file", token_file, "The cluster token");
  app.add_option("--raw-tcp", raw_tcp, "1: pulls take the raw TCP data path; 0: gRPC only")
      ->check(CLI::Range(0, 1));
  app.add_option("--tls-ca", tls_ca, "The TLS scheduler's CA certificate (default: plain text)");
  CLI11_PARSE(app, argc, argv);
  if (!echo.empty()) return drover::bench::EchoMain(echo);
  if (pool == 0 || scheduler.empty() || token_file.empty()) {
    drover::bench::Die("usage: --echo SOCKET | --pool-bytes N --scheduler ADDR --token-file F");
  }
  return drover::bench::NodeMain(pool, scheduler, token_file, raw_tcp, tls_ca);
}
