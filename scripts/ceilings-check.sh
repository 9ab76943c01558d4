#!/usr/bin/env bash
# One GPU-machine call for issue 10: builds lpo for sm_90, runs `lpo ceilings --refresh` twice (the bar:
# bf16 >= 740 TFLOP/s, copy >= 2900 GB/s, fp8 >= 1300, two runs within 2%, < 60 s each), the GPU tests
# (ceilings benches, every kbench case validated on CUDA), and kbench timings (bf16 GEMM 8192^3 against the
# ceiling, a >= 50 us kernel twice, Llama-3.1-8B decode linears, a sweep). Logs under $OUT (or ./gpu-out).
# Prints a short summary last. Usage (on the GPU machine, from the repository root):
#   scripts/gpu-check.sh --bundle-deps build-deps   (here, before sending)   then   scripts/ceilings-check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
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
export XDG_CACHE_HOME="$out/cache"
gen=; command -v ninja >/dev/null && gen="-G Ninja"
t0=$(date +%s)
cmake -S . -B build-gpu $gen -DCMAKE_BUILD_TYPE=Release -DLPO_CUDA_ARCHS=90 >"$out/cmake.log" 2>&1 &&
  cmake --build build-gpu -j "$(nproc)" >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
lpo=build-gpu/lpo
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu \
  --format=csv >"$out/smi-before.csv" 2>&1
for i in 1 2; do
  s=$(date +%s.%N)
  $lpo ceilings --refresh >"$out/ceilings$i.md" 2>"$out/ceilings$i.err"
  echo "ceilings run $i: exit $?, $(awk -v a="$s" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s wall"
  cp "$out"/cache/lpo/ceilings/*.json "$out/ceilings$i.json" 2>/dev/null
done
(cd build-gpu && timeout 200 ctest -L gpu --output-on-failure) >"$out/ctest-gpu.log" 2>&1
echo "ctest -L gpu: exit $? ($(grep -E 'tests passed|tests failed' "$out/ctest-gpu.log"))"
k="$lpo kbench backend=cuda profiling.timeout_s=5"
$k kbench.case=gemm kbench.dtype=bf16 kbench.m=8192 kbench.n=8192 kbench.k=8192 output.dir="$out/kb-gemm" \
  >"$out/kb-gemm.md" 2>&1; echo "kbench gemm 8192^3: exit $?"
for i in 1 2; do
  $k kbench.case=rmsnorm kbench.dtype=bf16 kbench.m=8192 kbench.n=8192 output.dir="$out/kb-rms$i" \
    >"$out/kb-rms$i.md" 2>&1; echo "kbench rmsnorm 8192x8192 run $i: exit $?"
done
$k model=llama3.1-8b kbench.case=linears kbench.m=1 profiling.cold=true output.dir="$out/kb-linears" \
  >"$out/kb-linears.md" 2>&1; echo "kbench linears llama3.1-8b m=1 cold: exit $?"
$k kbench.case=[rmsnorm,silu_mul,softmax,layernorm_gelu] kbench.dtype=bf16 kbench.m=[1,4096] kbench.n=4096 \
  output.dir="$out/kb-sweep" >"$out/kb-sweep.md" 2>&1; echo "kbench sweep: exit $?"
$k kbench.case=[conv2d,lstm] kbench.dtype=f16 output.dir="$out/kb-dnn" >"$out/kb-dnn.md" 2>&1
echo "kbench conv2d/lstm: exit $?"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv >"$out/smi-after.csv" 2>&1
echo "==== summary"
grep -E "^\| (gemm|dram|memcpy|l2|h2d|d2h|launch|graph)" "$out/ceilings1.md" | cut -c1-120
echo "-- run 2"
grep -E "^\| (gemm|dram|memcpy|l2|h2d|d2h|launch|graph)" "$out/ceilings2.md" | cut -c1-70
grep -h "measured " "$out"/ceilings?.md
for f in kb-gemm kb-rms1 kb-rms2; do grep -E "^\| (gemm|rmsnorm)" "$out/$f.md" | cut -c1-200; done
