#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "common/auth.h"
#include "common/env.h"
#include "common/files.h"
#include "common/net.h"
#include "common/spawn.h"
#include "gtest/gtest.h"

namespace drover {
namespace {

std::string TmpPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

TEST(AuthTest, TokenFileIsCreatedOwnerOnlyAndReadBack) {
  std::string path = TmpPath("sub/token");
  auto t1 = LoadOrCreateTokenFile(path);
  ASSERT_TRUE(t1.ok()) << t1.status();
  EXPECT_EQ(t1->size(), 64u);
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto t2 = LoadOrCreateTokenFile(path);
  ASSERT_TRUE(t2.ok());
  EXPECT_EQ(*t1, *t2);
  EXPECT_NE(GenerateToken(), GenerateToken());
}

TEST(AuthTest, WorldReadableTokenFileIsRefused) {
  std::string path = TmpPath("open-token");
  ASSERT_TRUE(WriteFileAtomic(path, "abc\n", 0644).ok());
  auto t = ReadTokenFile(path);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("chmod 600"), std::string::npos) << t.status();
}

TEST(FilesTest, TailFileCutsToWholeLinesAndRespectsOffset) {
  std::string path = TmpPath("tail.txt");
  ASSERT_TRUE(WriteFileAtomic(path, "line one\nline two\nline three\n").ok());
  EXPECT_EQ(TailFile(path, 0, 1000), "line one\nline two\nline three\n");
  EXPECT_EQ(TailFile(path, 0, 15), "line three\n");
  EXPECT_EQ(TailFile(path, 18, 1000), "line three\n");
  EXPECT_EQ(TailFile(TmpPath("missing"), 0, 100), "");
}

TEST(NetTest, ParseHostPortRejectsBadInput) {
  auto ok = ParseHostPort("10.0.0.1:6379");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->host, "10.0.0.1");
  EXPECT_EQ(ok->port, 6379);
  EXPECT_FALSE(ParseHostPort("nohost").ok());
  EXPECT_FALSE(ParseHostPort("h:0").ok());
  EXPECT_TRUE(ParseHostPort("h:0", /*allow_zero=*/true).ok());
  EXPECT_FALSE(ParseHostPort("h:70000").ok());
  EXPECT_FALSE(ParseHostPort("h:x").ok());
}

TEST(NetTest, PickFreePortAndLoopbackRoute) {
  auto port = PickFreePort("127.0.0.1");
  ASSERT_TRUE(port.ok());
  EXPECT_GT(*port, 0);
  auto local = LocalAddressFor("127.0.0.1");
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ(*local, "127.0.0.1");
}

TEST(SpawnTest, ReportsExitCodeSignalAndMissingCommand) {
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", "exit 7"};
  auto pid = Spawn(o);
  ASSERT_TRUE(pid.ok());
  int status = 0;
  ASSERT_EQ(::waitpid(*pid, &status, 0), *pid);
  EXPECT_EQ(DescribeWaitStatus(status), "exit code 7");

  o.argv = {"/bin/sh", "-c", "kill -SEGV $$"};
  o.new_process_group = true;
  pid = Spawn(o);
  ASSERT_TRUE(pid.ok());
  ASSERT_EQ(::waitpid(*pid, &status, 0), *pid);
  EXPECT_EQ(DescribeWaitStatus(status), "killed by SIGSEGV");

  o.argv = {"drover-no-such-command-xyz"};
  auto missing = Spawn(o);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("drover-no-such-command-xyz"), std::string::npos);
}

TEST(SpawnTest, RedirectsOutputAndSetsProcessGroup) {
  std::string out = TmpPath("spawn.out");
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", "echo pgid=$(ps -o pgid= $$ | tr -d ' ') pid=$$"};
  o.stdout_path = out;
  o.new_process_group = true;
  auto pid = Spawn(o);
  ASSERT_TRUE(pid.ok());
  int status = 0;
  ::waitpid(*pid, &status, 0);
  auto text = ReadFile(out);
  ASSERT_TRUE(text.ok());
  std::string want = "pgid=" + std::to_string(*pid) + " pid=" + std::to_string(*pid) + "\n";
  EXPECT_EQ(*text, want);
}

TEST(EnvTest, UnsetReadsAsTheFallbackAndSetToEmptyAsEmpty) {
  ::unsetenv("DROVER_ENV_TEST_VAR");
  EXPECT_EQ(Env("DROVER_ENV_TEST_VAR"), "");
  EXPECT_EQ(Env("DROVER_ENV_TEST_VAR", "dflt"), "dflt");
  ::setenv("DROVER_ENV_TEST_VAR", "", 1);
  EXPECT_EQ(Env("DROVER_ENV_TEST_VAR", "dflt"), "");
  ::setenv("DROVER_ENV_TEST_VAR", "v", 1);
  EXPECT_EQ(Env("DROVER_ENV_TEST_VAR", "dflt"), "v");
  ::unsetenv("DROVER_ENV_TEST_VAR");
}

}  // namespace
}  // namespace drover
