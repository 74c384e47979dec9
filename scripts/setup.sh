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
  # run and test
  redis-server iproute2 procps python3 python3-torch
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

if [ ! -e /usr/local/cuda/include/cuda_runtime.h ]; then
  echo "setup: note: no CUDA Toolkit under /usr/local/cuda; the GPU paths are not built"
fi
