// Test helpers for the object store's integration tests: drover-object-store as a
// child process (StoreProcess) in a short scratch directory, store_tool clients (Tool),
// test patterns and stats helpers. Test-only; each helper is used from one test thread.
#ifndef DROVER_OBJECT_STORE_TESTING_STORE_PROCESS_H_
#define DROVER_OBJECT_STORE_TESTING_STORE_PROCESS_H_

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/types/span.h"
#include "common/files.h"
#include "common/spawn.h"
#include "gtest/gtest.h"
#include "object_store/client.h"
#include "object_store/testing/test_data.h"
#include "object_store/wire_status.h"
#include "proto/object_store.pb.h"
#include "tests/util/proc_stat.h"
#include "tests/util/test_util.h"

namespace drover::object_store::testing {

using ::drover::testing::Runfile;
using ::drover::testing::WaitFor;

inline constexpr uint64_t kMiB = 1ull << 20;

// drover-object-store on `socket`, which a test stops (SIGSTOP), continues, kills and
// starts again on the same path, as the node agent restarts a store that died.
class RestartableStore {
 public:
  explicit RestartableStore(std::string socket) : socket_(std::move(socket)) {}
  // SIGKILL: it also ends a stopped store.
  ~RestartableStore() { Kill(SIGKILL); }
  // Spawns the store; returns its pid (-1, with a test failure, if it cannot).
  pid_t Start() {
    SpawnOptions o;
    o.argv = {Runfile("object_store/drover-object-store"), "--socket", socket_, "--capacity",
              absl::StrCat(64 * kMiB)};
    absl::StatusOr<pid_t> pid = Spawn(o);
    EXPECT_TRUE(pid.ok()) << pid.status();
    pid_ = pid.ok() ? *pid : -1;
    return pid_;
  }
  // Start, then wait until a client can connect.
  bool StartAndWait() {
    return Start() > 0 &&
           WaitFor([&] { return Client::Connect(socket_).ok(); }, absl::Seconds(60));
  }
  // SIGSTOP, and waits (up to 10 s) until the kernel has stopped it: the signal is
  // delivered asynchronously, and a request sent right after could still be answered.
  void Stop() {
    ::kill(pid_, SIGSTOP);
    EXPECT_TRUE(WaitFor(
        [&] {
          std::optional<::drover::testing::ProcStat> stat = ::drover::testing::ReadProcStat(pid_);
          return stat.has_value() && stat->state == 'T';
        },
        absl::Seconds(10)))
        << "the store (pid " << pid_ << ") did not stop";
  }
  void Continue() { ::kill(pid_, SIGCONT); }
  // Sends `sig` and reaps the store.
  void Kill(int sig = SIGKILL) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  const std::string socket_;
  pid_t pid_ = -1;
};

// A short scratch directory: Unix socket paths are limited to 107 bytes, and Bazel's
// TEST_TMPDIR is longer than that on this machine.
class ScratchDir {
 public:
  ScratchDir() {
    char tmpl[] = "/tmp/drover-os-XXXXXX";
    char* d = mkdtemp(tmpl);
    EXPECT_NE(d, nullptr);
    path_ = d ? d : "/tmp";
  }
  ~ScratchDir() {
    std::string cmd = "rm -rf '" + path_ + "'";
    int rc = system(cmd.c_str());
    (void)rc;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::vector<uint8_t> Pattern(uint64_t size, uint64_t seed) {
  std::vector<uint8_t> v(size);
  FillPattern(absl::MakeSpan(v), seed);
  return v;
}

// drover-object-store running as a child process.
class StoreProcess {
 public:
  explicit StoreProcess(uint64_t capacity, bool with_spill = false,
                        uint64_t spill_capacity = 0) {
    socket_ = dir_.path() + "/run/store.sock";
    std::vector<std::string> argv = {Runfile("object_store/drover-object-store"), "--socket",
                                     socket_, "--capacity", absl::StrCat(capacity)};
    if (with_spill) {
      argv.insert(argv.end(), {"--spill-dir", dir_.path() + "/spill", "--spill-capacity",
                               absl::StrCat(spill_capacity)});
    }
    SpawnOptions o;
    o.argv = argv;
    o.stderr_path = dir_.path() + "/store.log";
    absl::StatusOr<pid_t> pid = Spawn(o);
    EXPECT_TRUE(pid.ok()) << pid.status();
    pid_ = pid.ok() ? *pid : -1;
    bool up = WaitFor([&] { return Client::Connect(socket_).ok() || Exited(); });
    EXPECT_TRUE(up && !Exited()) << "store did not start: " << *ReadFile(o.stderr_path);
  }
  ~StoreProcess() { Stop(); }

  bool Exited() {
    if (pid_ < 0) return true;
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exit_status_ = status;
      pid_ = -1;
      return true;
    }
    return false;
  }

  // SIGTERM and wait; returns the wait status.
  int Stop() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status = 0;
      waitpid(pid_, &status, 0);
      exit_status_ = status;
      pid_ = -1;
    }
    return exit_status_;
  }

