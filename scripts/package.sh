#!/usr/bin/env bash
# Builds drover's binary release archive:
#
#   bash scripts/package.sh [--out DIR] [BAZEL_FLAGS...]    (default: --out dist, -c opt)
#
# writes DIR/drover-<version>-debian12-<arch>.tar.gz, one folder holding what
# scripts/install.sh installs (bin/ with drover and its daemons, include/drover/,
# lib/libdrover_sdk.a, lib/cmake/drover/, lib/pkgconfig/drover.pc), plus
#
#   share/drover/packages.txt    the Debian packages it needs, one "GROUP PACKAGE" a line:
#                                runtime  the shared libraries the binaries load (found
#                                         with objdump and dpkg -S, so the list is complete
#                                         for the machine that built it)
#                                demo     what scripts/demo.sh's jobs run (python3-torch)
#                                optional redis-server, for `drover up --redis`
#                                sdk      the -dev packages a program built against
#                                         lib/libdrover_sdk.a links (drover.pc's -l flags)
#   share/drover/examples/       examples/ddp_train.py and examples/tasks_quickstart.cc
#   share/drover/BUILDINFO       version, Bazel flags, build machine's Debian and arch
#
# The archive is relocatable: unpack it anywhere (drover up finds the daemons beside the
# CLI; the CMake package and drover.pc locate themselves). It runs on Debian 12 of the
# same architecture with the runtime packages installed; scripts/demo.sh installs them.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
out="$repo/dist"
if [[ "${1:-}" == --out ]]; then
  [[ $# -ge 2 ]] || { echo "package: --out needs a folder" >&2; exit 2; }
  out="$2"
  shift 2
fi
flags=("$@")
[[ ${#flags[@]} -eq 0 ]] && flags=(-c opt)
for tool in objdump dpkg-query tar gzip; do
  command -v "$tool" >/dev/null || { echo "package: needs $tool" >&2; exit 1; }
done

version="$(git -C "$repo" describe --always --dirty 2>/dev/null || echo unknown)"
arch="$(dpkg --print-architecture)"
debian="$(cut -d. -f1 /etc/debian_version 2>/dev/null || echo unknown)"
if [[ "$debian" != 12 ]]; then
  echo "package: warning: built on Debian '$debian', but the archive is named and meant for Debian 12" >&2
fi
name="drover-${version}-debian12-${arch}"
stage="$(mktemp -d /tmp/drover-package.XXXXXX)"
trap 'rm -rf "$stage"' EXIT
root="$stage/$name"

bash "$repo/scripts/install.sh" "$root" "${flags[@]}"

share="$root/share/drover"
mkdir -p "$share/examples"
install -m 0644 "$repo/examples/ddp_train.py" "$repo/examples/tasks_quickstart.cc" "$share/examples/"

# The package that owns a file, trying the path as given and as Debian's merged /usr
# has it registered (dpkg knows /lib/x86_64-linux-gnu/libc.so.6, ldd may say /usr/lib).
owner() {
  local path=$1 real candidates=() c
  real="$(readlink -f "$path")"
  candidates=("$path" "$real")
  for c in "$path" "$real"; do
    case "$c" in
      /usr/lib/*) candidates+=("${c#/usr}") ;;
      /lib/*) candidates+=("/usr$c") ;;
    esac
  done
  for c in "${candidates[@]}"; do
    if pkg="$(dpkg-query -S "$c" 2>/dev/null | head -1)"; then
      echo "${pkg%%:*}"
      return 0
    fi
  done
  return 1
}

# runtime: every shared library a binary names (NEEDED), resolved by the loader the way
# it will be at run time, then to its package. A library no package owns stops the build:
# the archive would not run on a machine that installs only its manifest.
declare -A runtime=()
for b in "$root"/bin/*; do
  mapfile -t needed < <(objdump -p "$b" | awk '$1 == "NEEDED" {print $2}')
  [[ ${#needed[@]} -eq 0 ]] && continue
  resolved="$(ldd "$b")"
  for lib in "${needed[@]}"; do
    path="$(awk -v l="$lib" '$1 == l && $2 == "=>" {print $3} $1 ~ "/" l "$" {print $1}' <<<"$resolved" | head -1)"
    if [[ -z "$path" || "$path" == "not" ]]; then
      echo "package: $(basename "$b") needs $lib, which the loader does not find here" >&2
      exit 1
    fi
    pkg="$(owner "$path")" || { echo "package: no Debian package owns $path (needed by $(basename "$b"))" >&2; exit 1; }
    runtime[$pkg]=1
  done
done

# sdk: the -dev package of every library drover.pc links (-lNAME -> libNAME.so).
declare -A sdk=()
multiarch="$(gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)"
for f in $(PKG_CONFIG_PATH="$root/lib/pkgconfig" pkg-config --libs drover); do
  [[ "$f" == -l* && "$f" != -ldrover_sdk ]] || continue
  path=""
  # A shared library first, else the static one (glibc's -lrt is only librt.a); in the
  # multiarch folders or the compiler's own (libatomic.so is in gcc's folder).
  for lib in "lib${f#-l}.so" "lib${f#-l}.a"; do
    for d in "/usr/lib/$multiarch" /usr/lib "/lib/$multiarch"; do
      [[ -e "$d/$lib" ]] && { path="$d/$lib"; break 2; }
    done
    c="$(g++ -print-file-name="$lib" 2>/dev/null || true)"
    [[ "$c" == /* && -e "$c" ]] && { path="$c"; break; }
  done
  if [[ -z "$path" ]]; then
    echo "package: drover.pc links $f, but no lib${f#-l}.so or .a was found" >&2
    exit 1
  fi
  pkg="$(owner "$path")" || { echo "package: no Debian package owns $path (drover.pc's $f)" >&2; exit 1; }
  sdk[$pkg]=1
done
for pkg in pkg-config g++; do sdk[$pkg]=1; done

{
  echo "# GROUP PACKAGE: the Debian $debian ($arch) packages drover $version needs."
  echo "# runtime: the binaries' shared libraries; demo: scripts/demo.sh's jobs;"
  echo "# optional: drover up --redis; sdk: building against lib/libdrover_sdk.a."
  printf '%s\n' "${!runtime[@]}" | sort | sed 's/^/runtime /'
  printf 'demo %s\n' python3 python3-torch
  printf 'optional %s\n' redis-server
  printf '%s\n' "${!sdk[@]}" | sort | sed 's/^/sdk /'
} > "$share/packages.txt"

{
  echo "version $version"
  echo "bazel_flags ${flags[*]}"
  echo "debian $(cat /etc/debian_version 2>/dev/null || echo unknown)"
  echo "arch $arch"
} > "$share/BUILDINFO"

mkdir -p "$out"
out="$(cd "$out" && pwd)"
archive="$out/$name.tar.gz"
tar -C "$stage" --owner=0 --group=0 -czf "$archive.tmp" "$name"
mv "$archive.tmp" "$archive"
echo "package: wrote $archive ($(du -h "$archive" | cut -f1); runtime packages: $(grep -c '^runtime ' "$share/packages.txt"))"
