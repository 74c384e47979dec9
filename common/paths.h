// Where drover keeps its files on a machine.
#ifndef DROVER_COMMON_PATHS_H_
#define DROVER_COMMON_PATHS_H_

#include <string>

namespace drover {

// $DROVER_HOME if set and non-empty, else $HOME/.drover (or /tmp/.drover without HOME).
// Holds the token, cluster.json of the local cluster, and daemons' state.
std::string DroverHome();

// A short path under /tmp/drover-<uid>/ for a Unix socket (or a directory of them) that
// belongs to `owner_dir` but would not fit in sun_path there:
// "/tmp/drover-<uid>/<name>-<pid>-<8 hex digits of a hash of owner_dir>". The hash keeps
// two daemons apart that have the same pid in different PID namespaces (containers,
// Bazel's sandboxes) and share /tmp. The caller creates /tmp/drover-<uid> (0700).
std::string TmpSocketPath(const std::string& owner_dir, const std::string& name);

}  // namespace drover

#endif  // DROVER_COMMON_PATHS_H_
