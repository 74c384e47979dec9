#!/usr/bin/env bash
# The demo: installs what is missing, builds, starts a local 2-node cluster, runs a
# 4-process PyTorch DDP job whose ranks meet through MASTER_ADDR/MASTER_PORT, shows
# the cluster and the job, and stops the cluster. Runs as root or as a user (sudo is
# used only to install missing packages).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh demo
setup_s=$SECONDS
echo "demo: building (the first build takes a few minutes on 2 cores)"
bazel build //cli:drover 2>&1 | tail -1
build_s=$((SECONDS - setup_s))
DROVER="$(bazel info bazel-bin 2>/dev/null)/cli/drover"
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
echo "demo: done in ${SECONDS} s (packages ${setup_s} s, build ${build_s} s, cluster and jobs $((SECONDS - setup_s - build_s)) s)"
