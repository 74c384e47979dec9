#!/usr/bin/env bash
# Installs drover for use without Bazel:
#
#   bash scripts/install.sh PREFIX [BAZEL_FLAGS...]     (default flags: -c opt)
#
#   PREFIX/bin/                  drover and its daemons (drover up finds them beside it)
#   PREFIX/include/drover/       the SDK's public headers
#   PREFIX/lib/libdrover_sdk.a   the SDK and everything it needs from this repository
#   PREFIX/lib/cmake/drover/     find_package(drover): the imported target drover::sdk
#   PREFIX/lib/pkgconfig/drover.pc
#
# The SDK's system libraries (gRPC, protobuf, Abseil, OpenSSL: Debian's, the ones it was
# built against) are linked as shared libraries by programs built against the install;
# drover::sdk and drover.pc carry their link flags. Builds with its own
# --symlink_prefix, so the checkout's bazel-* links stay as they were.
set -euo pipefail

if [[ $# -lt 1 || "$1" == -* ]]; then
  echo "usage: bash scripts/install.sh PREFIX [BAZEL_FLAGS...]   (default flags: -c opt)" >&2
  exit 2
fi
prefix="$1"
shift
flags=("$@")
[[ ${#flags[@]} -eq 0 ]] && flags=(-c opt)
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"

binaries=(
  //cli:drover
  //scheduler:drover-scheduler
  //node_agent:drover-agent
  //node_agent:drover-launch
  //object_store:drover-object-store
)
echo "install: building the SDK archive and ${#binaries[@]} binaries (bazel build ${flags[*]})"
bazel build "${flags[@]}" --symlink_prefix=/ //install:drover_sdk "${binaries[@]}"
bin="$(bazel info "${flags[@]}" bazel-bin 2>/dev/null)"

mkdir -p "$prefix"
prefix="$(cd "$prefix" && pwd)"
mkdir -p "$prefix/bin" "$prefix/include" "$prefix/lib/cmake/drover" "$prefix/lib/pkgconfig"
for target in "${binaries[@]}"; do
  path="${target#//}"
  install -m 0755 "$bin/${path/://}" "$prefix/bin/"
done
rm -rf "$prefix/include/drover"
cp -r sdk/include/drover "$prefix/include/drover"
chmod -R u+w,go+rX "$prefix/include/drover"
install -m 0644 "$bin/install/libdrover_sdk.a" "$prefix/lib/"

# The system libraries' link flags, as shared libraries: the -l names (and -L folders) of
# @system's static groups (each has a .so in Debian), each kept at its last place so
# that a library still comes after those that need it (as --as-needed linkers want).
libs=()
while read -r f; do
  case "$f" in
    -l*|-L*|-pthread) libs+=("$f") ;;
  esac
done < "$bin/install/drover_sdk.linkflags"
declare -A last
for i in "${!libs[@]}"; do last[${libs[$i]}]=$i; done
link=()
for i in "${!libs[@]}"; do
  [[ ${last[${libs[$i]}]} == "$i" ]] && link+=("${libs[$i]}")
done
mapfile -t defines < <(grep -v '^$' "$bin/install/drover_sdk.defines" || true)
version="$(git -C "$repo" describe --always --dirty 2>/dev/null || echo unknown)"

join() { local IFS="$1"; shift; echo "$*"; }

cat > "$prefix/lib/cmake/drover/drover-config.cmake" <<CMAKE
# drover's CMake package (installed by drover's scripts/install.sh, version $version).
#
#   find_package(drover REQUIRED)        # CMAKE_PREFIX_PATH=<prefix>, or drover_DIR
#   target_link_libraries(app PRIVATE drover::sdk)
#
# drover::sdk: the SDK's headers (#include "drover/drover.h"), its static library, C++17,
# and the system libraries it links (Debian's gRPC, protobuf, Abseil, OpenSSL).
# drover_BIN_DIR: the installed CLI and daemons (drover up, drover run).
get_filename_component(_drover_prefix "\${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET drover::sdk)
  add_library(drover::sdk STATIC IMPORTED)
  set_target_properties(drover::sdk PROPERTIES
    IMPORTED_LOCATION "\${_drover_prefix}/lib/libdrover_sdk.a"
    IMPORTED_LINK_INTERFACE_LANGUAGES "CXX"
    INTERFACE_INCLUDE_DIRECTORIES "\${_drover_prefix}/include"
    INTERFACE_COMPILE_DEFINITIONS "$(join ';' "${defines[@]}")"
    INTERFACE_COMPILE_FEATURES "cxx_std_17"
    INTERFACE_LINK_LIBRARIES "$(join ';' "${link[@]}")")
endif()
set(drover_BIN_DIR "\${_drover_prefix}/bin")
set(drover_FOUND TRUE)
unset(_drover_prefix)
CMAKE

cat > "$prefix/lib/cmake/drover/drover-config-version.cmake" <<CMAKE
# Any version asked for is accepted: drover's install is not versioned yet ($version).
set(PACKAGE_VERSION "0")
set(PACKAGE_VERSION_COMPATIBLE TRUE)
CMAKE

# ${pcfiledir}: the install can be moved (scripts/package.sh's archive unpacks anywhere).
cat > "$prefix/lib/pkgconfig/drover.pc" <<PC
prefix=\${pcfiledir}/../..
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: drover
Description: drover's C++ SDK (jobs, tasks and actors, objects, queues, collectives)
Version: 0
Cflags: -I\${includedir} $(for d in "${defines[@]}"; do printf -- '-D%s ' "$d"; done)
Libs: -L\${libdir} -ldrover_sdk ${link[*]}
PC

echo "install: installed into $prefix (bin/, include/drover/, lib/libdrover_sdk.a, lib/cmake/drover/, lib/pkgconfig/drover.pc)"
