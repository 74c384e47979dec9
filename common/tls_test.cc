// The cluster CA, TLS files, TLS ends of raw sockets and gRPC credentials, with real
// sockets and a real gRPC server on loopback.
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/framed_socket.h"
#include "common/net.h"
#include "common/openssl_pem.h"
#include "common/rpc.h"
#include "common/tls.h"
#include "common/tls_ca.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "openssl/pem.h"
#include "openssl/rsa.h"
#include "proto/scheduler.grpc.pb.h"

namespace drover {
namespace {

std::string TmpDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  static int n = 0;
  return absl::StrCat(t != nullptr ? t : "/tmp", "/tls-", ::getpid(), "-", n++);
}

int Mode(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int>(st.st_mode & 0777) : -1;
}

// A CA and a member's files in a fresh directory.
struct Cluster {
  std::string dir = TmpDir();
  std::unique_ptr<CertificateAuthority> ca;
  std::shared_ptr<const TransportSecurity> member;  // with an identity
  std::shared_ptr<const TransportSecurity> client;  // the CA only

  Cluster() {
    auto c = CertificateAuthority::LoadOrCreate(dir);
    EXPECT_TRUE(c.ok()) << c.status();
    ca = *std::move(c);
    auto files = ca->IssueFiles(dir, "member");
    EXPECT_TRUE(files.ok()) << files.status();
    auto m = TransportSecurity::Load(*files);
    EXPECT_TRUE(m.ok()) << m.status();
    member = *m;
    auto cl = TransportSecurity::Load(TlsFiles{ca->cert_path(), "", ""});
    EXPECT_TRUE(cl.ok()) << cl.status();
    client = *cl;
  }
};

TEST(CertificateAuthorityTest, CreatesOwnerOnlyKeysAndLoadsTheSameCaAgain) {
  Cluster c;
  EXPECT_EQ(Mode(c.dir), 0700);
  EXPECT_EQ(Mode(c.dir + "/ca.key"), 0600);
  EXPECT_EQ(Mode(c.dir + "/member.key"), 0600);
  auto again = CertificateAuthority::LoadOrCreate(c.dir);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->cert_pem(), c.ca->cert_pem());
}

TEST(CertificateAuthorityTest, RefusesAnIncompleteCaAndAReadableKey) {
  Cluster c;
  ::chmod((c.dir + "/ca.key").c_str(), 0644);
  auto loose = CertificateAuthority::LoadOrCreate(c.dir);
  EXPECT_EQ(loose.status().code(), absl::StatusCode::kPermissionDenied) << loose.status();
  EXPECT_NE(loose.status().message().find("chmod 600"), std::string::npos);
  ::unlink((c.dir + "/ca.key").c_str());
  auto half = CertificateAuthority::LoadOrCreate(c.dir);
  EXPECT_EQ(half.status().code(), absl::StatusCode::kFailedPrecondition) << half.status();
  EXPECT_NE(half.status().message().find("ca.key is missing"), std::string::npos) << half.status();
}