  const std::string& socket() const { return socket_; }
  const std::string& dir() const { return dir_.path(); }
  pid_t pid() const { return pid_; }
  std::string log() const { return ReadFile(dir_.path() + "/store.log").value_or(""); }

 private:
  ScratchDir dir_;
  std::string socket_;
  pid_t pid_ = -1;
  int exit_status_ = -1;
};

// store_tool as a child process; its stdout goes to a file.
class Tool {
 public:
  Tool(const StoreProcess& store, std::vector<std::string> args) {
    static int counter = 0;
    out_ = store.dir() + "/tool-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
    SpawnOptions o;
    o.argv = {Runfile("object_store/store_tool"), store.socket()};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.stdout_path = out_;
    absl::StatusOr<pid_t> pid = Spawn(o);
    EXPECT_TRUE(pid.ok()) << pid.status();
    pid_ = pid.ok() ? *pid : -1;
  }
  ~Tool() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      Wait();
    }
  }
  // Waits for exit; returns the output's words.
  std::vector<std::string> Wait() {
    if (pid_ > 0) {
      waitpid(pid_, &status_, 0);
      pid_ = -1;
    }
    return absl::StrSplit(ReadFile(out_).value_or(""), absl::ByAnyChar(" \n"),
                          absl::SkipEmpty());
  }
  void Kill() {
    if (pid_ > 0) kill(pid_, SIGKILL);
  }
  int status() const { return status_; }

 private:
  std::string out_;
  pid_t pid_ = -1;
  int status_ = -1;
};

inline std::string Describe(const StoreStats& s) {
  return absl::StrCat("objects=", s.objects, " sealed=", s.sealed, " used=", s.used,
                      " referenced=", s.referenced, " clients=", s.clients,
                      " pending_gets=", s.pending_gets, " spilled=", s.spilled_objects,
                      " leased_bytes=", s.leased_bytes, " leases=", s.leases);
}

inline StoreStats MustStats(Client& c) {
  absl::StatusOr<StoreStats> s = c.Stats();
  EXPECT_TRUE(s.ok()) << s.status();
  return s.value_or(StoreStats{});
}

// Stats once `c` is the only client (earlier connections, such as the start-up probe,
// may still be closing in the store).
inline StoreStats Baseline(Client& c) {
  EXPECT_TRUE(WaitFor([&] { return MustStats(c).clients == 1; }));
  return MustStats(c);
}

// The 4 little-endian bytes of `v` (a frame header).
inline std::string Le32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

inline absl::StatusCode Code(const proto::StoreReply& r) { return ReplyCode(r); }

}  // namespace drover::object_store::testing

#endif  // DROVER_OBJECT_STORE_TESTING_STORE_PROCESS_H_
