// drover-object-store: one node's object store as a process (the node agent, tests or an
// operator supervise it). Thin: parse flags, start the StoreServer, run until
// SIGTERM/SIGINT, stop it (unlinking the socket) and exit 0.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <iostream>
#include <string>

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
  CLI11_PARSE(app, argc, argv);
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
