#!/usr/bin/env bash
# Renders an SVG (roofline.svg of a run directory) to PNG with headless Chromium (Debian package
# `chromium`), so a plot can be checked by eye or in a test:  scripts/render-svg.sh in.svg out.png [W H]
# Exit 77 (skipped) when chromium is not installed or does not start; install it with: apt-get install chromium
set -euo pipefail
in=${1:?usage: render-svg.sh in.svg out.png [width height]}
out=${2:?usage: render-svg.sh in.svg out.png [width height]}
w=${3:-960}
h=${4:-600}
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  echo "SKIP: chromium not installed (apt-get install chromium)"
  exit 77
fi
# a browser that does not start (Ubuntu's chromium-browser can be a stub asking for snap) is a skip too
if ! timeout 60 "$browser" --headless --no-sandbox --version >/dev/null 2>&1; then
  echo "SKIP: $browser does not run here ($browser --version failed)"
  exit 77
fi
abs=$(cd "$(dirname "$in")" && pwd)/$(basename "$in")
rm -f "$out"
# --no-sandbox: containers run as root; a private profile dir keeps runs independent
prof=$(mktemp -d)
timeout 120 "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$prof" \
  --window-size="$w,$h" --screenshot="$out" "file://$abs" >/dev/null 2>&1 || true
rm -rf "$prof"
[ -s "$out" ] || { echo "render-svg: chromium wrote no $out" >&2; exit 1; }
echo "render-svg: $out"
