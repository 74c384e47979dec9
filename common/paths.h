// Where drover keeps its files on a machine.
#ifndef DROVER_COMMON_PATHS_H_
#define DROVER_COMMON_PATHS_H_

#include <string>

namespace drover {

// $DROVER_HOME if set and non-empty, else $HOME/.drover (or /tmp/.drover without HOME).
// Holds the token, cluster.json of the local cluster, and daemons' state.
std::string DroverHome();

}  // namespace drover

#endif  // DROVER_COMMON_PATHS_H_
