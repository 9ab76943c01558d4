#!/usr/bin/env bash
# `lpo trace` measured on a GPU machine, in one go (docs/perf-notes.md, "tracer" section).
# Usage: tests/gpu/trace_device_check.sh OUTDIR [PART...]   (logs go to OUTDIR; default: every part)
# Parts, in this order:
#   build     lpo, liblpo_probe.so, the CUDA test program and the trace tests (build-gpu)
#   test      the GPU trace test (tests/gpu/test_trace.c)
#   synth     post-processing of 1 million synthetic kernel records (bar: summaries in <= 2 s)
#   agree     PyTorch: lpo trace vs torch.profiler on the same region (names, counts, total time)
#   segv      a segfaulting PyTorch program leaves a readable partial trace
#   hf        the overhead bar: scripts/trace-overhead-hf.py (HF transformers 8B-shaped eager decode)
#             untraced and under `lpo trace`, alternated (HF_PAIRS rounds, default 2); HF_TRACED lists the
#             traced configurations of each round, ';'-separated environment settings (default "X=0": the
#             defaults; e.g. "X=0;LPO_TRACE_LAUNCH_CB=driver"); HF_ARGS: arguments of the script (--reps 2)
#   hfdiag    where the HF overhead goes (not in the default parts): one discarded process (a fresh host's
#             first runs slow), then HF_PAIRS rounds (default 3) of untraced vs each `lpo trace` flag set of
#             HFDIAG_FLAGS ('|'-separated; "default" = no flags; default
#             "--activities=kernel,memcpy,memset,sync,nvtx|--activities=kernel,launch,nvtx|default")
#   hfpair    the overhead inside one process (the host's drift between processes cancels): for each flag set
#             of HFPAIR_FLAGS ('|'-separated, each run with --capture-range=lpo_traced; "none": no lpo trace,
#             the noise floor; words NAME=value are set in the environment, e.g. LPO_TRACE_LAUNCH_CB=driver;
#             default "none|default|--activities=kernel,nvtx|--activities=kernel,launch,nvtx|
#             --activities=kernel,memcpy,memset,sync,nvtx"), one process of `trace-overhead-hf.py --interleave
#             HFPAIR_N` (default 4): pairs of decodes traced (inside the gate) and untraced (outside it)
#   diag      where the overhead goes: the launch-bound torch loop of trace_torch.py untraced and under
#             tracer configurations that each leave one part out (kernel records, callbacks, clock, ...)
#   profiler  the same loop under torch.profiler, and lpo trace with --attribution=extcorr
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: trace_device_check.sh OUTDIR [PART...]}
shift
parts=" ${*:-build test synth agree segv hf diag profiler} "
has() { [[ "$parts" == *" $1 "* ]]; }
mkdir -p "$out"
deps=${LPO_DEPS_DIR:-build-deps}
if [ -d "$deps/lib/pkgconfig" ]; then
  deps=$(cd "$deps" && pwd)
  export PKG_CONFIG_PATH="$deps/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export LD_LIBRARY_PATH="$deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
build=${BUILD_DIR:-build-gpu}
lpo=$PWD/$build/lpo
py=tests/gpu/trace_torch.py
hf=scripts/trace-overhead-hf.py
# t CMD...: runs CMD under a timeout (TMO, default 90 s) and prints its wall time and exit status
t() { local t0=$(date +%s.%N); timeout "${TMO:-90}" "$@"; local rc=$?; echo "[$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s, rc $rc] $*"; return $rc; }
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
  cat .commit 2>/dev/null || git log -1 --format='commit %H %s' 2>/dev/null # .commit: a tree sent by archive
  python3 -c 'import torch, transformers; print("torch", torch.__version__, torch.version.cuda, "transformers", transformers.__version__)'
  echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)"
  python3 -c 'import time
f = time.monotonic_ns; t = time.perf_counter(); [f() for _ in range(1000000)]
print("monotonic_ns from python: %.0f ns a call" % ((time.perf_counter() - t) * 1e3))'
} >"$out/env.txt" 2>&1

if has build; then
  TMO=300 t cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DLPO_CUDA_ARCHS=90 >"$out/build.log" 2>&1
  TMO=300 t cmake --build "$build" -j "$(nproc)" --target lpo lpo_probe lpo_trace_app gpu_test_trace \
    >>"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
fi
if has test; then
  t bash -c "cd $build && ctest -R 'gpu/test_trace' --output-on-failure" >"$out/ctest.log" 2>&1
  tail -4 "$out/ctest.log"
fi
if has synth; then # the raw file is ~240 MB, kept in /tmp; the summaries only (--no-json), then with trace.json
  t "$lpo" trace --synthetic=1000000 --no-json output.dir=/tmp/synth1m >"$out/synth.log" 2>&1
  for i in 1 2; do t "$lpo" report trace /tmp/synth1m --no-json >>"$out/synth.log" 2>&1; done
  [ -n "${SYNTH_JSON:-}" ] && t "$lpo" report trace /tmp/synth1m >>"$out/synth.log" 2>&1
  grep -E "post-processing|\[.* s, rc" "$out/synth.log"
fi
if has agree; then
  t "$lpo" trace --capture-range=measure output.dir="$out/torch_agree" -- python3 $py agree >"$out/agree.log" 2>&1
  t python3 $py agree --profiler /tmp/torch_prof.json >>"$out/agree.log" 2>&1
  t python3 $py compare "$out/torch_agree" /tmp/torch_prof.json >"$out/compare.log" 2>&1
  tail -3 "$out/compare.log"
  rm -f "$out"/torch_agree/trace-*.lpot
