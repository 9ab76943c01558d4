#!/usr/bin/env bash
# `lpo trace --torch-ops` on a GPU machine, in one go (docs/trace.md, PyTorch operators): builds lpo and the
# tracer, checks the operator table against torch.profiler on an HF transformers Llama decode and a conv net
# (per-operator GPU time of the top operators within 3%, matmul FLOPs equal to 2mnk), and measures the
# overhead of PyTorch's NVTX emission untraced, under lpo trace, with module ranges, and of torch.profiler.
# Usage: tests/gpu/torch_ops_check.sh OUTDIR   (logs and the run directories' tables go to OUTDIR)
# LAYERS (default 8) sets the Llama's layer count; PAIRS (default 8) the overhead pairs.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: torch_ops_check.sh OUTDIR}
mkdir -p "$out"
deps=${LPO_DEPS_DIR:-build-deps} # libraries built from source where the machine lacks the Debian packages
if [ -d "$deps/lib/pkgconfig" ]; then
  deps=$(cd "$deps" && pwd)
  export PKG_CONFIG_PATH="$deps/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export LD_LIBRARY_PATH="$deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
build=${BUILD_DIR:-build-gpu}
lpo=$PWD/$build/lpo
py=tests/gpu/torch_ops_check.py
pairs=${PAIRS:-8}
t() { local t0=$(date +%s.%N); timeout "${TMO:-240}" "$@"; local rc=$?; echo "[$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s, rc $rc] $*"; return $rc; }
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
  git log -1 --format='commit %H %s' 2>/dev/null
  python3 -c 'import torch, transformers; print("torch", torch.__version__, torch.version.cuda, "transformers", transformers.__version__)'
} >"$out/env.txt" 2>&1
cat "$out/env.txt"
TMO=400 t cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DLPO_CUDA_ARCHS=90 -DLPO_TESTS=OFF >"$out/build.log" 2>&1
TMO=400 t cmake --build "$build" -j "$(nproc)" --target lpo lpo_probe >>"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
rc=0
for m in llama conv; do
  t "$lpo" trace --torch-ops --capture-range=measure --no-json output.dir="$out/$m" -- python3 $py run $m \
    >"$out/$m.log" 2>&1 || rc=1
  t python3 $py run $m --profiler "$out/$m-prof.json" >>"$out/$m.log" 2>&1 || rc=1
  t python3 $py compare "$out/$m" "$out/$m-prof.json" >"$out/$m-compare.log" 2>&1 || rc=1
  echo "== $m"; cat "$out/$m-compare.log"
  sed -n '/## PyTorch operators/,/^Details\|operators.md/p' "$out/$m/summary.md"
  rm -f "$out/$m"/trace-*.lpot
done
echo "== overhead (in-process pairs; ratio = with / without)"
t python3 $py overhead nvtx --pairs "$pairs" 2>&1 | grep "overhead:" | sed 's/^/emission alone, no tracer: /'
t "$lpo" trace --capture-range=lpo_traced --no-json output.dir=/tmp/torch_ops_ovh -- python3 $py overhead nvtx \
  --pairs "$pairs" 2>&1 | grep "overhead:" | sed 's/^/emission + lpo trace: /'
t "$lpo" trace --capture-range=lpo_traced --no-json output.dir=/tmp/torch_ops_ovh2 -- python3 $py overhead \
  nvtx-modules --pairs "$pairs" 2>&1 | grep "overhead:" | sed 's/^/emission + module ranges + lpo trace: /'
t python3 $py overhead profiler --pairs "$pairs" 2>&1 | grep "overhead:" | sed 's/^/torch.profiler: /'
exit $rc
