#include "common/shm_names.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace drover {

unsigned long long PidNamespaceId() {
  struct stat st;
  if (stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<unsigned long long>(st.st_ino);
}

pid_t CollectiveSegmentOwner() {
  const char* v = getenv(kLaunchPidEnv);
  if (v != nullptr && *v != '\0') {
    char* end = nullptr;
    long pid = strtol(v, &end, 10);
    if (*end == '\0' && pid > 0) return static_cast<pid_t>(pid);
  }
  return getpid();
}

int CollectiveSegmentPrefix(unsigned long long ns, pid_t owner, char* buf, size_t size) {
  int n = snprintf(buf, size, "/drover-coll-%llu-%ld-", ns, static_cast<long>(owner));
  return n < 0 || static_cast<size_t>(n) >= size ? -1 : n;
}

int UnlinkCollectiveSegments(unsigned long long ns, pid_t owner) {
  // Without the namespace's id, pids of other sandboxes sharing /dev/shm could match:
  // remove nothing rather than someone else's segments.
  if (ns == 0) return 0;
  char prefix[96];
  const int len = CollectiveSegmentPrefix(ns, owner, prefix, sizeof(prefix));
  if (len < 0) return 0;
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) return -1;
  int removed = 0;
  // Names in /dev/shm lack shm_open's leading '/'.
  while (struct dirent* e = readdir(d)) {
    if (strncmp(e->d_name, prefix + 1, static_cast<size_t>(len - 1)) != 0) continue;
    char name[300];
    snprintf(name, sizeof(name), "/%s", e->d_name);
    if (shm_unlink(name) == 0) ++removed;
  }
  closedir(d);
  return removed;
}

}  // namespace drover
