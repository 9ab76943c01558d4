#!/usr/bin/env bash
# The main job on its built-in default (make demo). Grows as commands land.
set -euo pipefail
lpo=${1:-build/lpo}
"$lpo" version
"$lpo" env
"$lpo" config show
