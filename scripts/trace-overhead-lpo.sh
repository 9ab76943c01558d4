#!/usr/bin/env bash
# The lpo-engine overhead bar of `lpo trace` (<= 3% fewer decode tok/s, 8B, graph mode) and its
# graph-node attribution, on a GPU machine with the CUDA backend:
#   scripts/trace-overhead-lpo.sh OUTDIR [PAIRS] [bench overrides...]
# runs `lpo bench` (Llama-3.1-8B synthetic bf16 weights, batch 1, prompt 128, 128 generated tokens,
# engine.exec=graph unless overridden) untraced and under `lpo trace --no-json` alternately, PAIRS pairs
# (default 3), each in its own process, and prints the decode tok/s of each, the medians and the slowdown,
# then what the trace attributed (graph-replayed kernels, graph-node label rows in ranges.csv).
# LPO (default build-gpu/lpo) is the binary; logs and the traced run directories go to OUTDIR.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: trace-overhead-lpo.sh OUTDIR [PAIRS] [bench overrides...]}
pairs=${2:-3}
shift $(($# >= 2 ? 2 : 1))
lpo=${LPO:-$PWD/build-gpu/lpo}
mkdir -p "$out"
bench=(bench model=llama3.1-8b backend=cuda engine.exec=graph "bench.batch=[1]" "bench.prompt=[128]"
  "bench.gen=[128]" "$@" --no-save)
# decode t/s of the tg row of a bench table on stdin
tg() { awk -F'|' '$6 ~ /tg/ { gsub(/ /, "", $7); print $7; exit }'; }
un=() tr=()
for i in $(seq "$pairs"); do
  "$lpo" "${bench[@]}" >"$out/untraced_$i.log" 2>&1 || { tail -20 "$out/untraced_$i.log"; exit 1; }
  un+=("$(tg <"$out/untraced_$i.log")")
  "$lpo" trace --no-json output.dir="$out/traced_$i" -- "$lpo" "${bench[@]}" >"$out/traced_$i.log" 2>&1 ||
    { tail -20 "$out/traced_$i.log"; exit 1; }
  tr+=("$(tg <"$out/traced_$i.log")")
  echo "pair $i: untraced ${un[-1]} tok/s, traced ${tr[-1]} tok/s"
  rm -f "$out/traced_$i"/trace-*.lpot
done
med() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
mu=$(med "${un[@]}") mt=$(med "${tr[@]}")
awk -v u="$mu" -v t="$mt" 'BEGIN { printf "median decode: untraced %.2f tok/s, traced %.2f tok/s: %+.2f%% (bar: >= -3%%)\n", u, t, (t / u - 1) * 100 }'
d="$out/traced_1"
grep -E "^lpo trace: [0-9]" "$out/traced_1.log"
echo "graph-node label rows in ranges.csv: $(grep -c ',graph node,' "$d/ranges.csv" 2>/dev/null)"
grep -E "graph|attributed" "$d/summary.md" 2>/dev/null | head -8
