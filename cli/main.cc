// drover: the command line for a drover cluster. Thin: subcommands live in
// job_commands.cc (run, submit, jobs, job, logs, cancel, status),
// cluster_commands.cc (up, down, start) and observe_commands.cc (dashboard, timeline).
#include <signal.h>
#include <unistd.h>

#include <cstdio>

#include <cstdlib>
#include <cstring>
#include <iostream>

#include "cli/commands.h"
#include "grpc/support/log.h"

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  // The CLI says what went wrong in its own words (a TLS mismatch, a scheduler it cannot
  // reach); gRPC's log lines (nine handshake errors before the answer) only hide it.
  // GRPC_VERBOSITY, when set, brings them back for debugging.
  if (std::getenv("GRPC_VERBOSITY") == nullptr) gpr_set_log_function([](gpr_log_func_args*) {});
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
  app.add_option("--tls-ca", global.tls_ca,
                 "TLS clusters: the cluster CA's certificate, a copy of the head's "
                 "$DROVER_HOME/tls/ca.crt (default: $DROVER_TLS_CA or the local cluster's)");
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
