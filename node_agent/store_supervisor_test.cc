// StoreSupervisor with the real drover-object-store binary.
#include "node_agent/store_supervisor.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "common/files.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "object_store/client.h"
#include "tests/util/test_util.h"

namespace drover {
namespace {

using ::drover::testing::Runfile;
using ::drover::testing::WaitFor;

// Unix socket paths must be short; TEST_TMPDIR may not be.
class ShortDir {
 public:
  ShortDir() {
    char tmpl[] = "/tmp/drover-sup-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~ShortDir() {
    std::string cmd = "rm -rf '" + path_ + "'";
    (void)!system(cmd.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

StoreSupervisorOptions Options(const ShortDir& dir) {
  StoreSupervisorOptions o;
  o.binary = Runfile("object_store/drover-object-store");
  o.socket_path = dir.path() + "/store.sock";
  o.capacity = 16 << 20;
  o.log_path = dir.path() + "/store.log";
  o.min_restart_pause = absl::Milliseconds(10);
  return o;
}

bool Alive(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

TEST(StoreSupervisorTest, StartsServesRestartsAfterACrashAndStops) {
  ShortDir dir;
  StoreSupervisor sup(Options(dir));
  ASSERT_TRUE(sup.Start().ok());
  pid_t first = sup.pid();
  ASSERT_GT(first, 0);
  {
    auto client = object_store::Client::Connect(sup.socket_path());
    ASSERT_TRUE(client.ok()) << client.status();
    EXPECT_EQ((*client)->arena_capacity(), 16u << 20);
    ASSERT_TRUE((*client)->Put("x", std::string("hello")).ok());
  }
  ASSERT_EQ(kill(first, SIGKILL), 0);
  ASSERT_TRUE(WaitFor([&] {
    return sup.restarts() == 1 && sup.pid() > 0 && sup.pid() != first &&
           object_store::Client::Connect(sup.socket_path()).ok();
  })) << ReadFile(dir.path() + "/store.log").value_or("");
  // A restarted store is a new, empty one.
  auto client = object_store::Client::Connect(sup.socket_path());
  ASSERT_TRUE(client.ok());
  EXPECT_FALSE(*(*client)->Contains("x"));
  pid_t second = sup.pid();
  sup.Stop();
  EXPECT_EQ(sup.pid(), 0);
  EXPECT_FALSE(Alive(second)) << "the store must be stopped and reaped";
  EXPECT_FALSE(Alive(first));
  EXPECT_NE(access(sup.socket_path().c_str(), F_OK), 0) << "a stopped store removes its socket";
}

TEST(StoreSupervisorTest, StoreThatCannotStartFailsStartWithItsLog) {
  ShortDir dir;
  StoreSupervisorOptions o = Options(dir);
  // A regular file where the socket should be: the store refuses to start.
  ASSERT_TRUE(WriteFileAtomic(o.socket_path, "not a socket").ok());
  StoreSupervisor sup(o);
  absl::Status s = sup.Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("not a socket"), absl::string_view::npos) << s;
  EXPECT_EQ(sup.pid(), 0);
}

TEST(StoreSupervisorTest, MissingBinaryIsFailedPrecondition) {
  ShortDir dir;
  StoreSupervisorOptions o = Options(dir);
  o.binary = dir.path() + "/no-such-store";
  StoreSupervisor sup(o);
  absl::Status s = sup.Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
}

TEST(StoreSocketPathTest, ShortDirectoryHoldsTheSocketElseAFreshTmpDirectory) {
  ShortDir dir;
  auto short_path = StoreSocketPath(dir.path() + "/agent-1");
  ASSERT_TRUE(short_path.ok()) << short_path.status();
  EXPECT_EQ(*short_path, dir.path() + "/agent-1/store.sock");
  const std::string longdir = dir.path() + "/" + std::string(120, 'd');
  auto a = StoreSocketPath(longdir);
  auto b = StoreSocketPath(longdir);
  ASSERT_TRUE(a.ok() && b.ok());
  const std::string tmp = "/tmp/drover-" + std::to_string(getuid()) + "/store-";
  EXPECT_EQ(a->rfind(tmp, 0), 0u) << *a;
  EXPECT_LT(a->size(), 100u);
  // Two agents never share one (pids repeat across pid namespaces; these do not).
  EXPECT_NE(*a, *b);
  for (const auto& p : {*a, *b}) ::rmdir(p.substr(0, p.rfind('/')).c_str());
}

}  // namespace
}  // namespace drover
