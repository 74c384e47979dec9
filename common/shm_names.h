// Names of the collective library's shared-memory segments, and their cleanup.
//
// A node's local rank 0 creates a segment (/dev/shm/drover-coll-...) and unlinks it once
// every local rank has mapped it; a rank that dies in between leaves it behind. The
// name says who may remove it: the id of the creator's PID namespace (sandboxes and
// containers share /dev/shm, and their pids repeat) and the pid of its owner, the
// drover-launch the rank runs under (kLaunchPidEnv; the rank itself outside drover).
// When that launcher's subtree has ended, nothing can be using its segments: the
// launcher, or the agent that reaps a launcher that died, removes them.
//
// libc only: drover-launch links it.
#ifndef DROVER_COMMON_SHM_NAMES_H_
#define DROVER_COMMON_SHM_NAMES_H_

#include <stddef.h>
#include <sys/types.h>

namespace drover {

// Set by drover-launch, in everything it starts, to its own pid.
inline constexpr char kLaunchPidEnv[] = "DROVER_LAUNCH_PID";

// The inode of /proc/self/ns/pid, which tells PID namespaces apart; 0 if unreadable.
unsigned long long PidNamespaceId();

// The pid that owns this process's segments: kLaunchPidEnv if set (and a number),
// else getpid().
pid_t CollectiveSegmentOwner();

// Writes "/drover-coll-<ns>-<owner>-" (the prefix of the owner's segment names, as given
// to shm_open) into buf; returns its length, or -1 if it does not fit.
int CollectiveSegmentPrefix(unsigned long long ns, pid_t owner, char* buf, size_t size);

// Unlinks every segment of `owner` in PID namespace `ns` from /dev/shm. Returns how
// many it removed (-1 if /dev/shm cannot be read; none when `ns` is 0, unknown).
// REQUIRES: nothing of the owner's subtree is alive (their segments are in use).
int UnlinkCollectiveSegments(unsigned long long ns, pid_t owner);

}  // namespace drover

#endif  // DROVER_COMMON_SHM_NAMES_H_
