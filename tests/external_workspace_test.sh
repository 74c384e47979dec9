#!/usr/bin/env bash
# Builds examples/external_workspace, a Bazel workspace of its own that uses this
# checkout as the external repository @drover (drover_dependencies(), the README's
# .bazelrc lines, @drover//sdk:drover), builds @drover//cli:drover and
# @drover//python:drover there and checks that they are where the README says
# (bazel-bin/external/drover/...) and work (the CLI starts the cluster, Python puts and
# gets a value), then runs its drover_job targets with `bazel run` against that
# cluster, and checks their output and exit codes. Everything it starts is stopped, everything it writes removed.
#
# Not a `bazel test` (Bazel inside Bazel's sandbox is awkward): scripts/test.sh runs it
# after `bazel test //...`. The outer workspace has its own output base (a fresh Bazel
# server) but shares the disk cache, so on a warm machine the build takes seconds; the
# first build after a change of drover compiles the SDK and CLI again (~2 minutes on 2
# cores), since drover's sources sit at other paths (external/drover/...) there.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d /tmp/drover-extws.XXXXXX)"
ws="$tmp/workspace"
output_base="$tmp/output_base"
log="$tmp/log"
export DROVER_HOME="$tmp/home"
unset DROVER_ADDRESS DROVER_TOKEN_FILE
drover=""
# The limit on each outer `bazel` command: a cold first build (gRPC stubs, the SDK and
# the CLI at external/drover/...) took 43 minutes on a loaded fresh 2-core machine, so
# the default is far above it; it only stops a build that hangs.
build_limit_s="${DROVER_EXTWS_BUILD_LIMIT_S:-7200}"

cleanup() {
  if [[ -n "$drover" ]]; then "$drover" down >/dev/null 2>&1 || true; fi
  if [[ -d "$ws" ]]; then (cd "$ws" && bazel --output_base="$output_base" shutdown) >/dev/null 2>&1 || true; fi
  chmod -R u+w "$tmp" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
  echo "external_workspace_test: FAILED: $*" >&2
  [[ -s "$log" ]] && sed 's/^/  | /' "$log" >&2
  exit 1
}

# Runs bazel in the outer workspace (its own output base, no convenience symlinks).
outer_bazel() {
  local command="$1"
  shift
  (cd "$ws" && timeout "$build_limit_s" bazel --output_base="$output_base" "$command" \
    --disk_cache="$HOME/.cache/bazel-disk" --symlink_prefix=/ "$@")
}

# Expects `bazel run TARGET [-- ARGS]` to exit with CODE and print each PATTERN.
expect_run() {
  local code="$1" target="$2"
  shift 2
  local args=() patterns=()
  while [[ $# -gt 0 && "$1" != "--expect" ]]; do args+=("$1"); shift; done
  [[ $# -gt 0 ]] && shift
  patterns=("$@")
  local rc=0
  outer_bazel run "$target" -- "${args[@]}" >"$log" 2>&1 || rc=$?
  [[ "$rc" == "$code" ]] || fail "bazel run $target ${args[*]} exited with $rc, expected $code"
  local p
  for p in "${patterns[@]}"; do
    grep -qF -- "$p" "$log" || fail "bazel run $target ${args[*]} did not print '$p'"
  done
  echo "external_workspace_test: bazel run $target ${args[*]}: exit $rc, output as expected"
}

cp -r "$repo/examples/external_workspace" "$ws"
sed -i "s|path = \"../..\",.*|path = \"$repo\",|" "$ws/WORKSPACE"
grep -qF "path = \"$repo\"," "$ws/WORKSPACE" || fail "could not point $ws/WORKSPACE at $repo"

start=$SECONDS
outer_bazel build //... >"$log" 2>&1 || fail "bazel build //... in the outer workspace"
echo "external_workspace_test: bazel build //... in the outer workspace: $((SECONDS - start)) s"

# The CLI and the Python module where the README says an outer workspace finds them
# (bazel-bin/external/drover/...; bazel-bin is `bazel info bazel-bin`, the folder the
# convenience link points to). The cluster below is started by that CLI, which finds
# its daemons beside itself.
start=$SECONDS
outer_bazel build @drover//cli:drover @drover//python:drover >"$log" 2>&1 ||
  fail "bazel build @drover//cli:drover @drover//python:drover in the outer workspace"
echo "external_workspace_test: bazel build @drover//cli:drover @drover//python:drover: $((SECONDS - start)) s"
outer_bin="$(outer_bazel info bazel-bin 2>/dev/null)"
drover="$outer_bin/external/drover/cli/drover"
[[ -x "$drover" ]] || fail "no CLI at bazel-bin/external/drover/cli/drover (the README's path)"
[[ -f "$outer_bin/external/drover/python/drover.so" ]] ||
  fail "no Python module at bazel-bin/external/drover/python/drover.so (the README's path)"
# The module links the SDK the CLI was built from: no second configuration compiled it
# again (a transition's output folder is bazel-out/k8-<mode>-ST-<hash>).
if compgen -G "$outer_bin/../../*-ST-*" >/dev/null; then
  fail "a configuration of its own compiled drover again: $(cd "$outer_bin/../.." && ls -d ./*-ST-*)"
fi
"$drover" up --nodes 2 >"$log" 2>&1 || fail "drover up (the outer workspace's CLI)"

# `import drover` from the README's folder, and a value through the cluster's store.
PYTHONPATH="$outer_bin/external/drover/python" python3 -c '
import drover
drover.init()  # the cluster of $DROVER_HOME, as for the CLI
ref = drover.put({"squares": [1, 4, 9]})
assert drover.get(ref, timeout=30) == {"squares": [1, 4, 9]}, drover.get(ref)
drover.shutdown()
print("python module: put/get through the cluster ok")
' >"$log" 2>&1 || fail "import drover from bazel-bin/external/drover/python and put/get a value"
echo "external_workspace_test: import drover from bazel-bin/external/drover/python: put/get ok"

# drover run: the job's output streams back and `bazel run` exits with the job's code;
# arguments after `--` follow the target's own.
expect_run 0 //:job --expect "hello from a drover_job" "sum of squares 1..12 = 650" \
  "SUCCEEDED"
expect_run 3 //:job 3 --expect "sum of squares 1..12 = 650" "exited with code 3"
# mode = "driver": the program runs here; its tasks run on the cluster's nodes.
expect_run 0 //:job_here --expect "sum of squares 1..5 = 55 (a task ran on node-"

# The jobs ran under the target's label.
"$drover" jobs >"$log" 2>&1 || fail "drover jobs"
[[ "$(grep -cF "//:job " "$log")" == 2 ]] || fail "drover jobs does not list two jobs named //:job"
echo "external_workspace_test: PASSED"
