#!/usr/bin/env bash
# scripts/install.sh into a temporary prefix, then examples/tasks_quickstart.cc built
# with CMake against it (find_package(drover), drover::sdk) and run on a local cluster
# started by the installed CLI (temporary DROVER_HOME). Everything it starts is
# stopped, everything it writes removed.
#
# Not a `bazel test` (it runs Bazel): scripts/test.sh runs it after `bazel test //...`.
# Extra arguments go to install.sh's `bazel build` (default here: the suite's own
# fastbuild configuration, so the suite's outputs are reused).
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d /tmp/drover-cmake.XXXXXX)"
prefix="$tmp/prefix"
log="$tmp/log"
export DROVER_HOME="$tmp/home"
unset DROVER_ADDRESS DROVER_TOKEN_FILE
up=""

cleanup() {
  if [[ -n "$up" ]]; then "$prefix/bin/drover" down >/dev/null 2>&1 || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
  echo "cmake_install_test: FAILED: $*" >&2
  [[ -s "$log" ]] && sed 's/^/  | /' "$log" >&2
  exit 1
}

flags=("$@")
[[ ${#flags[@]} -eq 0 ]] && flags=(--compilation_mode=fastbuild)
bash "$repo/scripts/install.sh" "$prefix" "${flags[@]}" >"$log" 2>&1 || fail "scripts/install.sh"
for f in bin/drover bin/drover-scheduler bin/drover-agent include/drover/drover.h \
         lib/libdrover_sdk.a lib/cmake/drover/drover-config.cmake lib/pkgconfig/drover.pc; do
  [[ -e "$prefix/$f" ]] || fail "the install has no $f"
done
echo "cmake_install_test: installed into $prefix"

mkdir -p "$tmp/project"
cat > "$tmp/project/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.16)
project(quickstart CXX)
find_package(drover REQUIRED)
add_executable(tasks_quickstart "$repo/examples/tasks_quickstart.cc")
target_link_libraries(tasks_quickstart PRIVATE drover::sdk)
CMAKE
(cmake -S "$tmp/project" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$prefix" &&
 cmake --build "$tmp/build") >"$log" 2>&1 || fail "cmake build of examples/tasks_quickstart.cc"
echo "cmake_install_test: built examples/tasks_quickstart.cc with CMake"

# pkg-config finds the same flags.
PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --libs drover >"$log" 2>&1 &&
  grep -q -- "-ldrover_sdk" "$log" || fail "pkg-config --libs drover"

up=1
"$prefix/bin/drover" up --nodes 2 --gpus-per-node 1 >"$log" 2>&1 || fail "drover up (installed)"
timeout 300 "$tmp/build/tasks_quickstart" >"$log" 2>&1 || fail "tasks_quickstart exited with $?"
for p in "normalized float32[3, 32, 32], first pixel 0.5" "sum of sums 360" "predicts 63.75"; do
  grep -qF -- "$p" "$log" || fail "tasks_quickstart did not print '$p'"
done
"$prefix/bin/drover" down >"$log" 2>&1 || fail "drover down"
up=""
echo "cmake_install_test: PASSED"
