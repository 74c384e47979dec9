#include "node_agent/process_tree.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace drover {
namespace {

int ByPid(const void* a, const void* b) {
  const pid_t x = static_cast<const ProcessEntry*>(a)->pid;
  const pid_t y = static_cast<const ProcessEntry*>(b)->pid;
  return x < y ? -1 : x > y;
}

}  // namespace

ProcessEntry* ReadProcessTable(size_t* n) {
  *n = 0;
  DIR* d = opendir("/proc");
  if (d == nullptr) return nullptr;
  size_t cap = 256;
  ProcessEntry* table = static_cast<ProcessEntry*>(malloc(cap * sizeof(ProcessEntry)));
  if (table == nullptr) {
    closedir(d);
    return nullptr;
  }
  char path[64];
  char buf[512];
  while (struct dirent* e = readdir(d)) {
    char* end;
    const long pid = strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    FILE* f = fopen(path, "re");
    if (f == nullptr) continue;  // gone meanwhile
    const size_t got = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[got] = '\0';
    // pid (comm) state ppid pgrp ...; comm may contain spaces and ')'.
    const char* rp = strrchr(buf, ')');
    char state;
    long ppid, pgrp;
    if (rp == nullptr || sscanf(rp + 1, " %c %ld %ld", &state, &ppid, &pgrp) != 3 ||
        state == 'Z') {
      continue;
    }
    if (*n == cap) {
      cap *= 2;
      auto* grown = static_cast<ProcessEntry*>(realloc(table, cap * sizeof(ProcessEntry)));
      if (grown == nullptr) break;  // what was read so far is still a valid table
      table = grown;
    }
    table[(*n)++] = ProcessEntry{static_cast<pid_t>(pid), static_cast<pid_t>(ppid),
                                 static_cast<pid_t>(pgrp), false};
  }
  closedir(d);
  qsort(table, *n, sizeof(ProcessEntry), ByPid);
  return table;
}

void MarkDescendants(ProcessEntry* table, size_t n, pid_t root) {
  for (size_t i = 0; i < n; ++i) table[i].descends = false;
  // A process descends from root if its parent is root or descends from it: repeat
  // until nothing changes (as many passes as the tree is deep).
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < n; ++i) {
      if (table[i].descends || table[i].pid == root) continue;
      if (table[i].ppid == root) {
        table[i].descends = changed = true;
        continue;
      }
      ProcessEntry key = {table[i].ppid, 0, 0, false};
      const auto* parent =
          static_cast<const ProcessEntry*>(bsearch(&key, table, n, sizeof(ProcessEntry), ByPid));
      if (parent != nullptr && parent->descends) table[i].descends = changed = true;
    }
  }
}

}  // namespace drover
