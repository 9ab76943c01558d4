#!/usr/bin/env bash
# The GPU-machine half of scripts/carry-build.sh: unpacks build-carry/carry.txz and runs each carried GPU test
# binary directly (no ctest, no build), N at a time spread over the GPUs (CARRY_JOBS, default the GPU count:
# one per GPU), each under a time limit (CARRY_TIMEOUT, 300 s); logs in $OUT (the device tool's output
# folder) or build-carry/logs, the failing checks of each log printed, and a summary table last.
#   scripts/carry-run.sh                       every carried test
#   CARRY_TESTS='cuda_gguf|tp_gpu' scripts/carry-run.sh
set -uo pipefail
cd "$(dirname "$0")/.."
b=build-carry
[ -f "$b/carry.txz" ] || { echo "carry-run: no $b/carry.txz (scripts/carry-build.sh makes it)" >&2; exit 2; }
tar xJf "$b/carry.txz"
deps=${LPO_DEPS_DIR:-build-deps}
[ -d "$deps/lib" ] && export LD_LIBRARY_PATH="$(cd "$deps" && pwd)/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=0
logs=${OUT:-$b/logs}
mkdir -p "$logs"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$ngpu" -ge 1 ] || ngpu=1
jobs=${CARRY_JOBS:-$ngpu}
tests=()
while read -r t; do
  [ -n "$t" ] || continue
  [ -n "${CARRY_TESTS:-}" ] && ! grep -qE "$CARRY_TESTS" <<<"$t" && continue
  tests+=("${t#test_}")
done <"$b/carried-tests.txt"
run_one() { # run_one NAME GPU: one test on one GPU (the multi-GPU tp test on all of them)
  local t=$1 g=$2 t0 rc
  t0=$(date +%s)
  if [ "$t" = tp_gpu ]; then
    timeout "${CARRY_TIMEOUT:-300}" "$b/tests/gpu_test_$t" >"$logs/$t.log" 2>&1
  else
    CUDA_VISIBLE_DEVICES=$g timeout "${CARRY_TIMEOUT:-300}" "$b/tests/gpu_test_$t" >"$logs/$t.log" 2>&1
  fi
  rc=$?
  echo "$t|$rc|$(( $(date +%s) - t0 ))" >>"$logs/results.txt"
}
: >"$logs/results.txt"
i=0
for t in "${tests[@]}"; do # the tp test alone (it uses every GPU), the others in lanes of one per GPU
  if [ "$t" = tp_gpu ]; then wait; run_one "$t" 0; continue; fi
  run_one "$t" $(( i % ngpu )) &
  i=$(( i + 1 ))
  (( i % jobs == 0 )) && wait
done
wait
for t in "${tests[@]}"; do
  echo "== $t"
  grep -E '^\[  (FAILED|ERROR) |^\[   LINE   \]| FAIL | ERROR |^SKIP' "$logs/$t.log" | head -12
done
echo
echo "carry-run summary ($ngpu GPUs, logs in $logs)"
printf '| %-22s | %-18s | %7s |\n' test result seconds
printf '| %-22s | %-18s | %7s |\n' ---------------------- ------------------ ------:
fail=0
while IFS='|' read -r t rc s; do
  res=ok
  [ "$rc" = 77 ] && res=skipped
  [ "$rc" = 124 ] && res="TIMED OUT" && fail=1
  [ "$rc" != 0 ] && [ "$rc" != 77 ] && [ "$rc" != 124 ] && res="FAILED (exit $rc)" && fail=1
  printf '| %-22s | %-18s | %7s |\n' "$t" "$res" "$s"
done <"$logs/results.txt"
exit $fail
