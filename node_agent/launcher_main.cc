// drover-launch: the tiny, single-threaded launcher every worker is started through.
//
//   drover-launch CMD ARGS...
//
// The node agent posix_spawn()s this binary with the full worker environment, stdout
// and stderr already redirected to the log files, in a new process group. It
//   - ties itself to the agent (PR_SET_PDEATHSIG + DROVER_AGENT_PID check), so no
//     worker outlives an agent that dies, even by SIGKILL;
//   - becomes a child subreaper, forks (safe: one thread) and execs CMD using the PATH
//     of the worker environment;
//   - when CMD ends, kills and reaps whatever CMD left behind: its process group and
//     every descendant that left it (setsid), which as a subreaper it still parents;
//   - takes its signals synchronously (blocked, sigwaitinfo in the main loop): no
//     handler, so the agent-death path may walk /proc and kill the whole subtree;
//   - sets DROVER_LAUNCH_PID to its pid for CMD: collective shared-memory segments
//     are named after it, and once everything under it is dead it unlinks the ones a
//     rank that died left behind (common/shm_names.h);
//   - exits with CMD's status, or re-raises the signal that killed CMD, so the agent
//     sees exactly how the user's process ended.
//
// Depends on nothing but libc, so it execs in well under a millisecond.
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/shm_names.h"
#include "node_agent/process_tree.h"

extern char** environ;

namespace {

pid_t g_agent_pid = 0;

// True when the agent that started us is gone (we were reparented).
bool AgentGone() { return g_agent_pid > 0 && getppid() != g_agent_pid; }

void WriteAll(int fd, const char* s) {
  size_t n = strlen(s);
  while (n > 0) {
    ssize_t w = write(fd, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    s += w;
    n -= w;
  }
}

// Reaps every already-exited child. Returns true if children remain (alive).
bool ReapExitedChildren() {
  for (;;) {
    int st;
    pid_t r = waitpid(-1, &st, WNOHANG);
    if (r > 0) continue;
    if (r == 0) return true;
    if (errno == EINTR) continue;
    return false;  // ECHILD
  }
}

// SIGKILLs every process in our process group except us, and every descendant of ours
// (orphans we adopted as subreaper, and their children, may have left the group).
void KillLeftovers() {
  const pid_t self = getpid();
  const pid_t pgid = getpgrp();
  size_t n = 0;
  drover::ProcessEntry* table = drover::ReadProcessTable(&n);
  if (table == nullptr) return;  // no /proc: the caller's bounded loop just waits
  drover::MarkDescendants(table, n, self);
  for (size_t i = 0; i < n; ++i) {
    if (table[i].pid != self && (table[i].descends || table[i].pgrp == pgid)) {
      kill(table[i].pid, SIGKILL);
    }
  }
  free(table);
}

// Removes the collective segments of processes under us that died before unlinking.
// REQUIRES: nothing under us is alive.
void UnlinkLeftSegments() { drover::UnlinkCollectiveSegments(drover::PidNamespaceId(), getpid()); }

// The agent died: take down everything we started, then ourselves.
[[noreturn]] void KillTreeAndDie() {
  KillLeftovers();
  // Killed, if not yet reaped: none can use a segment any more.
  UnlinkLeftSegments();
  kill(-getpgrp(), SIGKILL);  // includes ourselves
  _exit(137);
}

void SleepMs(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

[[noreturn]] void MirrorStatus(int status) {
  if (WIFEXITED(status)) exit(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    struct rlimit rl = {0, 0};
    setrlimit(RLIMIT_CORE, &rl);  // the child may have dumped core; we must not
    signal(sig, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    sigprocmask(SIG_UNBLOCK, &set, nullptr);
    raise(sig);
    _exit(128 + sig);  // only if the signal did not terminate us
  }
  _exit(255);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    WriteAll(2, "usage: drover-launch CMD [ARGS...]\n");
    return 2;
  }
  const char* agent = getenv("DROVER_AGENT_PID");
  if (agent != nullptr) g_agent_pid = static_cast<pid_t>(atol(agent));

  // Our signals stay blocked and are taken by sigwaitinfo in the wait loop below (a
  // blocked signal is queued, never lost, even SIGCHLD, whose default is to ignore).
  sigset_t waited, old;
  sigemptyset(&waited);
  sigaddset(&waited, SIGTERM);
  sigaddset(&waited, SIGINT);
  sigaddset(&waited, SIGCHLD);
  sigprocmask(SIG_BLOCK, &waited, &old);

  // (a) die with the agent; close the race where it died before prctl.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (AgentGone()) KillTreeAndDie();
  // (b) orphans of the user's process are reparented to us, not to init.
  prctl(PR_SET_CHILD_SUBREAPER, 1);

  // (c) fork + exec the user's command; the child gets the signal mask we started with.
  char self[24];
  snprintf(self, sizeof(self), "%ld", static_cast<long>(getpid()));
  setenv(drover::kLaunchPidEnv, self, 1);
  pid_t child = fork();
  if (child < 0) {
    char msg[512];
    snprintf(msg, sizeof(msg), "drover-launch: cannot fork to run '%s': %s\n", argv[1],
             strerror(errno));
    WriteAll(2, msg);
    return 127;
  }
  if (child == 0) {
    sigprocmask(SIG_SETMASK, &old, nullptr);
    execvpe(argv[1], argv + 1, environ);  // PATH of the worker environment
    int err = errno;
    const char* path = getenv("PATH");
    char msg[4096];
    snprintf(msg, sizeof(msg), "drover-launch: cannot run '%s': %s (PATH=%s)\n", argv[1],
             strerror(err), path ? path : "");
    WriteAll(2, msg);
    _exit(127);
  }

  // (e) wait for the main child, reaping adopted orphans that exit meanwhile.
  // SIGTERM/SIGINT: if the agent died, take everything down. Otherwise ignore them: the
  // user's process (same group) got the signal too, and the agent escalates to SIGKILL
  // on the group (and its escapees) after the grace period.
  int status = 0;
  for (bool main_done = false; !main_done;) {
    for (;;) {
      int st;
      pid_t r = waitpid(-1, &st, WNOHANG);
      if (r == child) {
        status = st;
        main_done = true;
      }
      if (r <= 0 && !(r < 0 && errno == EINTR)) break;  // none exited now, or ECHILD
    }
    if (main_done) break;
    int sig = sigwaitinfo(&waited, nullptr);
    if ((sig == SIGTERM || sig == SIGINT) && AgentGone()) KillTreeAndDie();
  }

  // Fast path: nothing left behind. Otherwise kill the leftovers and reap them,
  // bounded (~10 s) in case something is stuck in uninterruptible sleep.
  if (ReapExitedChildren()) {
    for (int i = 0; i < 1000; ++i) {
      KillLeftovers();
      if (!ReapExitedChildren()) break;
      SleepMs(10);
    }
  }

  UnlinkLeftSegments();
  // (f)
  MirrorStatus(status);
}
