#!/usr/bin/env bash
# Installs the Debian packages drover needs. Safe to run again: it installs only what is
# missing. Runs as root, or as a user with sudo (used only for apt-get and systemctl).
#
#   bash scripts/setup.sh demo   what scripts/demo.sh needs: build //cli:drover and its
#                                daemons, run redis-server and the PyTorch DDP example
#   bash scripts/setup.sh [test] everything: the demo's packages, and what the whole
#                                suite, the Python module and fuzzing need (Chromium,
#                                Slurm, munge, clang/libFuzzer, Gloo, gtest, npm's
#                                playwright-core)
#   bash scripts/setup.sh release PACKAGES_TXT
#                                what a release archive's binaries and the demo's jobs
#                                need: the 'runtime' and 'demo' lines of its
#                                share/drover/packages.txt (no compiler, no -dev, no Bazel)
set -euo pipefail

profile="${1:-test}"
case "$profile" in
  demo|test) ;;
  release)
    manifest="${2:-}"
    if [ -z "$manifest" ] || [ ! -r "$manifest" ]; then
      echo "setup: 'release' needs a release archive's packages.txt (got '${manifest}')" >&2
      exit 2
    fi ;;
  *) echo "setup: unknown profile '$profile' (expected 'demo', 'test' or 'release PACKAGES_TXT')" >&2; exit 2 ;;
esac

# Runs a command as root: directly when root, else through sudo (never asked for when
# nothing needs installing).
as_root() {
  if [ "$(id -u)" -eq 0 ]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@"
  else
    echo "setup: '$*' needs root: run this as root, or as a user with sudo" >&2
    exit 1
  fi
}

DEMO_PACKAGES=(
  # build //cli:drover and the daemons (bazel/system_libs.bzl runs pkg-config for each)
  bazel-bootstrap g++ pkg-config
  protobuf-compiler protobuf-compiler-grpc libprotobuf-dev libgrpc++-dev libabsl-dev
  libhiredis-dev libcli11-dev nlohmann-json3-dev libmsgpack-cxx-dev libssl-dev
  # metrics (/metrics) and the dashboard's HTTP server
  prometheus-cpp-dev libcpp-httplib-dev
  # run: the cluster's Redis, and the demo's PyTorch DDP job
  redis-server iproute2 procps python3 python3-torch
)

TEST_PACKAGES=(
  # the rest of the build: tests, collectives, the Python module (//python:drover)
  libgtest-dev libgmock-dev libgloo-dev pybind11-dev python3-dev
  # tests/cmake_install_test.sh: the SDK installed by scripts/install.sh, built with CMake
  cmake
  # fuzzing (//bazel/fuzz: libFuzzer, ASan and UBSan runtimes, the symbolizer)
  clang-14 libclang-rt-14-dev libfuzzer-14-dev llvm-14
  # the dashboard's browser test (tests/dashboard)
  chromium
  # test deploy/: systemd-analyze (systemd), a local Slurm (tests/deploy_slurm_test.cc)
  systemd slurmctld slurmd slurm-client munge
)

PACKAGES=("${DEMO_PACKAGES[@]}")
if [ "$profile" = test ]; then PACKAGES+=("${TEST_PACKAGES[@]}"); fi
if [ "$profile" = release ]; then
  mapfile -t PACKAGES < <(awk '$1 == "runtime" || $1 == "demo" {print $2}' "$manifest")
  if [ ${#PACKAGES[@]} -eq 0 ]; then
    echo "setup: $manifest lists no runtime packages: not a drover release manifest" >&2
    exit 2
  fi
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages of '$profile' present"
else
  echo "setup: installing ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "setup: installed ${#missing[@]} packages"
  # Debian enables the Slurm daemons it just installed; the tests start their own (with
  # their own config), so a machine that had no Slurm keeps none running.
  if [ -d /run/systemd/system ]; then
    for unit in slurmd slurmctld; do
      if [[ " ${missing[*]} " == *" $unit "* ]]; then
        as_root systemctl disable --now "$unit" >/dev/null 2>&1 || true
      fi
    done
  fi
fi

if [ "$profile" != test ]; then exit 0; fi

# The dashboard's browser test (tests/dashboard_browser_test) drives Debian's chromium
# with playwright-core from npm, pinned by tests/dashboard/package-lock.json and
# installed into tests/dashboard/node_modules (not committed). It never downloads a
# browser. playwright-core 1.65 needs node >= 20 (the machine image has it).
repo="$(cd "$(dirname "$0")/.." && pwd)"
if ! command -v npm >/dev/null 2>&1; then
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
if [ ! -e "$repo/tests/dashboard/node_modules/playwright-core/package.json" ]; then
  echo "setup: installing playwright-core into tests/dashboard/node_modules"
  (cd "$repo/tests/dashboard" &&
   PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --ignore-scripts --loglevel=error)
fi

if [ ! -e /usr/local/cuda/include/cuda_runtime.h ]; then
  echo "setup: note: no CUDA Toolkit under /usr/local/cuda; the GPU paths are not built"
fi
