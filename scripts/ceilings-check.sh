#!/usr/bin/env bash
# One GPU-machine call for the ceilings' bars: builds lpo for sm_90, runs `lpo ceilings --refresh` twice (the bar:
# bf16 >= 740 TFLOP/s, copy >= 2900 GB/s, fp8 >= 1300, two runs within 2%, < 60 s each), the GPU tests
# (ceilings benches, every kbench case validated on CUDA), and kbench timings (bf16 GEMM 8192^3 against the
# ceiling, a >= 50 us kernel twice, Llama-3.1-8B decode linears, a sweep, cuDNN cases). The device tool
# returns only a few files: everything goes into $OUT/all.log, plus the ceilings tables and records and one
# roofline.svg. Prints a short summary last. Usage (GPU machine, repository root):
#   scripts/gpu-check.sh --bundle-deps build-deps   (here, before sending)   then   scripts/ceilings-check.sh
# --ceilings-only: stop after the two ceilings runs and print them side by side (each figure of run 1 and
# run 2, their difference in %, each run's p10-p90 spread, the variant or configuration kept).
set -uo pipefail
only=0; [ "${1:-}" = "--ceilings-only" ] && only=1
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
work=$(mktemp -d)
mkdir -p "$out"
deps=${LPO_DEPS_DIR:-build-deps}
if [ -d "$deps/lib/pkgconfig" ]; then
  deps=$(cd "$deps" && pwd)
  export PKG_CONFIG_PATH="$deps/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export LD_LIBRARY_PATH="$deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# cuDNN for kbench's conv2d/lstm: PyTorch's wheel carries libcudnn.so.9
dnn=$(find /opt /usr/local /usr/lib -name 'libcudnn.so.9' 2>/dev/null | head -1)
[ -n "$dnn" ] && export LD_LIBRARY_PATH="$(dirname "$dnn"):$LD_LIBRARY_PATH"
export XDG_CACHE_HOME="$work/cache"
log="$out/all.log"
sum="$work/summary"
say() { echo "$*" | tee -a "$sum"; }
gen=; command -v ninja >/dev/null && [ ! -f build-gpu/CMakeCache.txt ] && gen="-G Ninja" # (an existing build keeps its generator)
t0=$(date +%s)
{ cmake -S . -B build-gpu $gen -DCMAKE_BUILD_TYPE=Release -DLPO_CUDA_ARCHS=90 && cmake --build build-gpu -j "$(nproc)"; } \
  >"$work/build.log" 2>&1 || { tail -40 "$work/build.log"; cp "$work/build.log" "$log"; exit 1; }
say "build: $(( $(date +%s) - t0 )) s; cuDNN: ${dnn:-not found}"
lpo=build-gpu/lpo
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu \
  --format=csv >>"$log" 2>&1
for i in 1 2; do
  s=$(date +%s.%N)
  $lpo ceilings --refresh >"$out/ceilings$i.md" 2>"$work/ceilings$i.err"
  say "ceilings run $i: exit $?, $(awk -v a="$s" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s wall"
  cp "$work"/cache/lpo/ceilings/*.json "$out/ceilings$i.json" 2>/dev/null
  { echo "==== ceilings run $i stderr"; cat "$work/ceilings$i.err"; } >>"$log"
done
compare() { # the two runs' tables: metric, run 1, run 2, |diff| %, spread 1, spread 2, detail of run 2
  awk -F'|' 'FNR == NR && /^\| [a-z]/ { v[$2] = $3; sp[$2] = $5; next }
    /^\| [a-z]/ && ($2 in v) && $2 !~ /metric/ { a = v[$2] + 0; b = $3 + 0
      printf "%-15s %10.4g %10.4g %6.2f%% %6s%% %6s%%  %s\n", $2, a, b, (a > 0 ? 100 * (b > a ? b - a : a - b) / a : 0),
        sp[$2] + 0, $5 + 0, substr($NF == "" ? $(NF - 1) : $NF, 1, 70) }' "$out/ceilings1.md" "$out/ceilings2.md"
}
if [ $only = 1 ]; then
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv >>"$log" 2>&1
  { cat "$sum"; echo "==== run 1 vs run 2 (metric, run 1, run 2, diff, spread 1, spread 2, kept)"; compare; } | tee -a "$log"
  grep -h "measured " "$out"/ceilings?.md
  rm -rf "$work"
  exit 0
fi
(cd build-gpu && timeout 240 ctest -L gpu --output-on-failure) >"$work/ctest.log" 2>&1
say "ctest -L gpu: exit $? ($(grep -E 'tests passed|tests failed' "$work/ctest.log"))"
{ echo "==== ctest -L gpu"; cat "$work/ctest.log"; } >>"$log"
k="$lpo kbench backend=cuda profiling.timeout_s=5"
kb() { # name, args...: one kbench run, its table into the log
  local name=$1; shift
  $k "$@" output.dir="$work/$name" >"$work/$name.md" 2>&1
  say "kbench $name: exit $?"
  { echo "==== kbench $name: $*"; cat "$work/$name.md"; } >>"$log"
}
kb gemm kbench.case=linear kbench.dtype=bf16 kbench.m=8192 kbench.n=8192 kbench.k=8192
kb rms1 kbench.case=rmsnorm kbench.dtype=bf16 kbench.m=8192 kbench.n=8192
kb rms2 kbench.case=rmsnorm kbench.dtype=bf16 kbench.m=8192 kbench.n=8192
kb linears model=llama3.1-8b kbench.case=linears kbench.m=1 profiling.cold=true
kb sweep "kbench.case=[rmsnorm,swiglu,rope,embed,add,attention]" kbench.dtype=bf16 \
  "kbench.m=[1,4096]" kbench.n=4096
kb graph kbench.case=conv2d kbench.dtype=f16 kbench.graph=true
kb dnn "kbench.case=[conv2d,lstm]" kbench.dtype=f16
cp "$work/sweep/roofline.svg" "$out/roofline-sweep.svg" 2>/dev/null
cp "$work/linears/roofline.svg" "$out/roofline-linears.svg" 2>/dev/null
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv >>"$log" 2>&1
cat "$sum" >>"$log"
echo "==== summary"
cat "$sum"
for i in 1 2; do grep -E "^\| (gemm|dram|memcpy|l2|h2d|d2h|launch|graph)" "$out/ceilings$i.md" | cut -c1-66; done
grep -h "measured " "$out"/ceilings?.md
for f in gemm rms1 rms2; do grep -E "^\| (gemm|rmsnorm)" "$work/$f.md" | cut -c1-160; done
rm -rf "$work"
