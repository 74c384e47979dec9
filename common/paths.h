// Where drover keeps its files on a machine.
#ifndef DROVER_COMMON_PATHS_H_
#define DROVER_COMMON_PATHS_H_

#include <string>

namespace drover {

// $DROVER_HOME if set and non-empty, else $HOME/.drover (or /tmp/.drover without HOME).
// Holds the token, cluster.json of the local cluster, and daemons' state.
std::string DroverHome();

// Where a daemon puts a Unix socket (or a directory of them) whose natural place
// `preferred` is too long for sun_path (107 bytes): /tmp/drover-<uid>/<name>-<16 hex
// characters of a hash of `preferred`>. One path per preferred place, not per process:
// daemons in different PID namespaces that share /tmp (Bazel's test sandboxes) get
// equal pids, and a path built from the pid made one cluster's agent replace another's
// sockets.
std::string ShortSocketPath(const std::string& preferred, const std::string& name);

}  // namespace drover

#endif  // DROVER_COMMON_PATHS_H_
