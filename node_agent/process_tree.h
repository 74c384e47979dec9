// The machine's process tree, read from /proc: who descends from whom. Shared by the
// node agent (ProcessManager stops a worker's whole subtree) and drover-launch (which
// kills what its command left behind), so it uses libc only: the launcher links
// nothing else.
#ifndef DROVER_NODE_AGENT_PROCESS_TREE_H_
#define DROVER_NODE_AGENT_PROCESS_TREE_H_

#include <stddef.h>
#include <sys/types.h>

namespace drover {

struct ProcessEntry {
  pid_t pid;
  pid_t ppid;
  pid_t pgrp;
  bool descends;  // set by MarkDescendants
};

// Every process alive (zombies left out), sorted by pid, in a malloc'd array the caller
// free()s; *n is its length. Null (and *n = 0) if /proc cannot be read.
ProcessEntry* ReadProcessTable(size_t* n);

// Sets `descends` on every entry whose ancestry includes `root` (not on root itself),
// clearing it on the others.
void MarkDescendants(ProcessEntry* table, size_t n, pid_t root);

}  // namespace drover

#endif  // DROVER_NODE_AGENT_PROCESS_TREE_H_
