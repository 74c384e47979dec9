#!/usr/bin/env bash
# Runs the whole test suite: installs what is missing, then `bazel test //...`, then
# tests/external_workspace_test.sh (a workspace of its own built against @drover and
# its drover_job targets run on a local cluster: Bazel inside `bazel test` is awkward)
# and tests/cmake_install_test.sh (scripts/package.sh's release archive unpacked, the
# quickstart built with CMake against it, a local cluster from its binaries).
# Tests start their own daemons and redis-server on free loopback ports; one creates
# network namespaces and one a local Slurm, so the suite runs as root: started as a
# user, it runs itself again through sudo. Extra arguments go to `bazel test`.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "test: the suite needs root (network namespaces, Slurm): run it as root, or as a user with sudo" >&2
    exit 1
  fi
  exec sudo bash "$0" "$@"
fi
bash scripts/setup.sh test || exit 1
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# Always run the tests: results in the disk cache may come from another machine state
# (redis-server, python3-torch, the kernel), which Bazel cannot see as inputs.
bazel test //... --nocache_test_results "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|FLAKY)' "$log")
echo "test targets: ${passed} passed, ${failed} failed"

# Runs one script-driven test (Bazel inside `bazel test` is awkward), counted like a target.
run_script_test() {
  local label=$1 script=$2 start=$SECONDS
  if bash "$script"; then
    echo "${label}: PASSED in $((SECONDS - start)) s"
    passed=$((passed + 1))
  else
    echo "${label}: FAILED in $((SECONDS - start)) s"
    failed=$((failed + 1))
    [ "$rc" -eq 0 ] && rc=1
  fi
}
run_script_test "external workspace test" tests/external_workspace_test.sh
run_script_test "cmake install test" tests/cmake_install_test.sh
echo "${passed} passed, ${failed} failed"
exit "$rc"
