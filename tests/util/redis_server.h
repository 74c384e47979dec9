// A private redis-server for tests: real process, free loopback port, data in a
// directory the test owns (under TEST_TMPDIR).
//
//   auto server = drover::testing::RedisServer::Start(dir);
//   ASSERT_TRUE(server.ok()) << server.status();
//   ... NewRedisStateStore((*server)->host(), (*server)->port(), "test:") ...
//
// The object owns the process: the destructor stops it (SIGTERM, then SIGKILL after
// 5 s) and reaps it. Not thread-safe; use it from the test's main thread.
#ifndef DROVER_TESTS_UTIL_REDIS_SERVER_H_
#define DROVER_TESTS_UTIL_REDIS_SERVER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace drover {
namespace testing {

class RedisServer {
 public:
  // Starts redis-server on a free port of 127.0.0.1 with its working directory (and
  // AOF, if `appendonly`: fsync on every write) in `dir`, which is created if
  // missing, and returns once it answers PING (at most 10 s). Its stdout and stderr
  // go to `dir`/redis-server.log, which error messages quote.
  // FAILED_PRECONDITION if redis-server is not installed. With `with_password`, the
  // server gets a generated password (`requirepass`, through `dir`/redis.conf, mode
  // 600, as `drover up --redis` does): clients must AUTH with password(), which is
  // also in password_file() (mode 600), the file a scheduler's --redis-password-file takes.
  static absl::StatusOr<std::unique_ptr<RedisServer>> Start(const std::string& dir,
                                                            bool appendonly = false,
                                                            bool with_password = false);

  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  const std::string& host() const { return host_; }
  int port() const { return port_; }
  // "127.0.0.1:PORT".
  std::string address() const;
  // "" without a password.
  const std::string& password() const { return password_; }
  // "" without a password.
  std::string password_file() const;
  bool running() const { return pid_ > 0; }
  // The server's pid (-1 while stopped), e.g. to stall it with SIGSTOP.
  pid_t pid() const { return pid_; }

  // Stops the server (SIGTERM, SIGKILL after 5 s) and reaps it. No-op if stopped.
  // Clients then see connection errors until Restart().
  void Stop();
  // Stops the server if it runs, then starts it again on the same port and directory
  // and waits until it answers PING. With appendonly, the data written before is
  // reloaded from the AOF; otherwise the new server starts empty.
  absl::Status Restart();
  // The command line the server was last started with (to start it again elsewhere,
  // e.g. `drover up` bringing a cluster's Redis back in place).
  const std::vector<std::string>& argv() const { return argv_; }
  // The server now runs as `pid`, started by someone else from argv() (it was killed
  // and brought back): Stop and Restart stop that one.
  void Adopt(pid_t pid) { pid_ = pid; }

 private:
  RedisServer(std::string binary, std::string dir, bool appendonly, int port,
              std::string password);

  // Spawns the process on port_ and waits until it answers PING.
  absl::Status Launch();

  const std::string binary_;
  const std::string dir_;
  const bool appendonly_;
  const std::string host_ = "127.0.0.1";
  const int port_;
  const std::string password_;
  pid_t pid_ = -1;
  std::vector<std::string> argv_;
};

}  // namespace testing
}  // namespace drover

#endif  // DROVER_TESTS_UTIL_REDIS_SERVER_H_