TEST(CertificateAuthorityTest, IssuesOnlyForRequestsWhoseSignatureChecks) {
  Cluster c;
  EXPECT_EQ(c.ca->Issue("not a request").status().code(), absl::StatusCode::kInvalidArgument);
  auto kr = NewKeyAndRequest("node-x");
  ASSERT_TRUE(kr.ok()) << kr.status();
  // Flip a character inside the request's base64 body: its signature no longer checks
  // (or it no longer parses).
  std::string forged = kr->csr_pem;
  const size_t at = forged.find('\n') + 40;
  forged[at] = forged[at] == 'A' ? 'B' : 'A';
  EXPECT_EQ(c.ca->Issue(forged).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(c.ca->Issue(kr->csr_pem).ok());
}

TEST(CertificateAuthorityTest, RefusesAWeakKey) {
  Cluster c;
  KeyPtr weak(EVP_RSA_gen(1024));
  RequestPtr req(X509_REQ_new());
  ASSERT_TRUE(X509_REQ_set_pubkey(req.get(), weak.get()));
  ASSERT_TRUE(X509_REQ_sign(req.get(), weak.get(), EVP_sha256()));
  BioPtr bio(BIO_new(BIO_s_mem()));
  ASSERT_TRUE(PEM_write_bio_X509_REQ(bio.get(), req.get()));
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  auto cert = c.ca->Issue(std::string(data, n));
  EXPECT_EQ(cert.status().code(), absl::StatusCode::kInvalidArgument) << cert.status();
  EXPECT_NE(cert.status().message().find("too weak"), std::string::npos) << cert.status();
}

TEST(TransportSecurityTest, LoadChecksTheFiles) {
  Cluster a;
  Cluster b;
  TlsFiles files{a.ca->cert_path(), a.dir + "/member.crt", a.dir + "/member.key"};
  // A certificate of another cluster's CA.
  TlsFiles foreign = files;
  foreign.ca = b.ca->cert_path();
  auto f = TransportSecurity::Load(foreign);
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << f.status();
  EXPECT_NE(f.status().message().find("another cluster"), std::string::npos) << f.status();
  // A key others can read.
  ::chmod(files.key.c_str(), 0640);
  auto loose = TransportSecurity::Load(files);
  EXPECT_EQ(loose.status().code(), absl::StatusCode::kPermissionDenied) << loose.status();
  ::chmod(files.key.c_str(), 0600);
  // The CA file is not a CA.
  TlsFiles not_ca = files;
  not_ca.ca = files.cert;
  EXPECT_FALSE(TransportSecurity::Load(not_ca).ok());
  // A key without its certificate.
  EXPECT_FALSE(TransportSecurity::Load(TlsFiles{files.ca, "", files.key}).ok());
  EXPECT_TRUE(TransportSecurity::Load(files).ok());
  // Children get the same files.
  auto t = TransportSecurity::Load(files);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->Environment().size(), 3u);
  EXPECT_TRUE(TransportSecurity::Plaintext()->Environment().empty());
}

