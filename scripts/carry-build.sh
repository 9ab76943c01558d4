#!/usr/bin/env bash
# Builds, on a machine without a GPU, what a GPU machine should run without building it there (a CUDA build
# takes ~2 minutes of device time), and packs it for the device tool's carry: lpo, liblpo_probe.so, the
# trace test app and the named GPU test binaries, stripped, in one xz archive whose large dictionary stores
# the kernels the binaries share once (8 test binaries: ~25 MB).
#   scripts/carry-build.sh cuda_gguf cuda_vision tp_gpu      -> build-carry/carry.txz
#   (then on the GPU machine, from the same checkout path: scripts/carry-run.sh)
# The test binaries hold the checkout's absolute path (fixtures, the lpo binary): build in the checkout the
# GPU machine receives, at the same path. Unstripped copies stay in build-carry/unstripped/ for addr2line
# (the tracer's fault report gives object(+offset)). CUDA_ARCHS=90 by default.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: scripts/carry-build.sh TEST... (names of tests/gpu/test_NAME.c)" >&2; exit 2; }
b=build-carry
targets=(lpo)
files=("$b/lpo")
for t in "$@"; do
  t=${t#test_}
  [ -f "tests/gpu/test_$t.c" ] || { echo "carry-build: no tests/gpu/test_$t.c" >&2; exit 2; }
  targets+=("gpu_test_$t")
  files+=("$b/tests/gpu_test_$t")
done
cmake -S . -B "$b" -DCMAKE_BUILD_TYPE=Release -DLPO_CUDA_ARCHS="${CUDA_ARCHS:-90}" -DLPO_WITH_CUDA=ON >/dev/null
# the tracer and its test app when the toolkit has CUPTI
if cmake --build "$b" --target help | grep ' lpo_probe$' >/dev/null; then # (not -q: with pipefail, SIGPIPE)
  targets+=(lpo_probe lpo_trace_app)
  files+=("$b/liblpo_probe.so" "$b/tests/lpo_trace_app")
fi
cmake --build "$b" --target "${targets[@]}" -j "${JOBS:-$(nproc)}"
mkdir -p "$b/unstripped"
for f in "${files[@]}"; do
  cp "$f" "$b/unstripped/"
  case $f in *.so) ;; *) strip "$f" ;; esac
done
printf '%s\n' "$@" >"$b/carried-tests.txt"
files+=("$b/carried-tests.txt")
tar cf - "${files[@]}" | xz -T1 -9 --lzma2=dict=192MiB >"$b/carry.txz"
size=$(du -m "$b/carry.txz" | cut -f1)
echo "carry-build: $b/carry.txz ($size MB): ${#files[@]} files; carry it with build-deps (the device tool's 64 MiB"
echo "  hold the tracked tree as well); on the GPU machine: scripts/carry-run.sh"
[ "$size" -le 36 ] || echo "carry-build: warning: $size MB may not fit beside the tree: carry fewer tests" >&2
