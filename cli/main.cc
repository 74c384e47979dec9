// drover: the command line for a drover cluster. Thin: subcommands live in
// job_commands.cc (run, submit, jobs, job, logs, cancel, status),
// cluster_commands.cc (up, down, start) and observe_commands.cc (dashboard, timeline).
#include <signal.h>
#include <unistd.h>

#include <cstdio>

#include <cstring>
#include <iostream>

#include "cli/commands.h"

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  drover::cli::GlobalOptions global;
  // Split off the job's command at the first `--` so CLI11 never parses it.
  int cut = argc;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) {
      cut = i;
      break;
    }
  }
  for (int i = cut + 1; i < argc; ++i) global.command.push_back(argv[i]);

  CLI::App app{"drover: run multi-process GPU jobs on a cluster"};
  app.require_subcommand(1);
  app.fallthrough(true);
  app.add_option("--address", global.address,
                 "scheduler HOST:PORT (default: $DROVER_ADDRESS or the cluster `drover up` "
                 "started)");
  app.add_option("--token-file", global.token_file,
                 "cluster token file (default: $DROVER_TOKEN_FILE or the local cluster's)");
  int exit_code = 0;
  drover::cli::AddJobCommands(app, global, &exit_code);
  drover::cli::AddClusterCommands(app, global, &exit_code);
  drover::cli::AddObserveCommands(app, global, &exit_code);
  try {
    app.parse(cut, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 prints the problem (or the help); its own codes (100+) become the one code
    // of every usage error.
    return app.exit(e) == 0 ? 0 : drover::cli::kUsageError;
  }
  // Skip tearing down gRPC and static state (several ms): everything is written.
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  _exit(exit_code);
}
