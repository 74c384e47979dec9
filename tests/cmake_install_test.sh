#!/usr/bin/env bash
# The release archive end to end: scripts/package.sh (which runs scripts/install.sh)
# into a temporary folder, the archive unpacked into another, its manifest checked
# against the binaries' shared libraries, examples/tasks_quickstart.cc built with CMake
# against the unpacked SDK (find_package(drover), drover::sdk) and run on a local
# cluster started by the unpacked CLI (temporary DROVER_HOME), a job run with
# `drover run`. Everything it starts is stopped, everything it writes removed.
#
# Not a `bazel test` (it runs Bazel): scripts/test.sh runs it after `bazel test //...`.
# Extra arguments go to install.sh's `bazel build` (default here: the suite's own
# fastbuild configuration, so the suite's outputs are reused; a release is -c opt).
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d /tmp/drover-cmake.XXXXXX)"
log="$tmp/log"
export DROVER_HOME="$tmp/home"
unset DROVER_ADDRESS DROVER_TOKEN_FILE
up=""
prefix=""

cleanup() {
  if [[ -n "$up" && -n "$prefix" ]]; then "$prefix/bin/drover" down >/dev/null 2>&1 || true; fi
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
bash "$repo/scripts/package.sh" --out "$tmp/dist" "${flags[@]}" >"$log" 2>&1 || fail "scripts/package.sh"
archives=("$tmp"/dist/drover-*-debian12-*.tar.gz)
[[ ${#archives[@]} -eq 1 && -f "${archives[0]}" ]] || fail "scripts/package.sh wrote no dist/drover-*-debian12-*.tar.gz"
name="$(basename "${archives[0]}" .tar.gz)"
# Unpacked elsewhere than it was built: the archive must not depend on where.
mkdir -p "$tmp/unpacked"
tar -C "$tmp/unpacked" -xzf "${archives[0]}" || fail "cannot unpack ${archives[0]}"
prefix="$tmp/unpacked/$name"
for f in bin/drover bin/drover-scheduler bin/drover-agent bin/drover-launch bin/drover-object-store \
         include/drover/drover.h lib/libdrover_sdk.a lib/cmake/drover/drover-config.cmake \
         lib/pkgconfig/drover.pc share/drover/packages.txt share/drover/examples/ddp_train.py; do
  [[ -e "$prefix/$f" ]] || fail "the archive has no $f"
done
echo "cmake_install_test: packaged and unpacked into $prefix"

# The manifest: every shared library a binary loads belongs to a 'runtime' package, and
# what scripts/demo.sh installs (runtime, demo) holds no build-only package.
manifest="$prefix/share/drover/packages.txt"
for b in "$prefix"/bin/*; do
  if ldd "$b" 2>/dev/null | grep -q "not found"; then
    ldd "$b" >"$log" 2>&1; fail "$(basename "$b") has unresolved libraries"
  fi
  for lib in $(objdump -p "$b" | awk '$1 == "NEEDED" {print $2}'); do
    path="$(ldd "$b" | awk -v l="$lib" '$1 == l {print $3} $1 ~ "/" l "$" {print $1}' | head -1)"
    real="$(readlink -f "$path")"
    pkg="$(dpkg-query -S "$path" "$real" "${real#/usr}" 2>/dev/null | head -1 | cut -d: -f1 || true)"
    [[ -n "$pkg" ]] || fail "no package owns $path ($(basename "$b") needs $lib)"
    grep -qx "runtime $pkg" "$manifest" || { cp "$manifest" "$log"; fail "$(basename "$b") needs $lib from $pkg, which the manifest's runtime lines lack"; }
  done
done
if grep -E '^(runtime|demo) ' "$manifest" | grep -qE -- '-dev$|^[a-z]+ (bazel|g\+\+|gcc|cmake)'; then
  cp "$manifest" "$log"; fail "the manifest's runtime/demo lines hold a build package"
fi
grep -qE '^sdk libgrpc\+\+-dev$' "$manifest" || { cp "$manifest" "$log"; fail "the manifest's sdk lines lack libgrpc++-dev"; }
echo "cmake_install_test: manifest covers the binaries' libraries"

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
# drover.pc locates itself (the archive unpacks anywhere).
inc="$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags-only-I drover | awk '{print $1}')"
[[ -e "${inc#-I}/drover/drover.h" ]] || fail "pkg-config --cflags drover gives '$inc', which has no drover/drover.h"

up=1
"$prefix/bin/drover" up --nodes 2 --gpus-per-node 1 >"$log" 2>&1 || fail "drover up (installed)"
timeout 300 "$tmp/build/tasks_quickstart" >"$log" 2>&1 || fail "tasks_quickstart exited with $?"
for p in "normalized float32[3, 32, 32], first pixel 0.5" "sum of sums 360" "predicts 63.75"; do
  grep -qF -- "$p" "$log" || fail "tasks_quickstart did not print '$p'"
done
# A job through the unpacked CLI, agents and launcher.
"$prefix/bin/drover" run --nproc 2 -- sh -c 'echo "hello from rank $RANK of $WORLD_SIZE"' >"$log" 2>&1 ||
  fail "drover run (unpacked) exited with $?"
for r in 0 1; do
  grep -qF "hello from rank $r of 2" "$log" || fail "drover run did not print rank $r's line"
done
"$prefix/bin/drover" down >"$log" 2>&1 || fail "drover down"
up=""
echo "cmake_install_test: PASSED"
