#!/usr/bin/env bash
# Tensor parallelism on a machine of 2 or 4 GPUs (issue 27): builds lpo for sm_90 in build-tp, prints the
# GPUs and their links, runs the tensor-parallel tests (CPU ranks and GPU ranks: logits of 2 / 4 ranks vs 1,
# tokens identical, a stopped rank's timeout, with NCCL and with the one-shot all-reduce; the one-shot kernel
# against NCCL's sums and both timed in graphs; lpo ceilings' all-reduce bench), then `lpo ceilings
# --allreduce` (the NCCL sweep 8 B .. 256 MiB) and the speed points with `lpo bench` (synthetic bf16 weights,
# graphs): Llama-3.1-8B bs1 tg128 at engine.tp=1 and engine.tp=2 (NCCL; engine.tp_allreduce=oneshot alone,
# engine.tp_fuse=false; oneshot fused with the residual add + RMSNorm, the default) in the same call,
# Llama-3.1-70B at engine.tp=4, bs1 and bs64 (4 GPUs or more), each with the analysis's prediction and
# bench's communication per GPU; then `lpo trace` of the 8B tp=2 fused bench (per GPU communication, overlap,
# skew: its summary section and comm.md), and a summary table last.
#   scripts/tp-check.sh                    (CUDA_ARCHS=90 by default)
#   TP_CHECK_TESTS=0 / TP_CHECK_BENCH=0    skip a half (two calls when a command may run 600 s at most)
#   TP_CHECK_TRACE=0                       no trace of the 8B tp=2 bench
#   TP_CHECK_PREBUILT=1 BUILD_DIR=DIR      use the lpo, liblpo_probe.so and tests/gpu_test_tp_gpu already in DIR
# NVLink multicast (NVLS) stays off on shared machines: NCCL_NVLS_ENABLE=0 for everything below.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
deps=${LPO_DEPS_DIR:-build-deps}
if [ -d "$deps/lib/pkgconfig" ]; then
  deps=$(cd "$deps" && pwd)
  export PKG_CONFIG_PATH="$deps/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export LD_LIBRARY_PATH="$deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
archs=${CUDA_ARCHS:-90}
build=${BUILD_DIR:-build-tp}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 4)}
rows=()
fail=0

step() { # step NAME CMD...: runs CMD, records its result and seconds
  local name=$1; shift
  echo "==== $name: $*"
  local t0=$(date +%s.%N)
  "$@"
  local rc=$?
  local secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  local res=ok
  [ $rc -ne 0 ] && res="FAILED (exit $rc)" && fail=1
  rows+=("$name|$res|$secs")
  return $rc
}

# t/s of the tg row of a bench table (the column named t/s)
tg_rate() {
  awk -F'|' '/t\/s/ && !h { for (i = 1; i <= NF; i++) if ($i ~ /t\/s/) c = i; h = 1; next }
             h && /tg[0-9]/ { gsub(/ /, "", $c); print $c; exit }' "$1"
}

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
echo "tp-check: $ngpu GPU(s); NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"
nvidia-smi topo -m 2>/dev/null | head -12
# TP_CHECK_PREBUILT=1: no configure or build: $build already holds lpo, liblpo_probe.so and
# tests/gpu_test_tp_gpu (built for this checkout's path elsewhere and carried over: device time saved)
if [ "${TP_CHECK_PREBUILT:-0}" = 0 ]; then
  step configure cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DLPO_CUDA_ARCHS="$archs" -DLPO_WITH_CUDA=ON
  step build cmake --build "$build" -j "$jobs"
