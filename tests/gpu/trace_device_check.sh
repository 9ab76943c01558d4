#!/usr/bin/env bash
# `lpo trace` measured on a GPU machine, in one go (docs/perf-notes.md, "tracer" section):
#   build (lpo, liblpo_probe.so, the CUDA test program, the trace tests), the trace tests (ctest), PyTorch
#   agreement with torch.profiler, tracing overhead on a launch-bound eager decode loop (vs torch.profiler),
#   a segfaulting PyTorch program, and the post-processing time of 1 million synthetic kernel records.
# Usage: tests/gpu/trace_device_check.sh OUTDIR   (logs and small artifacts go to OUTDIR)
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: trace_device_check.sh OUTDIR}
mkdir -p "$out"
deps=${LPO_DEPS_DIR:-build-deps}
if [ -d "$deps/lib/pkgconfig" ]; then
  deps=$(cd "$deps" && pwd)
  export PKG_CONFIG_PATH="$deps/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export LD_LIBRARY_PATH="$deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
build=${BUILD_DIR:-build-gpu}
t() { local t0=$(date +%s.%N); timeout "${TMO:-90}" "$@"; local rc=$?; echo "[$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s, rc $rc] $*"; return $rc; }
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
  git log -1 --format='commit %H %s' 2>/dev/null || cat .commit 2>/dev/null
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
} >"$out/env.txt" 2>&1
TMO=300 t cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DLPO_CUDA_ARCHS=90 >"$out/build.log" 2>&1
TMO=300 t cmake --build "$build" -j "$(nproc)" --target lpo lpo_probe lpo_trace_app gpu_test_trace unit_test_trace \
  >>"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
lpo=$PWD/$build/lpo
t bash -c "cd $build && ctest -R 'test_trace' --output-on-failure" >"$out/ctest.log" 2>&1
tail -5 "$out/ctest.log"

# post-processing of 1 million kernel records (trace-*.lpot ~240 MB, trace.json ~600 MB: kept in /tmp)
t "$lpo" trace --synthetic=1000000 output.dir=/tmp/synth1m >"$out/synth.log" 2>&1
t "$lpo" report trace /tmp/synth1m >>"$out/synth.log" 2>&1
t "$lpo" report trace /tmp/synth1m --no-json >>"$out/synth.log" 2>&1
ls -la /tmp/synth1m >>"$out/synth.log"
cp /tmp/synth1m/summary.md "$out/synth_summary.md"
# PyTorch: lpo trace (gated on the "measure" range) vs torch.profiler on the same region, two runs
py=tests/gpu/trace_torch.py
t "$lpo" trace --capture-range=measure output.dir="$out/torch_agree" -- python3 $py agree >"$out/agree.log" 2>&1
t python3 $py agree --profiler /tmp/torch_prof.json >>"$out/agree.log" 2>&1
t python3 $py compare "$out/torch_agree" /tmp/torch_prof.json >"$out/compare.log" 2>&1
tail -3 "$out/compare.log"
rm -f "$out"/torch_agree/trace-*.lpot

# a segfault in a PyTorch program
t "$lpo" trace output.dir="$out/torch_segv" -- python3 $py segv >"$out/segv.log" 2>&1
echo "segv exit status: $?" >>"$out/segv.log"
rm -f "$out"/torch_segv/trace-*.lpot "$out"/torch_segv/trace.json

# overhead: untraced / traced alternately (separate processes), then torch.profiler in-process
for i in 1 2; do
  t python3 $py overhead >>"$out/overhead.log" 2>&1
  t "$lpo" trace output.dir=/tmp/ovh_default_$i -- python3 $py overhead >>"$out/overhead.log" 2>&1
  t "$lpo" trace --activities=kernel,memcpy,memset,nvtx output.dir=/tmp/ovh_lean_$i -- python3 $py overhead \
    >>"$out/overhead.log" 2>&1
done
t "$lpo" trace --attribution=extcorr output.dir=/tmp/ovh_extcorr -- python3 $py overhead >>"$out/overhead.log" 2>&1
t python3 $py overhead --profiler >>"$out/overhead.log" 2>&1
grep -E "steps/s|lpo trace: [0-9]|post-processing|\[.* s, rc" "$out/overhead.log" >"$out/overhead_summary.txt"
for d in /tmp/ovh_default_1 /tmp/ovh_extcorr; do
  mkdir -p "$out/$(basename $d)"; cp $d/summary.md $d/ranges.md $d/steps.csv $d/kernels.md "$out/$(basename $d)/" 2>/dev/null
done

echo "done"
