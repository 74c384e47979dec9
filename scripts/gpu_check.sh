#!/usr/bin/env bash
# The GPU paths of drover, checked on a machine with an NVIDIA GPU (docs/gpu.md).
#
#   scripts/gpu_check.sh pack            on a build machine (Bazel, Debian 12): builds -c opt,
#                                        strips, and packs the daemons, the CLI, the check
#                                        program and the libraries they need into gpu_pack/
#   scripts/gpu_check.sh run             on the GPU machine, as root, from the repository root
#                                        with gpu_pack/ beside it: nothing is installed or
#                                        fetched; prints one line per check
#                                          GPUCHECK PASS|FAIL|SKIP <name> <detail>
#                                        and a summary line; exit 0 unless a check FAILed
#   scripts/gpu_check.sh run --stand-in  here, without a GPU: the stand-in NVML and CUDA
#                                        (gpu_pack/testing/) instead of the driver's; the
#                                        checks that need a real device say SKIP and why
#
# With the device tool (one call; the pack must be made first, here):
#   run(command="set -o pipefail; bash scripts/gpu_check.sh run 2>&1 | tee $OUT/gpu_check.log",
#       carry=["gpu_pack"], timeout_s=540)
# The whole run is bounded (each step has a timeout within a 450 s budget). With a FAIL,
# the cluster's logs come back as $OUT/cluster_logs.tar.gz.
# CUDA and NCCL come from the GPU machine: drover loads libcudart and libnccl with
# dlopen; when the default search (/usr/local/cuda/lib64, ldconfig) finds none, this
# script looks in PyTorch's site-packages and exports DROVER_CUDA_RUNTIME_LIBRARY /
# DROVER_NCCL_LIBRARY.
set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PACK="$ROOT/gpu_pack"
# Where `run` unpacks the pack. Fixed, because it is also the binaries' second rpath
# entry: a task program (drover-gpucheck) is shipped to the agents' package cache as
# the binary alone, where $ORIGIN/../lib is not the pack's lib/.
UNPACKED=/tmp/drover-gpu-pack

die() { echo "gpu_check.sh: $*" >&2; exit 2; }

