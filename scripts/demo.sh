#!/usr/bin/env bash
# The main job on its built-in default (make demo): what the machine offers, the resolved default config,
# the static analysis of the default model (smollm2-135m preset), and a short generation with lpo's engine
# (synthetic weights, so the text is noise; with the real GGUF fetched by scripts/fetch-model.sh it is
# real text). Grows into `lpo profile` when the Stage 1 issue lands.
set -euo pipefail
lpo=${1:-build/lpo}
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
run() { printf '\n$ %s\n' "$*"; "$@"; }
run "$lpo" version
run "$lpo" env
run "$lpo" config show infer.max_new_tokens=16
run "$lpo" analyze
run "$lpo" generate backend=cpu tokens=1,504,3458,314 infer.max_new_tokens=16 infer.ignore_eos=true --print-ids
gguf="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ -f "$gguf" ]; then
  run "$lpo" generate backend=cpu model=hf model.path="$gguf" infer.chat=true infer.max_new_tokens=48 \
    prompt="What is the capital of France?"
fi
