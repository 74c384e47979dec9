#!/usr/bin/env bash
# Installs every Debian package drover needs to build, test and run. Safe to run
# again: it installs only what is missing. Needs root (or sudo).
set -euo pipefail

PACKAGES=(
  # build
  bazel-bootstrap g++ pkg-config
  protobuf-compiler protobuf-compiler-grpc libprotobuf-dev libgrpc++-dev libabsl-dev
  libhiredis-dev libcli11-dev nlohmann-json3-dev libgtest-dev libgmock-dev libgloo-dev
  libmsgpack-cxx-dev libssl-dev
  # metrics (/metrics) and the dashboard's HTTP server
  prometheus-cpp-dev libcpp-httplib-dev
  # the Python module for PyTorch consumers (//python:drover)
  pybind11-dev python3-dev
  # fuzzing (//bazel/fuzz: libFuzzer, ASan and UBSan runtimes, the symbolizer)
  clang-14 libclang-rt-14-dev libfuzzer-14-dev llvm-14
  # run and test
  redis-server iproute2 procps python3 python3-torch
  # the dashboard's browser test (tests/dashboard)
  chromium
  # test deploy/: systemd-analyze (systemd), a local Slurm (tests/deploy_slurm_test.cc)
  systemd slurmctld slurmd slurm-client munge
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
else
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "setup: installed ${#missing[@]} packages"
  # Debian enables the Slurm daemons it just installed; the tests start their own (with
  # their own config), so a machine that had no Slurm keeps none running.
  if [ -d /run/systemd/system ]; then
    for unit in slurmd slurmctld; do
      if [[ " ${missing[*]} " == *" $unit "* ]]; then
        $SUDO systemctl disable --now "$unit" >/dev/null 2>&1 || true
      fi
    done
  fi
fi

# The dashboard's browser test (tests/dashboard_browser_test) drives Debian's chromium
# with playwright-core from npm, pinned by tests/dashboard/package-lock.json and
# installed into tests/dashboard/node_modules (not committed). It never downloads a
# browser. playwright-core 1.65 needs node >= 20 (the machine image has it).
repo="$(cd "$(dirname "$0")/.." && pwd)"
if ! command -v npm >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
if [ ! -e "$repo/tests/dashboard/node_modules/playwright-core/package.json" ]; then
  echo "setup: installing playwright-core into tests/dashboard/node_modules"
  (cd "$repo/tests/dashboard" &&
   PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --ignore-scripts --loglevel=error)
fi

if [ ! -e /usr/local/cuda/include/cuda_runtime.h ]; then
  echo "setup: note: no CUDA Toolkit under /usr/local/cuda; the GPU paths are not built"
fi
