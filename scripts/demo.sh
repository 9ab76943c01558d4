#!/usr/bin/env bash
# The main job on its built-in default (make demo): `lpo profile`, which prints summary.md and the run
# directory (report.md, operators.csv, metrics.json, static_compute.md ...). On a machine with a GPU and
# lpo's CUDA backend: the synthetic llama3.1-8b preset (prompt 2048, 128 new tokens, 3 samples) with
# backend=cuda; otherwise the smollm2-135m preset on the CPU (synthetic weights and prompts; under a minute
# on 2 idle cores). Then a short generation with the real SmolLM2 GGUF when scripts/fetch-model.sh got it.
set -euo pipefail
lpo=${1:-build/lpo}
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
run() { printf '\n$ %s\n' "$*"; "$@"; }
run "$lpo" version
gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then gpu=1; fi
if [ "$gpu" = 1 ]; then
  rc=0
  run "$lpo" profile model=llama3.1-8b backend=cuda dataset.prompt_len=2048 infer.max_new_tokens=128 \
    dataset.n_samples=3 infer.ignore_eos=true || rc=$?
  if [ "$rc" = 3 ]; then
    echo "demo: this lpo has no CUDA backend yet; profiling on the CPU instead"
    gpu=0
  elif [ "$rc" != 0 ]; then
    exit "$rc"
  fi
fi
if [ "$gpu" = 0 ]; then
  run "$lpo" profile infer.ignore_eos=true
fi
gguf="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ -f "$gguf" ]; then
  run "$lpo" generate backend=cpu model="$gguf" infer.chat=true infer.max_new_tokens=48 \
    prompt="What is the capital of France?"
fi
