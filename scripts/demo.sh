#!/usr/bin/env bash
# The demo: installs what is missing, gets drover, starts a local 2-node cluster, runs a
# 4-process PyTorch DDP job whose ranks meet through MASTER_ADDR/MASTER_PORT, shows
# the cluster and the job, and stops the cluster. Runs as root or as a user (sudo is
# used only to install missing packages).
#
# drover comes from a release archive (scripts/package.sh) when one is given or found:
#   DROVER_RELEASE=/path/to/drover-*.tar.gz or an http(s) URL, else the newest
#   dist/drover-*.tar.gz of this checkout. Only the runtime packages its
#   share/drover/packages.txt lists are installed (no compiler, no Bazel), and it is
#   unpacked into dist/. Without one, drover is built from source (Bazel).
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"

release="${DROVER_RELEASE:-}"
if [ -z "$release" ]; then
  release="$(ls -t dist/drover-*.tar.gz 2>/dev/null | head -1 || true)"
fi

if [ -n "$release" ]; then
  case "$release" in
    http://*|https://*)
      mkdir -p dist
      file="dist/$(basename "${release%%\?*}")"
      echo "demo: downloading $release"
      if command -v curl >/dev/null 2>&1; then
        curl -fsSL -o "$file.part" "$release"
      elif command -v wget >/dev/null 2>&1; then
        wget -q -O "$file.part" "$release"
      elif command -v python3 >/dev/null 2>&1; then
        python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$release" "$file.part"
      else
        # A minimal Debian has none of them: curl (and the CA certificates https needs).
        echo "demo: installing curl to download it"
        sudo_=()
        [ "$(id -u)" -eq 0 ] || sudo_=(sudo)
        "${sudo_[@]}" apt-get update -qq
        "${sudo_[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends curl ca-certificates >/dev/null
        curl -fsSL -o "$file.part" "$release"
      fi
      mv "$file.part" "$file"
      release="$file" ;;
  esac
  if [ ! -f "$release" ]; then
    echo "demo: DROVER_RELEASE=$release: no such file" >&2
    exit 1
  fi
  release="$(cd "$(dirname "$release")" && pwd)/$(basename "$release")"
  name="$(basename "$release" .tar.gz)"
  case "$name" in
    drover-*-debian12-*) ;;
    *) echo "demo: $release is not named like a scripts/package.sh archive (drover-<version>-debian12-<arch>.tar.gz)" >&2
       exit 1 ;;
  esac
  if [ "$(dpkg --print-architecture 2>/dev/null)" != "${name##*-}" ]; then
    echo "demo: $name is built for ${name##*-}, this machine is $(dpkg --print-architecture 2>/dev/null || echo 'not Debian')" >&2
    exit 1
  fi
  echo "demo: using the release archive $release"
  mkdir -p dist
  dest="$repo/dist/$name"
  if [ ! -x "$dest/bin/drover" ] || [ "$release" -nt "$dest/bin/drover" ]; then
    rm -rf "$dest"
    top="$(tar -tzf "$release" 2>/dev/null | head -1 || true)"
    if [ "${top%%/*}" != "$name" ]; then
      echo "demo: $release does not hold a folder $name/: not a scripts/package.sh archive" >&2
      exit 1
    fi
    tar -C dist -xzf "$release"
    touch "$dest/bin/drover"
  fi
  bash scripts/setup.sh release "$dest/share/drover/packages.txt"
  setup_s=$SECONDS
  # Every shared library found, or a clear error now rather than a daemon that fails to start.
  missing="$(ldd "$dest"/bin/* 2>/dev/null | awk '/not found/ {print $1}' | sort -u | tr '\n' ' ' || true)"
  if [ -n "$missing" ]; then
    echo "demo: the release's binaries cannot load ${missing}(not in $dest/share/drover/packages.txt?)" >&2
    exit 1
  fi
  DROVER="$dest/bin/drover"
  build_s=0
  how="release archive"
else
  bash scripts/setup.sh demo
  setup_s=$SECONDS
  echo "demo: no release archive (DROVER_RELEASE, or dist/drover-*.tar.gz from scripts/package.sh):"
  echo "demo: building from source, the first build takes a few minutes on 2 cores;"
  echo "demo: a release archive makes a fresh machine's demo ~4 times faster (72-131 s measured, not ~7 min; docs/build.md)"
  bazel build //cli:drover 2>&1 | tail -1
  build_s=$((SECONDS - setup_s))
  DROVER="$(bazel info bazel-bin 2>/dev/null)/cli/drover"
  how="source"
fi

export DROVER_HOME="${DROVER_HOME:-$(mktemp -d /tmp/drover-demo.XXXXXX)}"
trap '"$DROVER" down >/dev/null 2>&1 || true' EXIT

"$DROVER" up --nodes 2 --gpus-per-node 2 --kill-grace-ms 2000
echo
echo "demo: drover run --nodes 2 --nproc-per-node 2 -- python3 examples/ddp_train.py"
"$DROVER" run --nodes 2 --nproc-per-node 2 -- /usr/bin/python3 examples/ddp_train.py
echo
echo "demo: a job whose rank 1 fails; drover stops the others and says why:"
set +e
"$DROVER" run --nproc 2 -- sh -c 'if [ $RANK = 1 ]; then echo "bad input shard" >&2; exit 3; fi; sleep 60'
echo "demo: drover run exited with $?"
set -e
echo
"$DROVER" status
echo
"$DROVER" jobs
"$DROVER" down
trap - EXIT
if [ "$how" = source ]; then
  echo "demo: done in ${SECONDS} s from source (packages ${setup_s} s, build ${build_s} s, cluster and jobs $((SECONDS - setup_s - build_s)) s)"
else
  echo "demo: done in ${SECONDS} s from the release archive (unpack and packages ${setup_s} s, cluster and jobs $((SECONDS - setup_s)) s)"
  echo "demo: drover is in $dest/bin (add it to PATH to use it)"
fi
