// The drover CLI's subcommands. Each Add*Command registers a CLI11 subcommand whose
// callback sets `*exit_code`.
#ifndef DROVER_CLI_COMMANDS_H_
#define DROVER_CLI_COMMANDS_H_

#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "drover/client.h"

namespace drover::cli {

// Options every command that talks to a cluster shares.
struct GlobalOptions {
  std::string address;
  std::string token_file;
  bool json = false;
  // Everything after a literal `--` on the command line (the job's command).
  std::vector<std::string> command;
};

void AddJobCommands(CLI::App& app, GlobalOptions& global, int* exit_code);
void AddClusterCommands(CLI::App& app, GlobalOptions& global, int* exit_code);
// dashboard, timeline (observe_commands.cc).
void AddObserveCommands(CLI::App& app, GlobalOptions& global, int* exit_code);

// A client of the cluster `global` points at (ResolveCluster's rules).
absl::StatusOr<std::unique_ptr<Client>> Connect(const GlobalOptions& global);

// The exit code of every usage error: a flag out of its range or malformed, a missing
// command, a spec the cluster refuses (CLI11's own parse errors too; see main.cc).
// Other failures exit with 1; `drover run` exits with the job's code.
inline constexpr int kUsageError = 2;

// Prints "drover: <message>" to stderr and returns the exit code for it.
int Fail(const std::string& message, int code = 1);
int Fail(const absl::Status& status, int code = 1);

}  // namespace drover::cli

#endif  // DROVER_CLI_COMMANDS_H_
