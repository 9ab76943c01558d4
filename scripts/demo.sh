#!/usr/bin/env bash
# The main job on its built-in default (make demo): `lpo profile`, which prints summary.md and the run
# directory (report.md, operators.csv, metrics.json, static_compute.md ...). On a machine with a GPU and
# lpo's CUDA backend: the synthetic llama3.1-8b preset (prompt 2048, 128 new tokens, 3 samples) with
# backend=cuda; otherwise the smollm2-135m preset on the CPU (synthetic weights and prompts; under a minute
# on 2 idle cores). Then a short generation with the real SmolLM2 GGUF when scripts/fetch-model.sh got it.
# Each command is printed before it runs as a user would type it (a word with spaces or shell characters
# quoted: prompt="What is the capital of France?"), so it can be pasted into a shell.
# `scripts/demo.sh --quote WORD...` prints that form of one command line (tests/CMakeLists.txt checks it).
set -euo pipefail

# One word as a user types it: bare when it holds only safe characters, else "value" or key="value" with
# \ " $ ` escaped inside the double quotes ('value' when it holds a !, which history expansion would take).
quote() {
  local w=$1 k='' v
  if [[ -n $w && $w =~ ^[A-Za-z0-9_./:=@%+,-]+$ ]]; then printf '%s' "$w"; return; fi
  v=$w
  if [[ $w =~ ^([A-Za-z0-9_.+~-]+=)(.*)$ ]]; then k=${BASH_REMATCH[1]}; v=${BASH_REMATCH[2]}; fi
  if [[ $v == *'!'* ]]; then # an interactive shell expands ! inside double quotes: single quotes
    printf "%s'%s'" "$k" "${v//\'/\'\\\'\'}"
    return
  fi
  v=${v//\\/\\\\}; v=${v//\"/\\\"}; v=${v//\$/\\\$}; v=${v//\`/\\\`}
  printf '%s"%s"' "$k" "$v"
}
command_line() {
  local sep=''
  for w in "$@"; do printf '%s' "$sep"; quote "$w"; sep=' '; done
  printf '\n'
}
if [ "${1:-}" = --quote ]; then shift; command_line "$@"; exit 0; fi

lpo=${1:-build/lpo}
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
run() { printf '\n$ '; command_line "$@"; "$@"; }
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
