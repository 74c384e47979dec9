// Fuzzes the readers of $DROVER_HOME/cluster.json: the CLI's (cli/cluster_file.h, what
// `drover up` and `drover down` act on) and the SDK's (drover::ResolveCluster, which
// every client uses to find the cluster). Whatever the file holds, neither may crash or
// throw; the CLI's reader returns only positive pids, and the SDK's names the address
// the file gives or fails with a message.
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "cli/cluster_file.h"
#include "drover/client.h"

namespace {

// A private DROVER_HOME for this process, made once.
const std::string& Home() {
  static const std::string* home = [] {
    // In memory: the file is written for every input.
    char tmpl[] = "/dev/shm/drover-fuzz-home-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) std::abort();
    setenv("DROVER_HOME", tmpl, 1);
    unsetenv("DROVER_ADDRESS");
    unsetenv("DROVER_TOKEN_FILE");
    std::atexit([] {
      unlink((Home() + "/cluster.json").c_str());
      rmdir(Home().c_str());
    });
    return new std::string(tmpl);
  }();
  return *home;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<drover::cli::ClusterRecord> r =
      drover::cli::ParseClusterRecord(text, "cluster.json");
  if (r.ok()) {
    for (pid_t p : r->agent_pids) {
      if (p <= 0) std::abort();
    }
    if (r->scheduler_pid < 0 || r->redis_pid < 0) std::abort();
  } else if (r.status().code() != absl::StatusCode::kDataLoss) {
    std::abort();
  }

  const std::string path = Home() + "/cluster.json";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.good()) std::abort();
  }
  absl::StatusOr<drover::ClusterAddress> c = drover::ResolveCluster("", "");
  if (c.ok() && c->address.empty()) std::abort();
  if (r.ok() && !r->address.empty() && (!c.ok() || c->address != r->address)) std::abort();
  return 0;
}