# ---------------------------------------------------------------- pack
pack() {
  command -v bazel >/dev/null || die "pack needs bazel (build machine)"
  command -v patchelf >/dev/null || die "pack needs patchelf: apt-get install patchelf"
  local bins=(scheduler:drover-scheduler node_agent:drover-agent node_agent:drover-launch
              cli:drover object_store:drover-object-store tests/gpu:drover-gpucheck)
  local targets=() t
  for t in "${bins[@]}"; do targets+=("//$t"); done
  # The stand-ins, for `run --stand-in` on machines without a GPU.
  targets+=(//node_agent:libfake_nvml.so //gpu:libfake_cuda.so)
  bazel build -c opt "${targets[@]}" || die "bazel build failed"
  local out
  out=$(bazel info -c opt bazel-bin) || die "bazel info failed"
  # Staged outside the tree, then one gzip'd tar in gpu_pack/ (the binaries hold gRPC,
  # protobuf and Abseil statically, ~15 MB each stripped: 73 MB loose, ~30 MB packed).
  local STAGE
  STAGE=$(mktemp -d /tmp/gpu_pack_stage.XXXXXX)/pack
  mkdir -p "$STAGE/bin" "$STAGE/lib" "$STAGE/testing"
  for t in "${bins[@]}"; do
    install -m 0755 "$out/${t%%:*}/${t##*:}" "$STAGE/bin/"
  done
  install -m 0755 "$out/node_agent/libfake_nvml.so" "$out/gpu/libfake_cuda.so" "$STAGE/testing/"
  strip --strip-unneeded "$STAGE"/bin/* "$STAGE"/testing/*.so
  # What the binaries link beyond glibc, the GCC runtime and the driver: carried in lib/,
  # found through an rpath of $ORIGIN/../lib. glibc comes from the machine (the binaries
  # need GLIBC_2.34 at most), and so do libstdc++ and libgcc_s (GLIBCXX_3.4.30, GCC 12+):
  # copies travel in gccrt/, off the rpath, because Debian 12's libstdc++ needs glibc
  # 2.36; `run` puts them on LD_LIBRARY_PATH only if the machine's are missing or too old.
  local base='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libutil|libnss_.*|libanl|libmvec|libstdc\+\+|libgcc_s)\.so'
  mkdir -p "$STAGE/gccrt"
  cp -L "$(g++ -print-file-name=libstdc++.so.6)" "$(gcc -print-file-name=libgcc_s.so.1)" "$STAGE/gccrt/" || die "no libstdc++"
  chmod 0644 "$STAGE"/gccrt/*
  strip --strip-unneeded "$STAGE"/gccrt/*
  local lib path name
  local queue=("$STAGE"/bin/*)
  local seen=" "
  while ((${#queue[@]})); do
    local f=${queue[0]}
    queue=("${queue[@]:1}")
    while read -r name path; do
      [[ -n "$path" && -f "$path" ]] || continue
      [[ "$name" =~ $base ]] && continue
      case "$name" in libcuda.so*|libnvidia-*|libcudart*|libnccl*) continue ;; esac
      [[ "$seen" == *" $name "* ]] && continue
      seen+="$name "
      cp -L "$path" "$STAGE/lib/$name"
      chmod 0644 "$STAGE/lib/$name"
      queue+=("$STAGE/lib/$name")
    done < <(ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}')
  done
  strip --strip-unneeded "$STAGE"/lib/*.so* 2>/dev/null
  for f in "$STAGE"/bin/*; do
    # drover-launch is static; patchelf refuses it and it needs nothing.
    if readelf -d "$f" 2>/dev/null | grep -q NEEDED; then
      patchelf --set-rpath "\$ORIGIN/../lib:$UNPACKED/lib" "$f" || die "patchelf $f"
    fi
  done
  for f in "$STAGE"/lib/*; do patchelf --set-rpath '$ORIGIN' "$f" || die "patchelf $f"; done
  # Nothing may still resolve outside the pack but glibc (and no CUDA at all).
  local missing=0
  for f in "$STAGE"/bin/* "$STAGE"/lib/*; do
    while read -r name path; do
      [[ "$name" =~ $base ]] && continue
      path=$(realpath -m "$path")
      if [[ "$path" != "$(realpath "$STAGE")/lib/"* ]]; then
        echo "gpu_check.sh: $f still takes $name from $path" >&2
        missing=1
      fi
    done < <(ldd "$f" 2>/dev/null | awk '$2 == "=>" {print $1, $3}')
  done
  ((missing == 0)) || die "some libraries are not in the pack"
  rm -rf "$PACK"
  mkdir -p "$PACK"
  tar -C "$STAGE" -czf "$PACK/pack.tar.gz" bin lib gccrt testing || die "tar failed"
  {
    echo "commit $(git rev-parse HEAD 2>/dev/null)$(git diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"
    echo "built $(date -u +%FT%TZ) on $(. /etc/os-release; echo "$PRETTY_NAME"), -c opt, stripped"
    echo "glibc $(ldd --version | head -1 | awk '{print $NF}')"
    echo "pack.tar.gz holds (bytes):"
    (cd "$STAGE" && du -b bin/* lib/* gccrt/* testing/* | awk '{printf "%10d %s\n", $1, $2}')
  } > "$PACK/MANIFEST"
  rm -rf "$(dirname "$STAGE")"
  local size tree
  size=$(du -sb "$PACK" | awk '{print $1}')
  tree=$( (git ls-files -z; git ls-files -z --others --exclude-standard) | du -cb --files0-from=- 2>/dev/null | tail -1 | awk '{print $1}')
  echo "gpu_pack: $((size / 1048576)) MiB ($size bytes); working tree $((tree / 1048576)) MiB; together $(((size + tree) / 1048576)) MiB of 64"
  (( size + tree < 64 * 1048576 )) || die "pack plus working tree is over 64 MiB"
  cat "$PACK/MANIFEST"
}

# ---------------------------------------------------------------- run
PASS=0 FAIL=0 SKIP=0
LOG=""
res() {  # res PASS|FAIL|SKIP name detail...
  local v=$1 n=$2
  shift 2
  local line="GPUCHECK $v $n $*"
  echo "$line"
  [[ -n "$LOG" ]] && echo "$line" >> "$LOG.results"
  case $v in PASS) PASS=$((PASS + 1)) ;; FAIL) FAIL=$((FAIL + 1)) ;; *) SKIP=$((SKIP + 1)) ;; esac
}
note() { echo "  $*"; }
# A line of output after KEY (first match), or "".
field() { sed -n "s/^$1 //p" <<<"$2" | head -1; }
# The value of name=value in a line.
kv() { tr ' ' '\n' <<<"$2" | sed -n "s/^$1=//p" | head -1; }

# A step's timeout: its own limit, cut to what is left of the run's budget (RUN_BUDGET
# seconds from the start, default 450), so that a hung step cannot push the summary past
# 8 minutes; at least 5 s.
T() {
  local left=$((${RUN_BUDGET:-450} - (SECONDS - T0)))
  ((left < 5)) && left=5
  echo $(($1 < left ? $1 : left))
}

# The first file matching a name under the given roots (shallow globs, never a whole-disk walk).
find_lib() {  # find_lib NAME DIR...
  local name=$1 d f
  shift
  for d in "$@"; do
    for f in "$d"/$name; do [[ -e "$f" ]] && { echo "$f"; return 0; }; done
  done
  return 1
}

run() {
  local stand_in=0
  [[ "${1:-}" == "--stand-in" ]] && stand_in=1
  [[ -f "$PACK/pack.tar.gz" ]] || die "no $PACK/pack.tar.gz: run 'scripts/gpu_check.sh pack' on a build machine and carry gpu_pack"
  local work
  work=$(mktemp -d /tmp/gpucheck.XXXXXX)
  PK="$UNPACKED"
  rm -rf "$PK"
  mkdir -p "$PK"
  tar -C "$PK" -xzf "$PACK/pack.tar.gz" || die "cannot unpack $PACK/pack.tar.gz"
  export PATH="$PK/bin:$PATH"
  export DROVER_HOME="$work/home"
  mkdir -p "$DROVER_HOME"
  LOG="$work/log"
  [[ -n "${OUT:-}" && -d "${OUT:-}" ]] && LOG="$OUT/gpu_check"
  local t0=$SECONDS
  T0=$SECONDS
  local py
  py=$(command -v python3 || true)
  echo "gpucheck: $(date -u +%FT%TZ) on $(uname -srm); pack: $(head -1 "$PACK/MANIFEST" 2>/dev/null)"

  # ---- the machine
  local smi=0 gpus=0 names="" mems="" uuids=""
  if ((stand_in)); then
    export DROVER_NVML_LIBRARY="$PK/testing/libfake_nvml.so"
    export DROVER_FAKE_NVML_DEVICES="NVIDIA H100 80GB HBM3|85520809984|GPU-0a0a0a0a-0000-0000-0000-000000000000"
    export DROVER_CUDA_RUNTIME_LIBRARY="$PK/testing/libfake_cuda.so"
    export DROVER_NCCL_LIBRARY="$PK/testing/libfake_cuda.so"
    export DROVER_FAKE_CUDA_DEVICES=1
    gpus=1 names="NVIDIA H100 80GB HBM3" mems=81559 uuids="GPU-0a0a0a0a-0000-0000-0000-000000000000"
    note "stand-in: NVML and CUDA/NCCL are gpu_pack/testing's stand-ins, no GPU is used"
  elif command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    smi=1
    local q
    q=$(timeout $(T 30) nvidia-smi --query-gpu=name,memory.total,uuid,driver_version --format=csv,noheader,nounits)
    gpus=$(grep -c . <<<"$q")
    names=$(cut -d, -f1 <<<"$q" | sed 's/^ *//' | paste -sd';')
    mems=$(cut -d, -f2 <<<"$q" | tr -d ' ' | paste -sd';')
    uuids=$(cut -d, -f3 <<<"$q" | tr -d ' ' | paste -sd';')
    note "nvidia-smi: $gpus GPU(s): $names; memory MiB $mems; driver $(cut -d, -f4 <<<"$q" | head -1 | tr -d ' ')"
    note "uuids: $uuids"
    # NVML: the agent dlopens libnvidia-ml.so.1; name it if the loader cannot find it.
    if ! ldconfig -p 2>/dev/null | grep -q 'libnvidia-ml.so.1 '; then
      local nvml
      if nvml=$(find_lib libnvidia-ml.so.1 /usr/local/nvidia/lib64 /usr/local/nvidia/lib \
                  /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/cuda/lib64/stubs); then
        export DROVER_NVML_LIBRARY="$nvml"
        note "NVML: $nvml"
      fi
    fi
  else
    note "no nvidia-smi or no GPU: the checks that need one will SKIP (use --stand-in here)"
  fi

  # ---- the pack starts here (no library missing)
  if ! drover --help >/dev/null 2>&1 && LD_LIBRARY_PATH="$PK/gccrt${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" drover --help >/dev/null 2>&1; then
    export LD_LIBRARY_PATH="$PK/gccrt${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    note "this machine's libstdc++ is missing or older than GCC 12's: using the pack's (gccrt/)"
  fi
  local bad="" b
  for b in drover drover-scheduler drover-agent drover-object-store drover-gpucheck; do
    timeout $(T 20) "$b" --help >/dev/null 2>&1 || bad+=" $b($?)"
  done
  if [[ -z "$bad" ]]; then res PASS pack_starts "drover, drover-scheduler, drover-agent, drover-object-store, drover-gpucheck --help"
  else res FAIL pack_starts "failed:$bad; ldd: $(ldd "$PK/bin/drover" 2>&1 | grep 'not found' | head -3 | tr '\n' ' ')"; fi

  # ---- CUDA runtime and NCCL: which were loaded
  local info
  info=$(timeout $(T 60) drover-gpucheck info 2>&1)
  if ((!stand_in)) && grep -q "^INFO cuda .*could not be loaded" <<<"$info"; then
    local sp cudart
    sp=$("${py:-python3}" -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
    local dirs=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-13*/lib64)
    for d in $sp; do dirs+=("$d/nvidia/cu13/lib" "$d/nvidia/cuda_runtime/lib" "$d"/nvidia/*/lib "$d/torch/lib"); done
    if cudart=$(find_lib 'libcudart.so.13*' "${dirs[@]}"); then export DROVER_CUDA_RUNTIME_LIBRARY="$cudart"; fi
  fi
  if ((!stand_in)) && grep -q "^INFO nccl .*could not be loaded" <<<"$info"; then
    local sp nccl
    sp=$("${py:-python3}" -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
    local dirs=(/usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu)
    for d in $sp; do dirs+=("$d/nvidia/nccl/lib" "$d/nvidia/cu13/lib" "$d"/nvidia/*/lib "$d/torch/lib"); done
    if nccl=$(find_lib 'libnccl.so.2*' "${dirs[@]}"); then export DROVER_NCCL_LIBRARY="$nccl"; fi
  fi
  [[ -n "${DROVER_CUDA_RUNTIME_LIBRARY:-}${DROVER_NCCL_LIBRARY:-}" ]] && info=$(timeout $(T 60) drover-gpucheck info 2>&1)
  local rc_info=$?
  sed 's/^/  /' <<<"$info"
  local cuda_line nccl_line
  cuda_line=$(field "INFO cuda" "$info")
  nccl_line=$(field "INFO nccl" "$info")
  if [[ "$cuda_line" == "CUDA runtime "* ]]; then res PASS cuda_runtime_loaded "$cuda_line"
  elif ((gpus == 0)); then res SKIP cuda_runtime_loaded "no GPU machine: $cuda_line"
  else res FAIL cuda_runtime_loaded "$cuda_line"; fi
  if [[ "$nccl_line" == "NCCL "* ]]; then res PASS nccl_loaded "$nccl_line"
  elif ((gpus == 0)); then res SKIP nccl_loaded "no GPU machine: $nccl_line"
  else res FAIL nccl_loaded "$nccl_line"; fi
  local has_cuda=0
  [[ $rc_info == 0 ]] && has_cuda=1

  if ((gpus == 0)); then
    for c in nvml_discovery status_shows_gpus job_gpu_pinning task_gpu_pinning too_many_gpus_refused \
             copier_1MiB copier_1GiB copier_bandwidth dataloader_pin_memory nccl_allreduce nccl_abort \
             ddp_nccl no_gpu_process_after_down; do
      res SKIP "$c" "no GPU on this machine (nvidia-smi finds none; --stand-in runs the stand-in part)"
    done
    summary "$t0"
    return
  fi

  # ---- a one-node cluster that discovers its GPUs (a small store: registering the
  # whole arena with CUDA, as the DataLoader does, pins all of it)
  export DROVER_OBJECT_STORE_MEMORY=$((4 << 30))
  local up
  if ! up=$(timeout $(T 90) drover up --nodes 1 --timeout $(T 60) 2>&1); then
    res FAIL cluster_up "drover up: $(tail -5 <<<"$up" | tr '\n' ' ')"
    summary "$t0"
    return
  fi
  note "cluster up ($((SECONDS - t0)) s)"

  # ---- NVML discovery: count from the scheduler, name/memory/UUID from the agent's log
  local st st_text alog
  st=$(timeout $(T 30) drover status --json 2>&1)
  st_text=$(timeout $(T 30) drover status 2>&1)
  alog=$(find "$DROVER_HOME" -name 'agent-0.log' | head -1)
  local seen_count seen
  # Sum of every node's total GPUs in the JSON (no python needed).
  seen_count=$(tr -d '\n' <<<"$st" | grep -oE '"total": *\{[^}]*\}' | grep -oE '"gpus": *[0-9]+' | awk -F: '{n += $2} END {print n + 0}')
  seen=$(grep -o 'GPU [0-9]*: .*' "$alog" 2>/dev/null | sed 's/^GPU [0-9]*: //' | paste -sd';')
  local want i ok=1 IFS_save=$IFS
  IFS=';' read -r -a an <<<"$names"; IFS=';' read -r -a am <<<"$mems"; IFS=';' read -r -a au <<<"$uuids"
  IFS=$IFS_save
  want=""
  for ((i = 0; i < gpus; i++)); do want+="${an[i]}, ${am[i]} MiB, ${au[i]};"; done
  want=${want%;}
  if [[ "$seen_count" == "$gpus" && "$seen" == "$want" ]]; then res PASS nvml_discovery "$gpus GPU(s): $seen"
  else res FAIL nvml_discovery "scheduler counts $seen_count, agent log says '$seen', nvidia-smi '$want'"; fi
  local model=${an[0]}
  # One GPU shows as "1/1 <model>", several as "N/N Nx <model>".
  local shown
  shown=$(grep -oE "${gpus}/${gpus} (${gpus}x )?${model}" <<<"$st_text" | head -1)
  if [[ -n "$shown" && ( $gpus == 1 || "$shown" == *"${gpus}x "* ) ]]; then
    res PASS status_shows_gpus "drover status: GPUS FREE/TOTAL $shown"
  else res FAIL status_shows_gpus "drover status: $(tr '\n' ' ' <<<"$st_text" | cut -c1-300)"; fi

  # ---- a job with gpus=1 sees exactly its device
  local out probe cvd
  out=$(timeout $(T 60) drover run --nproc 1 --gpus-per-proc 1 -- "$PK/bin/drover-gpucheck" probe 2>&1)
  probe=$(grep -o 'PROBE .*' <<<"$out" | head -1)
  check_probe job_gpu_pinning "$probe" "$out"

  # ---- a task with gpus=1 (and the DataLoader's pin_memory into CopyToDevice)
  out=$(timeout $(T 120) drover-gpucheck tasks 2>&1)
  probe=$(grep -o 'TASK .*' <<<"$out" | head -1 | sed 's/^TASK/PROBE/')
  check_probe task_gpu_pinning "$probe" "$out"
  local loader
  loader=$(grep -o 'LOADER items=.*' <<<"$out" | head -1)
  if [[ "$(kv items "$loader")" == 8 && "$(kv exact "$loader")" == 8 && "$(kv in_store "$loader")" == 8 ]]; then
    res PASS dataloader_pin_memory "8 pinned 1 MiB batches through CopyToDevice, bytes exact ($(field 'LOADER copier' "$out"))"
  else res FAIL dataloader_pin_memory "${loader:-$(tail -3 <<<"$out" | tr '\n' ' ')}"; fi

  # ---- more GPUs than the machine has: refused
  out=$(timeout $(T 60) drover run --nproc 1 --gpus-per-proc $((gpus + 1)) -- /bin/true 2>&1)
  local rc=$?
  if [[ $rc != 0 && $rc != 124 ]] && grep -q "can never run on this cluster" <<<"$out"; then
    res PASS too_many_gpus_refused "exit $rc: $(grep -o 'can never run.*' <<<"$out" | head -1 | cut -c1-160)"
  else res FAIL too_many_gpus_refused "exit $rc: $(tr '\n' ' ' <<<"$out" | cut -c1-300)"; fi

  # ---- the CUDA copier across processes, beside plain pinned cudaMemcpy
  local size label put get
  for size in 1048576 1073741824; do
    label=$([[ $size == 1048576 ]] && echo 1MiB || echo 1GiB)
    if ((stand_in)) && [[ $size == 1073741824 ]]; then size=$((64 << 20)); label=1GiB; fi
    out=$(timeout $(T 180) drover run --nproc 1 --gpus-per-proc 1 -- "$PK/bin/drover-gpucheck" copier "$size" 2>&1)
    put=$(grep -o 'PUT bytes=.*' <<<"$out" | head -1)
    get=$(grep -o 'GET bytes=.*' <<<"$out" | head -1)
    note "$put"
    note "$get"
    if [[ "$(kv exact "$get")" == yes ]]; then
      res PASS "copier_$label" "$size bytes device -> store -> device in another process, exact; put $(kv put_gbps "$put") GB/s, get $(kv get_gbps "$get") GB/s$( ((stand_in)) && echo " (stand-in: host memory as the device$([[ $label == 1GiB ]] && echo ', 64 MiB instead of 1 GiB'))")"
    else res FAIL "copier_$label" "${get:-$(tail -3 <<<"$out" | tr '\n' ' ')}"; fi
  done
  if ((stand_in)); then
    res SKIP copier_bandwidth "the stand-in's device is host memory: bandwidth means nothing here"
  else
    local verdict
    verdict=$(awk -v p="$(kv put_gbps "$put")" -v d="$(kv pinned_d2h_gbps "$put")" \
                  -v g="$(kv get_gbps "$get")" -v h="$(kv pinned_h2d_gbps "$put")" 'BEGIN {
      if (d <= 0 || h <= 0) { print "FAIL no baseline"; exit }
      rp = p / d; rg = g / h
      printf "%s put %.2f/%.2f GB/s = %.2f of pinned D2H; get %.2f/%.2f GB/s = %.2f of pinned H2D (target 0.8)\n",
        (rp >= 0.8 && rg >= 0.8) ? "PASS" : "FAIL", p, d, rp, g, h, rg }')
    res "${verdict%% *}" copier_bandwidth "1 GiB: ${verdict#* }"
  fi

  # ---- NCCL: one rank per GPU (NCCL refuses two ranks on one GPU)
  out=$(timeout $(T 180) drover run --nproc "$gpus" --gpus-per-proc 1 -- "$PK/bin/drover-gpucheck" nccl 2>&1)
  rc=$?
  local ranks_ok
  ranks_ok=$(grep -c 'NCCL rank=.* exact=yes' <<<"$out")
  grep -o 'NCCL .*' <<<"$out" | sed 's/^/  /'
  if ((stand_in)); then
    res SKIP nccl_allreduce "the stand-in NCCL moves no data (call path ran: exit $rc, $ranks_ok/$gpus ranks returned)"
  elif [[ $rc == 0 && $ranks_ok == "$gpus" ]]; then
    res PASS nccl_allreduce "$gpus rank(s), 1 Mi and 16 Mi floats exact: $(grep -o 'NCCL rank=0.*' <<<"$out" | head -1)"
  else res FAIL nccl_allreduce "exit $rc, $ranks_ok/$gpus exact: $(grep -v '^ *$' <<<"$out" | tail -4 | tr '\n' ' ' | cut -c1-400)"; fi

  if ((gpus < 2)); then
    res SKIP nccl_abort "needs 2 GPUs (a rank killed mid-allreduce; NCCL refuses two ranks on one GPU); this machine has $gpus"
  elif ((stand_in)); then
    res SKIP nccl_abort "the stand-in NCCL never blocks"
  else
    local kd="$work/kill"
    mkdir -p "$kd"
    out=$(timeout $(T 180) drover run --nproc "$gpus" --gpus-per-proc 1 -- "$PK/bin/drover-gpucheck" nccl-kill "$kd" 2>&1)
    local killed_at worst=0 bad_ranks="" r f code at
    killed_at=$(sed -n 's/^killed_at_ms=//p' "$kd/rank1.txt" 2>/dev/null)
    for ((r = 0; r < gpus; r++)); do
      ((r == 1)) && continue
      f="$kd/rank$r.txt"
      code=$(sed -n 's/^code=//p' "$f" 2>/dev/null)
      at=$(sed -n 's/^failed_at_ms=//p' "$f" 2>/dev/null)
      if [[ -z "$killed_at" || -z "$at" || ( "$code" != ABORTED && "$code" != UNAVAILABLE ) ]]; then
        bad_ranks+=" rank$r(${code:-no report})"
      elif ((at - killed_at > worst)); then worst=$((at - killed_at)); fi
    done
    if [[ -z "$bad_ranks" && $worst -le 10000 ]]; then
      res PASS nccl_abort "rank 1 SIGKILLed inside a 256 MiB allreduce; the others ended $(sed -n 's/^code=//p' "$kd/rank0.txt") within ${worst} ms"
    else res FAIL nccl_abort "${bad_ranks:-slowest ${worst} ms}: $(cat "$kd"/rank0.txt 2>/dev/null | tr '\n' ' ' | cut -c1-300)"; fi
  fi

  # ---- PyTorch DDP with backend nccl under drover, against one process
  if [[ -z "$py" ]] || ! timeout $(T 120) "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    res SKIP ddp_nccl "python3 with a CUDA-enabled torch that sees a GPU is not here"
  else
    out=$(timeout $(T 240) drover run --nproc "$gpus" --gpus-per-proc 1 -- "$py" "$ROOT/tests/gpu/ddp_check.py" 2>&1)
    rc=$?
    local local_out l1 l2
    local_out=$(CUDA_VISIBLE_DEVICES=0 timeout $(T 120) "$py" "$ROOT/tests/gpu/ddp_check.py" --local 2>&1)
    l1=$(grep -o 'final_loss=.*' <<<"$out" | head -1 | cut -d= -f2)
    l2=$(grep -o 'final_loss=.*' <<<"$local_out" | head -1 | cut -d= -f2)
    note "$(grep -o 'ddp_check world=.*' <<<"$out" | head -1)"
    if [[ $rc == 0 && -n "$l1" && -n "$l2" ]] && awk -v a="$l1" -v b="$l2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-9 * (b < 0 ? -b : b) + 1e-15) }'; then
      res PASS ddp_nccl "drover run, $gpus rank(s), backend nccl: final_loss=$l1; one process: $l2"
    else res FAIL ddp_nccl "exit $rc, drover run final_loss=${l1:-none}, one process ${l2:-none}: $(grep -v '^ *$' <<<"$out" | tail -4 | tr '\n' ' ' | cut -c1-400)"; fi
  fi

  # ---- after drover down: no drover process left on the GPU
  keep_logs
  out=$(timeout $(T 60) drover down 2>&1)
  note "drover down: $(tr '\n' ' ' <<<"$out" | cut -c1-120)"
  local left="" procs
  local p e
  for p in /proc/[0-9]*; do
    e=$(readlink "$p/exe" 2>/dev/null) || continue
    [[ "$e" == "$PK/bin/"* ]] && left+="${p#/proc/}($(basename "$e")) "
  done
  if ((smi)); then
    sleep 1
    procs=$(timeout $(T 30) nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader 2>&1)
    # This machine runs nothing else on its GPU: any compute process left is ours.
    if [[ -z "$(tr -d ' \n' <<<"$procs")" && -z "$left" ]]; then
      res PASS no_gpu_process_after_down "nvidia-smi lists no compute process; no drover daemon left"
    else res FAIL no_gpu_process_after_down "nvidia-smi: $(tr '\n' ' ' <<<"$procs"); drover pids left: ${left:-none}"; fi
  else
    res SKIP no_gpu_process_after_down "no nvidia-smi (stand-in); drover processes left: ${left:-none}"
  fi
  summary "$t0"
}

# check_probe NAME "PROBE cvd=.. count=.. uuids=.." OUTPUT
check_probe() {
  local name=$1 probe=$2 out=$3
  local cvd count uuid
  cvd=$(kv cvd "$probe")
  count=$(kv count "$probe")
  uuid=$(kv uuids "$probe")
  local want_uuid=""
  if [[ "$cvd" =~ ^[0-9]+$ ]]; then
    local IFS=';'
    read -r -a au <<<"$uuids"
    want_uuid=${au[$cvd]:-}
  fi
  if [[ -z "$probe" ]]; then res FAIL "$name" "no probe line: $(grep -v '^ *$' <<<"$out" | tail -3 | tr '\n' ' ' | cut -c1-300)"
  elif [[ ! "$cvd" =~ ^[0-9]+$ || "$count" != 1 ]]; then res FAIL "$name" "$probe"
  elif [[ "$uuid" == unavailable* && -n "${DROVER_FAKE_CUDA_DEVICES:-}" ]]; then
    res PASS "$name" "CUDA_VISIBLE_DEVICES=$cvd, CUDA sees 1 device (stand-in: no UUID to compare)"
  elif [[ "$uuid" == "$want_uuid" ]]; then res PASS "$name" "CUDA_VISIBLE_DEVICES=$cvd, CUDA sees 1 device, $uuid as nvidia-smi says"
  else res FAIL "$name" "$probe (nvidia-smi: GPU $cvd is ${want_uuid:-unknown})"; fi
}

# With a FAIL so far and $OUT set (the device tool), the cluster's logs go back too
# (drover down deletes them).
KEPT=0
keep_logs() {
  ((FAIL > 0 && KEPT == 0)) && [[ -n "${OUT:-}" && -d "${OUT:-}" && -d "$DROVER_HOME" ]] &&
    tar -C "$DROVER_HOME" -czf "$OUT/cluster_logs.tar.gz" --exclude=packages . 2>/dev/null && KEPT=1
  return 0
}

summary() {
  local t0=$1
  keep_logs
  local line="GPUCHECK SUMMARY pass=$PASS fail=$FAIL skip=$SKIP seconds=$((SECONDS - t0))"
  echo "$line"
  [[ -n "$LOG" ]] && echo "$line" >> "$LOG.results"
  # A cluster left by a failed step: stop it (our own processes only).
  drover down >/dev/null 2>&1
  [[ -n "${GPUCHECK_KEEP:-}" ]] || rm -rf "$work"
}

case "${1:-}" in
  pack) pack ;;
  run) shift; run "$@"; [[ $FAIL == 0 ]] ;;
  *) echo "usage: scripts/gpu_check.sh pack | run [--stand-in]   (see docs/gpu.md)" >&2; exit 2 ;;
esac
