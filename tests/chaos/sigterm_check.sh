#!/bin/bash
# Scripted check: a chaos campaign stopped by SIGTERM (or SIGINT) leaves nothing of its
# cluster: no process, network namespace, bridge or cluster directory.
#
#   bazel build //tests/chaos:campaign && tests/chaos/sigterm_check.sh [TERM|INT]
#
# Needs root (the campaign's namespaces). Exit 0 if nothing was left.
set -u
sig=${1:-TERM}
bin=${CAMPAIGN:-bazel-bin/tests/chaos/campaign}
log=$(mktemp /tmp/sigterm-check-XXXXXX.log)
"$bin" --seconds 300 >"$log" 2>&1 &
pid=$!
# Wait until faults are being injected (the cluster is up, the workload runs).
for _ in $(seq 1 300); do
  grep -q "(at +" "$log" && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 1
done
if ! grep -q "(at +" "$log"; then
  echo "FAIL: the campaign did not get to its faults"; tail -20 "$log"; kill -KILL "$pid"; exit 1
fi
dir=$(ls -d /tmp/cluster-"$pid"-* 2>/dev/null | head -1)
echo "campaign $pid up (cluster dir ${dir:-none}); sending SIG$sig"
kill -"$sig" "$pid"
for _ in $(seq 1 90); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
if kill -0 "$pid" 2>/dev/null; then
  echo "FAIL: the campaign still runs 90 s after SIG$sig"; kill -KILL "$pid"; exit 1
fi
wait "$pid"; rc=$?
fail=0
left=$(ip netns list 2>/dev/null | grep -c "drover-test-$pid-")
[ "$left" -eq 0 ] || { echo "FAIL: $left network namespace(s) drover-test-$pid-* left"; fail=1; }
if ip link show "drvb$((pid % 100000))" >/dev/null 2>&1; then
  echo "FAIL: bridge drvb$((pid % 100000)) left"; fail=1
fi
if ls -d /tmp/cluster-"$pid"-* >/dev/null 2>&1; then echo "FAIL: /tmp/cluster-$pid-* left"; fail=1; fi
if [ -n "$dir" ]; then
  for p in /proc/[0-9]*; do
    [ "${p#/proc/}" = "$$" ] && continue
    if tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -q "$dir" ||
       tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -q "^DROVER_TOKEN_FILE=$dir/" ||
       readlink "$p/cwd" 2>/dev/null | grep -q "^$dir"; then
      echo "FAIL: process ${p#/proc/} ($(cat "$p/comm" 2>/dev/null)) of the cluster still runs"; fail=1
    fi
  done 2>/dev/null
fi
echo "campaign exited $rc; its last lines:"; tail -4 "$log"
[ "$fail" -eq 0 ] && echo "OK: SIG$sig left nothing" && rm -f "$log"
exit "$fail"
