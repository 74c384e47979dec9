// drover-object-store: one node's object store as a process (the node agent, tests or an
// operator supervise it). Thin: parse flags, start the StoreServer, run until
// SIGTERM/SIGINT, stop it (unlinking the socket) and exit 0.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <iostream>
#include <string>

#include "absl/time/time.h"
#include "common/daemon.h"
#include "common/log.h"
#include "common/spawn.h"
#include "object_store/store_server.h"

int main(int argc, char** argv) {
  // Before any thread starts, so only the sigwait below sees the stop signals.
  sigset_t stop_signals = drover::BlockStopSignals();
  drover::SetLogTag("object-store");

  CLI::App app{"drover-object-store: the per-node shared-memory object store"};
  std::string socket_path;
  drover::object_store::ServerOptions o;
  app.add_option("--socket", socket_path,
                 "Unix socket to listen on (created 0600; its directory 0700 if missing)")
      ->required();
  app.add_option("--capacity", o.capacity,
                 "Arena bytes (default: min(30% of RAM, what /dev/shm can hold))");
  app.add_option("--spill-dir", o.spill_dir, "Directory for spilled objects (default: none)");
  app.add_option("--spill-capacity", o.spill_capacity, "Max bytes in the spill directory");
  app.add_flag("--prefault", o.prefault, "Touch the whole arena at start (memcpy-speed puts)");
  app.add_flag("--huge-pages", o.huge_pages, "Ask for transparent huge pages on the arena");
  int64_t stay_awake_us = absl::ToInt64Microseconds(o.stay_awake);
  app.add_option("--stay-awake-us", stay_awake_us,
                 "After a request, poll for this many microseconds before sleeping, so a "
                 "client's next request finds the store running; not while another task "
                 "keeps the store off its CPU (0: never poll)")
      ->check(CLI::Range(int64_t{0}, int64_t{1000000}));
  int64_t ready_wait_us = absl::ToInt64Microseconds(o.ready_wait);
  app.add_option("--ready-wait-us", ready_wait_us,
                 "How long an overlapped seal waits for the client to finish writing "
                 "before it is refused (the client seals again); 0: refuse them all")
      ->check(CLI::Range(int64_t{0}, int64_t{1000000}));
  pid_t parent_pid = 0;
  app.add_option("--parent-pid", parent_pid,
                 "Stop (as on SIGTERM) when this process, our parent, dies: set by a "
                 "supervising node agent so that its store never outlives it");
  CLI11_PARSE(app, argc, argv);
  o.stay_awake = absl::Microseconds(stay_awake_us);
  o.ready_wait = absl::Microseconds(ready_wait_us);
  if (parent_pid > 0) {
    // The death signal fires when the thread that spawned us exits; the agent spawns
    // from a thread that lives as long as it does. If the parent died before this
    // line, we were already re-parented: stop at once.
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent_pid) {
      std::cerr << "drover-object-store: parent " << parent_pid << " is gone; exiting\n";
      return 1;
    }
  }
  if (!o.spill_dir.empty() && o.spill_capacity == 0) {
    std::cerr << "drover-object-store: --spill-dir needs --spill-capacity BYTES > 0\n";
    return 2;
  }

  drover::object_store::StoreServer server;
  if (absl::Status s = server.Start(socket_path, o); !s.ok()) {
    DROVER_LOG(ERROR) << "cannot start the object store: " << s;
    return 1;
  }
  int sig = 0;
  while (sigwait(&stop_signals, &sig) != 0) {
  }
  DROVER_LOG(INFO) << "received " << drover::SignalName(sig) << "; stopping";
  server.Stop();
  return 0;
}
