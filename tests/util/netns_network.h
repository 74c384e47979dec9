// A small real network for tests: each node gets its own Linux network namespace
// with its own address, joined to the host by a veth pair on a bridge, so nodes
// really have distinct addresses (nothing may quietly assume 127.0.0.1) and a node
// can be cut off (its link taken down) and joined again.
//
//   host ns:  bridge drvb<n> 10.213.<k>.1/24  <- the scheduler, the CLI, the test
//   ns A:     veth drv0      10.213.<k>.2/24  <- agent 0 and its workers
//   ns B:     veth drv0      10.213.<k>.3/24  <- agent 1 and its workers
//
// Needs root, iproute2 (`ip`) and write access to /var/run/netns (which Bazel's
// sandbox mounts read-only: tag such tests "local"). Traffic only ever goes to the
// 10.213.<k>.0/24 addresses it creates.
//
// The object owns what it creates: the destructor removes the namespaces, links and
// bridge (stop the processes inside first). Create() first removes what earlier runs
// killed before their cleanup left behind. Not thread-safe.
#ifndef DROVER_TESTS_UTIL_NETNS_NETWORK_H_
#define DROVER_TESTS_UTIL_NETNS_NETWORK_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace drover::testing {

struct CmdResult {
  int code = -1;       // exit code; 128+N if killed by signal N; -1 if it could not start
  std::string output;  // stdout and stderr together
};

// Runs argv to completion (output through a file under TEST_TMPDIR or /tmp).
CmdResult RunCmd(const std::vector<std::string>& argv);

class NetnsNetwork {
 public:
  // FAILED_PRECONDITION (saying why) without root or `ip`: callers skip or fall back.
  // Other errors: a step of the setup failed (the message quotes `ip`).
  static absl::StatusOr<std::unique_ptr<NetnsNetwork>> Create(int nodes);
  ~NetnsNetwork();
  NetnsNetwork(const NetnsNetwork&) = delete;
  NetnsNetwork& operator=(const NetnsNetwork&) = delete;

  // Namespace names, for TestClusterOptions::netns.
  const std::vector<std::string>& netns() const { return netns_; }
  // The bridge's address: where processes in the namespaces reach the host.
  const std::string& host_ip() const { return host_ip_; }
  const std::vector<std::string>& node_ips() const { return node_ip_; }
  // "10.213.<k>."
  const std::string& subnet() const { return subnet_; }
  const std::string& ip_tool() const { return ip_; }

  // Takes node i's link down (false) or up again (true): while down, nothing reaches
  // the node or leaves it, and its processes keep running (a cut cable).
  absl::Status SetNodeLink(int i, bool up);

  // Runs `ip ARGS...`.
  CmdResult Ip(std::vector<std::string> args) const;
  // True if any namespace, veth or the bridge of this network still exists.
  bool AnythingLeft() const;
  // Removes everything now (the destructor does the same; idempotent).
  void Remove();

 private:
  NetnsNetwork() = default;
  absl::Status Setup(int nodes);
  void RemoveStale();
  bool LinkExists(const std::string& name) const { return Ip({"link", "show", name}).code == 0; }

  std::string ip_;
  std::string bridge_;
  std::vector<std::string> host_veth_, netns_;
  std::string subnet_;
  std::string host_ip_;
  std::vector<std::string> node_ip_;
  bool created_ = false;
};

}  // namespace drover::testing

#endif  // DROVER_TESTS_UTIL_NETNS_NETWORK_H_