fi
if has segv; then
  t "$lpo" trace output.dir="$out/torch_segv" -- python3 $py segv >"$out/segv.log" 2>&1
  echo "segv exit status: $?" >>"$out/segv.log"
  rm -f "$out"/torch_segv/trace-*.lpot "$out"/torch_segv/trace.json
fi
if has hf; then # separate processes, untraced and traced alternately; each prints its median of 3 decodes
  IFS=';' read -r -a hf_cfgs <<<"${HF_TRACED:-X=0}"
  for i in $(seq "${HF_PAIRS:-2}"); do
    echo "== untraced" >>"$out/hf.log"
    # shellcheck disable=SC2086
    t python3 $hf ${HF_ARGS:-} >>"$out/hf.log" 2>&1
    for k in "${!hf_cfgs[@]}"; do
      echo "== traced ${hf_cfgs[$k]}" >>"$out/hf.log"
      # shellcheck disable=SC2086
      t env ${hf_cfgs[$k]} "$lpo" trace --no-json output.dir=/tmp/hf_${i}_$k -- python3 $hf ${HF_ARGS:-} \
        >>"$out/hf.log" 2>&1
    done
  done
  grep -E "^==|tok/s|lpo trace: [0-9]|post-processing|\[.* s, rc" "$out/hf.log"
  cp /tmp/hf_1_0/summary.md "$out/hf_summary.md" 2>/dev/null
fi
if has hfdiag; then # alternated processes after a discarded one; each prints its median of the decodes
  IFS='|' read -r -a hd_flags <<<"${HFDIAG_FLAGS:---activities=kernel,memcpy,memset,sync,nvtx|--activities=kernel,launch,nvtx|default}"
  echo "== discarded (first process)" >>"$out/hfdiag.log"
  # shellcheck disable=SC2086
  t python3 $hf ${HF_ARGS:-} >>"$out/hfdiag.log" 2>&1
  for i in $(seq "${HF_PAIRS:-3}"); do
    echo "== untraced" >>"$out/hfdiag.log"
    # shellcheck disable=SC2086
    t python3 $hf ${HF_ARGS:-} >>"$out/hfdiag.log" 2>&1
    for k in "${!hd_flags[@]}"; do
      f=${hd_flags[$k]}
      [ "$f" = default ] && f=
      echo "== traced ${hd_flags[$k]}" >>"$out/hfdiag.log"
      # shellcheck disable=SC2086
      t "$lpo" trace --no-json $f output.dir=/tmp/hfd_${i}_$k -- python3 $hf ${HF_ARGS:-} >>"$out/hfdiag.log" 2>&1
    done
  done
  grep -E "^==|tok/s|\[.* s, rc" "$out/hfdiag.log"
fi
if has hfpair; then # one process per flag set, traced and untraced decodes interleaved inside it
  IFS='|' read -r -a hp_flags <<<"${HFPAIR_FLAGS:-none|default|--activities=kernel,nvtx|--activities=kernel,launch,nvtx|--activities=kernel,memcpy,memset,sync,nvtx}"
  for k in "${!hp_flags[@]}"; do
    f=${hp_flags[$k]}
    echo "== ${f}" >>"$out/hfpair.log"
    if [ "$f" = none ]; then
      # shellcheck disable=SC2086
      t python3 $hf --interleave "${HFPAIR_N:-4}" ${HF_ARGS:-} >>"$out/hfpair.log" 2>&1
    else
      [ "$f" = default ] && f=
      envs=(X=0) flags=() # words like NAME=value are environment settings (LPO_TRACE_LAUNCH_CB=driver)
      for w in $f; do if [[ $w =~ ^[A-Z_][A-Z0-9_]*= ]]; then envs+=("$w"); else flags+=("$w"); fi; done
      # shellcheck disable=SC2086
      t env "${envs[@]}" "$lpo" trace --no-json "${flags[@]}" --capture-range=lpo_traced output.dir=/tmp/hfp_$k -- \
        python3 $hf --interleave "${HFPAIR_N:-4}" ${HF_ARGS:-} >>"$out/hfpair.log" 2>&1
    fi
  done
  grep -E "^==|interleave|lpo trace: [0-9]|\[.* s, rc" "$out/hfpair.log"
fi
if has diag; then # one process each; "name: env... -- lpo trace flags" (untraced when flags are "none")
  while IFS='|' read -r name envs flags; do
    echo "== $name" >>"$out/diag.log"
    if [ "$flags" = none ]; then
      t python3 $py overhead >>"$out/diag.log" 2>&1
    else
      # shellcheck disable=SC2086
      t env $envs "$lpo" trace --no-json $flags output.dir=/tmp/diag_$name -- python3 $py overhead \
        >>"$out/diag.log" 2>&1
    fi
  done <<'EOF'
untraced|X=0|none
default|X=0|
kernel_only|X=0|--activities=kernel --attribution=none
callbacks_only|X=0|--activities=launch,nvtx
injected_only|X=0|--activities=nvtx --attribution=none
no_launch_records|X=0|--activities=kernel,memcpy,memset,sync,nvtx
cupti_launch_records|LPO_TRACE_LAUNCH_SRC=cupti|--attribution=none
cupti_clock|LPO_TRACE_CLOCK=cupti|
driver_cb|LPO_TRACE_LAUNCH_CB=driver|
untraced2|X=0|none
EOF
  grep -E "^==|steps/s|\[.* s, rc" "$out/diag.log"
fi
if has profiler; then
  t "$lpo" trace --no-json --attribution=extcorr output.dir=/tmp/ovh_extcorr -- python3 $py overhead \
    >>"$out/profiler.log" 2>&1
  t python3 $py overhead --profiler >>"$out/profiler.log" 2>&1
  grep -E "steps/s|\[.* s, rc" "$out/profiler.log"
fi
echo "done"
