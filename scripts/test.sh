#!/usr/bin/env bash
# Runs the whole test suite: installs what is missing, then `bazel test //...`.
# Tests start their own daemons and redis-server on free loopback ports.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bazel test //... "$@"