// A TCP listener on loopback whose accepted connections become server ends of
// `security` and echo every frame back.
class EchoServer {
 public:
  explicit EchoServer(std::shared_ptr<const TransportSecurity> security)
      : security_(std::move(security)) {
    auto fd = ListenTcp("127.0.0.1", &port_);
    EXPECT_TRUE(fd.ok()) << fd.status();
    listen_fd_ = *fd;
    thread_ = std::thread([this] {
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;
      auto stream = security_->ServerEnd(fd, "the test client");
      if (!stream.ok()) return;
      FramedSocket sock(*std::move(stream));
      proto::KvSetRequest msg;
      while (sock.Read(&msg).ok()) {
        if (!sock.Send(msg).ok()) break;
      }
    });
  }
  ~EchoServer() {
    ::shutdown(listen_fd_, SHUT_RDWR);
    thread_.join();
    ::close(listen_fd_);
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

 private:
  std::shared_ptr<const TransportSecurity> security_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

TEST(TlsStreamTest, FramesCrossATlsConnectionBothWaysAtOnce) {
  Cluster c;
  EchoServer server(c.member);
  auto sock = FramedSocket::ConnectTcp(server.address(), *c.client);
  ASSERT_TRUE(sock.ok()) << sock.status();
  constexpr int kFrames = 200;
  // One thread writes (frames up to 1 MiB) while this one reads the echoes.
  std::thread writer([&] {
    for (int i = 0; i < kFrames; ++i) {
      proto::KvSetRequest m;
      m.set_key(absl::StrCat("k", i));
      m.set_value(std::string((i * 5171) % (1 << 20), static_cast<char>('a' + i % 26)));
      ASSERT_TRUE((*sock)->Send(m).ok());
    }
  });
  for (int i = 0; i < kFrames; ++i) {
    proto::KvSetRequest m;
    ASSERT_TRUE((*sock)->Read(&m).ok());
    EXPECT_EQ(m.key(), absl::StrCat("k", i));
    EXPECT_EQ(m.value(), std::string((i * 5171) % (1 << 20), static_cast<char>('a' + i % 26)));
  }
  writer.join();
}

TEST(TlsStreamTest, AClientOfAnotherCaRefusesTheServer) {
  Cluster a;
  Cluster b;
  EchoServer server(a.member);
  auto sock = FramedSocket::ConnectTcp(server.address(), *b.client);
  ASSERT_FALSE(sock.ok());
  EXPECT_EQ(sock.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(sock.status().message().find("does not check against this cluster's CA"),
            std::string::npos)
      << sock.status();
}

// A client that trusts both CAs (a CA file may hold several) but presents b's
// certificate to a's server.
std::shared_ptr<const TransportSecurity> Mixed(const Cluster& a, const Cluster& b) {
  const std::string both = b.dir + "/both-cas.crt";
  EXPECT_TRUE(WriteFileAtomic(both, b.ca->cert_pem() + a.ca->cert_pem()).ok());
  auto mixed = TransportSecurity::Load(TlsFiles{both, b.dir + "/member.crt", b.dir + "/member.key"});
  EXPECT_TRUE(mixed.ok()) << mixed.status();
  return *mixed;
}

TEST(TlsStreamTest, TheServerRefusesAClientCertificateOfAnotherCa) {
  Cluster a;
  Cluster b;
  EchoServer server(a.member);
  auto sock = FramedSocket::ConnectTcp(server.address(), *Mixed(a, b));
  // TLS 1.3: the client's handshake ends before the server checks its certificate;
  // the refusal arrives with the first read.
  ASSERT_TRUE(sock.ok()) << sock.status();
  proto::KvSetRequest m;
  m.set_key("k");
  (void)(*sock)->Send(m);
  absl::Status read = (*sock)->Read(&m);
  EXPECT_EQ(read.code(), absl::StatusCode::kUnavailable) << read;
  EXPECT_NE(read.message().find("alert"), std::string::npos) << read;
}

TEST(TlsStreamTest, ShutdownWakesABlockedTlsRead) {
  Cluster c;
  EchoServer server(c.member);
  auto sock = FramedSocket::ConnectTcp(server.address(), *c.client);
  ASSERT_TRUE(sock.ok()) << sock.status();
  std::thread reader([&] {
    proto::KvSetRequest m;
    EXPECT_FALSE((*sock)->Read(&m).ok());
  });
  absl::SleepFor(absl::Milliseconds(50));  // let the reader block (not needed for correctness)
  (*sock)->Shutdown();
  reader.join();
}

// A scheduler service that answers GetClusterStatus.
class StatusOnly : public proto::Scheduler::Service {
  grpc::Status GetClusterStatus(grpc::ServerContext*, const proto::GetClusterStatusRequest*,
                                proto::GetClusterStatusReply* reply) override {
    reply->set_state_backend("test");
    return grpc::Status::OK;
  }
};

struct GrpcServer {
  StatusOnly service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  explicit GrpcServer(const TransportSecurity& security) {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", security.ServerCredentials(), &port);
    b.RegisterService(&service);
    server = b.BuildAndStart();
  }
  ~GrpcServer() { server->Shutdown(); }
  std::string address() const { return absl::StrCat("127.0.0.1:", port); }
};

grpc::Status Call(const std::string& address, const TransportSecurity& security) {
  auto stub = proto::Scheduler::NewStub(MakeChannel(address, security));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  proto::GetClusterStatusReply reply;
  return stub->GetClusterStatus(&ctx, proto::GetClusterStatusRequest(), &reply);
}

TEST(GrpcTlsTest, TlsCallsPassAndMismatchesAreExplained) {
  Cluster a;
  Cluster b;
  GrpcServer tls(*a.member);
  GrpcServer plain(*TransportSecurity::Plaintext());
  EXPECT_TRUE(Call(tls.address(), *a.client).ok());
  EXPECT_TRUE(Call(tls.address(), *a.member).ok());  // presenting a certificate
  EXPECT_TRUE(Call(plain.address(), *TransportSecurity::Plaintext()).ok());

  EXPECT_FALSE(Call(tls.address(), *TransportSecurity::Plaintext()).ok());
  std::string why = TransportMismatch(tls.address(), *TransportSecurity::Plaintext());
  EXPECT_NE(why.find("uses TLS"), std::string::npos) << why;
  EXPECT_NE(why.find("--tls-ca"), std::string::npos) << why;

  EXPECT_FALSE(Call(tls.address(), *b.client).ok());
  why = TransportMismatch(tls.address(), *b.client);
  EXPECT_NE(why.find("is not of the cluster whose CA is"), std::string::npos) << why;

  EXPECT_FALSE(Call(tls.address(), *Mixed(a, b)).ok());
  why = TransportMismatch(tls.address(), *Mixed(a, b));
  EXPECT_NE(why.find("refused this process's certificate"), std::string::npos) << why;

  EXPECT_FALSE(Call(plain.address(), *a.client).ok());
  why = TransportMismatch(plain.address(), *a.client);
  EXPECT_NE(why.find("does not use TLS"), std::string::npos) << why;

  EXPECT_EQ(TransportMismatch(tls.address(), *a.client), "");
}

}  // namespace
}  // namespace drover
