#!/usr/bin/env bash
# Fuzzes for longer than the test suite's short runs (docs/fuzzing.md).
#
#   scripts/fuzz.sh TARGET [SECONDS]   fuzz //fuzz:TARGET for SECONDS (default 600); new
#                                      inputs and any crash go to $DROVER_FUZZ_DIR/TARGET
#                                      (default /tmp/drover-fuzz/TARGET), kept between runs
#   scripts/fuzz.sh all [SECONDS]      each target in turn
#   scripts/fuzz.sh --merge TARGET     adds what the runs found that covers new code to the
#                                      seed corpus in the tree (fuzz/TARGET/corpus), minimized
#
# TARGET is a name under fuzz/ (store_requests, task_frames, scheduler_core, ...). A crash
# prints its input file; reproduce with `bazel run //fuzz:TARGET -- FILE`, fix, and add
# the input to the corpus as regression-<what> plus a unit test in the normal suite.
set -euo pipefail
cd "$(dirname "$0")/.."
root="${DROVER_FUZZ_DIR:-/tmp/drover-fuzz}"

targets() { sed -n 's/^    name = "\([a-z_]*\)",$/\1/p' fuzz/BUILD | while read -r t; do
  [ -d "fuzz/$t/corpus" ] && echo "$t"; done; }

fuzzer() {  # builds TARGET's fuzzer (clang, ASan, UBSan) and prints its path
  bazel build "//fuzz:$1" >&2
  echo "bazel-bin/fuzz/$1.sh.runfiles/drover/fuzz/$1_fuzzer"
}

if [ "${1:-}" = "--merge" ]; then
  t="${2:?usage: scripts/fuzz.sh --merge TARGET}"
  bin=$(fuzzer "$t")
  before=$(ls "fuzz/$t/corpus" | wc -l)
  "$bin" -merge=1 "fuzz/$t/corpus" "$root/$t"
  echo "fuzz/$t/corpus: $before -> $(ls "fuzz/$t/corpus" | wc -l) inputs"
  exit 0
fi

t="${1:?usage: scripts/fuzz.sh TARGET|all [SECONDS] | --merge TARGET}"
seconds="${2:-600}"
if [ "$t" = "all" ]; then
  for each in $(targets); do "$0" "$each" "$seconds"; done
  exit 0
fi
mkdir -p "$root/$t"
bin=$(fuzzer "$t")
echo "fuzz: $t for ${seconds}s; new inputs and crashes in $root/$t"
ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}" \
  "$bin" -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=256 -timeout=10 \
  -print_final_stats=1 -artifact_prefix="$root/$t/" "$root/$t" "fuzz/$t/corpus"
