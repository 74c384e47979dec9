#include "tests/util/netns_network.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/files.h"
#include "common/spawn.h"

namespace drover::testing {
namespace {

// Each namespace's end of its veth pair: the same name on every node, like eth0 on
// real machines (the pair is created with that end already inside the namespace).
constexpr const char* kNodeIf = "drv0";
constexpr const char* kNetnsPrefix = "drover-test-";
constexpr int kMaxNodes = 26;

std::string FindIpTool() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  return "";
}

std::string NodeLetter(int node) { return std::string(1, static_cast<char>('a' + node)); }

// Namespace names carry the pid; link names (at most 15 chars) carry pid % 100000.
std::string NetnsName(int pid, int node) {
  return absl::StrCat(kNetnsPrefix, pid, "-", NodeLetter(node));
}
// "drvb12345" (the bridge), "drvh12345a" (node 0's host end).
std::string LinkName(const std::string& kind, int tag, int node = -1) {
  return absl::StrCat(kind, tag, node < 0 ? "" : NodeLetter(node));
}

}  // namespace

CmdResult RunCmd(const std::vector<std::string>& argv) {
  static int n = 0;
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string out = absl::StrCat(tmp ? tmp : "/tmp", "/cmd-", getpid(), "-", n++, ".out");
  ::unlink(out.c_str());
  SpawnOptions o;
  o.argv = argv;
  o.stdout_path = o.stderr_path = out;
  CmdResult r;
  auto pid = Spawn(o);
  if (!pid.ok()) {
    r.output = std::string(pid.status().message());
    return r;
  }
  int status = 0;
  while (::waitpid(*pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.output = ReadFile(out).value_or("");
  ::unlink(out.c_str());
  return r;
}

absl::StatusOr<std::unique_ptr<NetnsNetwork>> NetnsNetwork::Create(int nodes) {
  if (::geteuid() != 0) {
    return absl::FailedPreconditionError(
        "needs root to create network namespaces, veth pairs and a bridge");
  }
  if (nodes < 1 || nodes > kMaxNodes) {
    return absl::InvalidArgumentError(absl::StrCat("NetnsNetwork: ", nodes, " nodes; 1 to ",
                                                   kMaxNodes));
  }
  std::unique_ptr<NetnsNetwork> net(new NetnsNetwork);
  net->ip_ = FindIpTool();
  if (net->ip_.empty()) {
    return absl::FailedPreconditionError("the `ip` tool (iproute2) is not installed");
  }
  if (absl::Status s = net->Setup(nodes); !s.ok()) return s;
  return net;
}

NetnsNetwork::~NetnsNetwork() { Remove(); }

CmdResult NetnsNetwork::Ip(std::vector<std::string> args) const {
  args.insert(args.begin(), ip_);
  return RunCmd(args);
}

absl::Status NetnsNetwork::Setup(int nodes) {
  const int pid = ::getpid();
  RemoveStale();
  for (int i = 0; i < 100 && bridge_.empty(); ++i) {
    const int tag = (pid + i) % 100000;
    bool free = !LinkExists(LinkName("drvb", tag));
    for (int n = 0; n < nodes && free; ++n) free = !LinkExists(LinkName("drvh", tag, n));
    if (!free) continue;
    bridge_ = LinkName("drvb", tag);
    for (int n = 0; n < nodes; ++n) host_veth_.push_back(LinkName("drvh", tag, n));
  }
  if (bridge_.empty()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("drvb", pid % 100000, " and the next 99 bridge names exist"));
  }
  for (int i = 0; i < nodes; ++i) netns_.push_back(NetnsName(pid, i));

  // A /24 no other interface uses (a concurrent run may hold the one our pid maps to).
  int k = -1;
  for (int i = 0; i < 254 && k < 0; ++i) {
    int candidate = (pid + i) % 254 + 1;
    CmdResult r =
        Ip({"-4", "-o", "addr", "show", "to", absl::StrCat("10.213.", candidate, ".0/24")});
    if (r.code != 0) return absl::InternalError("ip addr show: " + r.output);
    if (r.output.find_first_not_of(" \n") == std::string::npos) k = candidate;
  }
  if (k < 0) return absl::ResourceExhaustedError("every 10.213.*.0/24 subnet is in use");
  subnet_ = absl::StrCat("10.213.", k, ".");
  host_ip_ = subnet_ + "1";
  for (int i = 0; i < nodes; ++i) node_ip_.push_back(absl::StrCat(subnet_, 2 + i));

  created_ = true;  // from here on the destructor removes whatever got created
  std::vector<std::vector<std::string>> steps = {
      {"link", "add", bridge_, "type", "bridge"},
      {"addr", "add", host_ip_ + "/24", "dev", bridge_},
      {"link", "set", bridge_, "up"},
  };
  for (int i = 0; i < nodes; ++i) {
    std::vector<std::vector<std::string>> node = {
        {"netns", "add", netns_[i]},
        {"link", "add", host_veth_[i], "type", "veth", "peer", "name", kNodeIf, "netns",
         netns_[i]},
        {"link", "set", host_veth_[i], "master", bridge_},
        {"link", "set", host_veth_[i], "up"},
        {"-n", netns_[i], "link", "set", "lo", "up"},
        {"-n", netns_[i], "addr", "add", node_ip_[i] + "/24", "dev", kNodeIf},
        {"-n", netns_[i], "link", "set", kNodeIf, "up"},
    };
    steps.insert(steps.end(), node.begin(), node.end());
  }
  for (const auto& args : steps) {
    CmdResult r = Ip(args);
    if (r.code != 0) {
      return absl::InternalError(absl::StrCat("ip ", absl::StrJoin(args, " "), ": ", r.output));
    }
  }
  return absl::OkStatus();
}

absl::Status NetnsNetwork::SetNodeLink(int i, bool up) {
  if (i < 0 || i >= static_cast<int>(host_veth_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("no node ", i, " in this network"));
  }
  CmdResult r = Ip({"link", "set", host_veth_[i], up ? "up" : "down"});
  if (r.code != 0) {
    return absl::InternalError(absl::StrCat("ip link set ", host_veth_[i], ": ", r.output));
  }
  return absl::OkStatus();
}

bool NetnsNetwork::AnythingLeft() const {
  for (const auto& ns : netns_) {
    if (Ip({"netns", "pids", ns}).code == 0) return true;
  }
  for (const auto& v : host_veth_) {
    if (LinkExists(v)) return true;
  }
  return LinkExists(bridge_);
}

// Best effort: each step may find nothing to remove. Deleting one end of a veth pair
// deletes both, so the links go at once instead of when the namespace is freed.
void NetnsNetwork::Remove() {
  if (!created_) return;
  created_ = false;
  for (const auto& v : host_veth_) Ip({"link", "del", v});
  Ip({"link", "del", bridge_});
  for (const auto& ns : netns_) Ip({"netns", "del", ns});
}

// Removes what runs killed before their cleanup (e.g. by a test timeout) left: the
// namespaces of pids that no longer exist, and their links unless a live run shares
// the link names (pid % 100000).
void NetnsNetwork::RemoveStale() {
  const int self = ::getpid();  // namespaces with our pid are from an earlier process
  std::set<int> dead;
  std::set<int> live_tags;
  for (absl::string_view line : absl::StrSplit(Ip({"netns", "list"}).output, '\n')) {
    absl::string_view name = line.substr(0, line.find(' '));
    if (!absl::ConsumePrefix(&name, kNetnsPrefix)) continue;
    int pid = 0;
    if (!absl::SimpleAtoi(name.substr(0, name.find('-')), &pid) || pid <= 0) continue;
    if (pid != self && (::kill(pid, 0) == 0 || errno != ESRCH)) {
      live_tags.insert(pid % 100000);
    } else {
      dead.insert(pid);
    }
  }
  for (int pid : dead) {
    if (!live_tags.count(pid % 100000)) {
      for (int i = 0; i < kMaxNodes; ++i) {
        if (Ip({"link", "del", LinkName("drvh", pid % 100000, i)}).code != 0) break;
      }
      Ip({"link", "del", LinkName("drvb", pid % 100000)});
    }
    for (int i = 0; i < kMaxNodes; ++i) {
      if (Ip({"netns", "pids", NetnsName(pid, i)}).code != 0) break;
      Ip({"netns", "del", NetnsName(pid, i)});
    }
  }
}

}  // namespace drover::testing
