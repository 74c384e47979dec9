// Start-up steps shared by the daemons' main() functions.
#ifndef DROVER_COMMON_DAEMON_H_
#define DROVER_COMMON_DAEMON_H_

#include <signal.h>

namespace drover {

// Blocks SIGTERM and SIGINT in the calling thread (call it before any thread starts,
// so every thread inherits the mask and only a sigwait() on the returned set sees
// them) and ignores SIGPIPE. Workers get a clean mask from posix_spawn.
sigset_t BlockStopSignals();

}  // namespace drover

#endif  // DROVER_COMMON_DAEMON_H_