fi
lpo="$build/lpo"
declare -A rate pred comm
if [ -x "$lpo" ]; then
  if [ "${TP_CHECK_TESTS:-1}" != 0 ]; then
    # a hung collective (one-shot flags never set) fails after 300 s instead of holding the machine
    if [ -f "$build/CTestTestfile.cmake" ]; then
      step "tests tp" bash -c "cd '$build' && ctest -R 'test_tp' --timeout 300 -V -O ctest-tp.log >/dev/null"
    else # a prebuilt test binary without its build tree
      step "tests tp" bash -c "timeout 300 '$build/tests/gpu_test_tp_gpu' >'$build/ctest-tp.log' 2>&1"
    fi
    grep -E "max \|logit diff\||stopped rank|SKIP|one-shot|all-reduce|tp trace" "$build/ctest-tp.log" | head -80
    # which test failed and why (the figures above come from passing checks only)
    grep -E "^ *[0-9]+/[0-9]+ Test|tests passed|\[  FAILED  \]|\[  ERROR   \]|[Ff]ailure|Assertion|error:" \
      "$build/ctest-tp.log" | head -30
  fi
  if [ "${TP_CHECK_BENCH:-1}" != 0 ]; then
    # the device's ceilings (cached or measured) and the NCCL all-reduce sweep over the GPUs, measured now
    step ceilings bash -c "'$lpo' ceilings --allreduce >'$build/ceilings.txt' 2>&1; rc=\$?; cat '$build/ceilings.txt'; exit \$rc"
    # the 16 KiB bf16 all-reduce (the 70B decode message) of each GPU count: "gpus|us|busbw"
    ar16=$(awk '/NCCL all-reduce, sum in place, GPUs 0\.\./ { n = $0; sub(/.*GPUs 0\.\./, "", n); sub(/ .*/, "", n); g = n + 1 }
                /^\| 16 KiB/ && g { split($0, f, "|"); gsub(/ /, "", f[3]); gsub(/ /, "", f[6]); print g "|" f[3] "|" f[6] }' \
           "$build/ceilings.txt")
    bopts="backend=cuda profiling.warmup=2 profiling.min_samples=5 profiling.timeout_s=20 --no-save"
    # name|model|batch|tp|all-reduce (nccl, or lpo's one-shot over peer access for the small messages)|tp_fuse
    # (the one-shot fused with the residual add + RMSNorm after it)
    points=("8b-tp1|llama3.1-8b|1|1|nccl|true" "8b-tp2|llama3.1-8b|1|2|nccl|true" "8b-tp2-os|llama3.1-8b|1|2|oneshot|false"
            "8b-tp2-fused|llama3.1-8b|1|2|oneshot|true")
    [ "$ngpu" -ge 4 ] && points+=("70b-tp4-b1|llama3.1-70b|1|4|nccl|true" "70b-tp4-b1-os|llama3.1-70b|1|4|oneshot|true"
                                  "70b-tp4-b64|llama3.1-70b|64|4|nccl|true" "70b-tp4-b64-os|llama3.1-70b|64|4|oneshot|true")
    for p in "${points[@]}"; do
      IFS='|' read -r name model batch tp ar fuse <<<"$p"
      [ "$tp" -gt "$ngpu" ] && { rows+=("bench $name|not run ($ngpu GPUs)|0"); continue; }
      out="$build/bench-$name.txt"
      step "bench $name" bash -c "'$lpo' bench model=$model engine.tp=$tp engine.tp_allreduce=$ar engine.tp_fuse=$fuse \
        bench.batch=[$batch] bench.prompt=[128] bench.gen=[128] $bopts >'$out' 2>&1; rc=\$?; cat '$out'; exit \$rc"
      # communication per GPU (bench's second table): "gpu comm% wait_ms" per GPU
      comm[$name]=$(awk -F'|' '/^\| model \| batch \| prompt/ { h = 1; for (i = 1; i <= NF; i++) { t = $i; gsub(/ /, "", t); c[t] = i }; next }
                         h && /^\| [^ :-]/ { g = $c["gpu"]; p = $c["comm_pct"]; w = $c["wait_ms"]; gsub(/ /, "", g); gsub(/ /, "", p); gsub(/ /, "", w);
                                            printf "%sgpu%s %s%% wait %s ms", sep, g, p, w; sep = ", " }' "$out")
      rate[$name]=$(tg_rate "$out")
      pred[$name]=$("$lpo" analyze model=$model engine.tp=$tp analysis.batch=$batch analysis.prompt_len=128 \
        analysis.gen_len=128 --no-save 2>/dev/null | awk '/^bf16 +bf16/ && $3 == '"$batch"' {print $NF; exit}')
    done
    if [ "${TP_CHECK_TRACE:-1}" != 0 ] && [ "$ngpu" -ge 2 ]; then
      # the 8B tp=2 fused decode traced: per GPU communication, overlap with compute, waits, skew
      tdir="$build/trace-8b-tp2"
      rm -rf "$tdir"
      step "trace 8b-tp2" bash -c "'$lpo' trace output.dir='$tdir' --no-json -- '$lpo' bench model=llama3.1-8b engine.tp=2 \
        engine.tp_allreduce=oneshot bench.batch=[1] bench.prompt=[128] bench.gen=[32] $bopts >'$build/trace-8b-tp2.txt' 2>&1; rc=\$?;
        tail -5 '$build/trace-8b-tp2.txt'; sed -n '/^## Ranks and communication/,/^Details:/p' '$tdir/summary.md';
        sed -n '/^| pid/,/^\$/p' '$tdir/comm.md'; sed -n '/^| source/,/^\$/p' '$tdir/comm.md';
        head -14 '$tdir/kernels_device.md' | tail -11; exit \$rc"
    fi
  fi
else
  rows+=("tests tp|not run (no binary)|0")
  fail=1
fi

echo
echo "tensor parallel speed points (decode tok/s; must / goal from issue 27; prediction: lpo analyze floor)"
printf '| %-14s | %10s | %14s | %-22s | %s\n' point tok/s "analyze ceiling" "must / goal" "comm per GPU (share of step, wait)"
printf '| %-14s | %10s | %14s | %-22s | %s\n' -------------- ---------: --------------: ---------------------- ---
declare -A bars=([8b-tp1]="-" [8b-tp2]=">= 1.6x / 1.8x tp1" [8b-tp2-os]=">= 1.6x / 1.8x tp1" [8b-tp2-fused]=">= 1.6x / 1.8x tp1" [70b-tp4-b1]=">= 60 / 72"
                 [70b-tp4-b1-os]=">= 60 / 72" [70b-tp4-b64]=">= 2500 / 3200" [70b-tp4-b64-os]=">= 2500 / 3200")
for n in 8b-tp1 8b-tp2 8b-tp2-os 8b-tp2-fused 70b-tp4-b1 70b-tp4-b1-os 70b-tp4-b64 70b-tp4-b64-os; do
  printf '| %-14s | %10s | %14s | %-22s | %s\n' "$n" "${rate[$n]:--}" "${pred[$n]:--}" "${bars[$n]}" "${comm[$n]:--}"
done
for n in 8b-tp2 8b-tp2-os 8b-tp2-fused; do
  if [ -n "${rate[8b-tp1]:-}" ] && [ -n "${rate[$n]:-}" ]; then
    awk -v a="${rate[8b-tp1]}" -v b="${rate[$n]}" -v n="$n" 'BEGIN{ if (a > 0) printf "8B speedup %s / tp1: %.2fx\n", n, b / a }'
  fi
done
grep -h "in a graph: one-shot\|in a graph: fused" "$build/ctest-tp.log" 2>/dev/null | sed 's/^/  /'
echo "one all-reduce of 16 KiB bf16 in a CUDA graph (lpo ceilings' NCCL sweep; must <= 10 us / goal <= 6 us at 4 GPUs):"
if [ -n "${ar16:-}" ]; then
  while IFS='|' read -r g us bw; do printf '  %s GPUs: %s us (busbw %s GB/s)\n' "$g" "$us" "$bw"; done <<<"$ar16"
else
  echo "  not measured (ceilings not run, or fewer than 2 GPUs)"
fi
echo
echo "tp-check summary (archs $archs, build dir $build)"
printf '| %-18s | %-22s | %8s |\n' step result seconds
printf '| %-18s | %-22s | %8s |\n' ------------------ ---------------------- -------:
for r in "${rows[@]}"; do
  IFS='|' read -r n res s <<<"$r"
  printf '| %-18s | %-22s | %8s |\n' "$n" "$res" "$s"
done
exit $fail
