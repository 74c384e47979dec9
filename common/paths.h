// Where drover keeps its files on a machine.
#ifndef DROVER_COMMON_PATHS_H_
#define DROVER_COMMON_PATHS_H_

#include <string>

#include "absl/status/statusor.h"

namespace drover {

// $DROVER_HOME if set and non-empty, else $HOME/.drover (or /tmp/.drover without HOME).
// Holds the token, cluster.json of the local cluster, and daemons' state.
std::string DroverHome();

// A directory for Unix sockets whose paths must fit a socket address (108 bytes):
// `preferred` (created 0700) if `preferred` + `longest_name` is short enough, else a new
// directory of its own under /tmp/drover-<uid>/ (0700, named `tag`-XXXXXX: unique even
// among processes of other pid namespaces, which share /tmp). The caller removes a
// /tmp one when done (RemoveSocketDir).
absl::StatusOr<std::string> SocketDir(const std::string& preferred, const std::string& tag,
                                      const std::string& longest_name);
// Removes `dir` if SocketDir made it under /tmp (and it is empty by then).
void RemoveSocketDir(const std::string& dir, const std::string& preferred);

}  // namespace drover

#endif  // DROVER_COMMON_PATHS_H_
