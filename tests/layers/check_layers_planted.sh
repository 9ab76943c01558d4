#!/bin/sh
# scripts/check-layers.sh fails on planted violations: in a temporary copy of src/, include/ and
# cmake/layers.txt, the clean copy passes, then each planted violation (an upward include, another module's
# internal header, a public header without an owner, a folder of src/ without a layer, a stale exception)
# fails with a line naming it; and a library calling a function of a higher layer's library fails the link check.
#   tests/layers/check_layers_planted.sh SOURCE_DIR C_COMPILER
set -eu
src=$1
cc=$2
check="$src/scripts/check-layers.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fresh() { # a clean copy of the tree in $tmp/t
    rm -rf "$tmp/t"
    mkdir -p "$tmp/t/cmake"
    cp -R "$src/src" "$src/include" "$tmp/t/"
    cp "$src/cmake/layers.txt" "$tmp/t/cmake/"
}
expect_fail() { # what was planted, the message expected
    if out=$(sh "$check" "$tmp/t" 2>&1); then
        echo "FAIL: the check passed with $1 planted"
        exit 1
    fi
    if ! printf '%s\n' "$out" | grep -q "$2"; then
        printf 'FAIL: %s: expected "%s" in:\n%s\n' "$1" "$2" "$out"
        exit 1
    fi
    echo "ok: $1 -> $(printf '%s\n' "$out" | grep "$2" | head -n 1)"
}

fresh
out=$(sh "$check" "$tmp/t" 2>&1) || { printf 'FAIL: the clean copy does not pass:\n%s\n' "$out"; exit 1; }
echo "ok: the clean copy passes"

fresh
printf '#include "lpo/engine.h"\n' >>"$tmp/t/src/core/status.c"
expect_fail "core including lpo/engine.h" "src/core/status.c:[0-9]*: core includes lpo/engine.h of engine, a higher layer"

fresh
printf '#include "lpo/report.h"\n' >>"$tmp/t/include/lpo/hw.h"
expect_fail "hw's public header including lpo/report.h" "include/lpo/hw.h:[0-9]*: hw includes lpo/report.h of report"

fresh
printf '#include "engine/cpu/cpu_kernels.h"\n' >>"$tmp/t/src/analysis/cost.c"
expect_fail "analysis including engine's internal header" "an internal header of engine"

fresh
printf '/* no owner */\n#pragma once\n' >"$tmp/t/include/lpo/planted.h"
expect_fail "a public header without an owner" "include/lpo/planted.h: no owning module"

fresh
mkdir "$tmp/t/src/planted"
printf '#include "lpo/core.h"\n' >"$tmp/t/src/planted/x.c"
expect_fail "a folder of src/ without a layer" "src/planted/: not a module"

fresh
printf 'allow core/status.c lpo/planted.h\n' >>"$tmp/t/cmake/layers.txt"
expect_fail "an exception that matches no include" "allow core/status.c lpo/planted.h. matches no include"

# the link check: a low library calling into a high one
printf 'int high_fn(void);\nint low_fn(void) { return high_fn(); }\n' >"$tmp/low.c"
printf 'int high_fn(void) { return 1; }\n' >"$tmp/high.c"
(cd "$tmp" && "$cc" -c low.c high.c && ar rc liblow.a low.o && ar rc libhigh.a high.o)
if out=$(sh "$check" --links "$tmp/liblow.a" "$tmp/libhigh.a" 2>&1); then
    echo "FAIL: the link check passed with a call up the layers"
    exit 1
fi
printf '%s\n' "$out" | grep -q "liblow (low.o) calls high_fn of libhigh" || { echo "FAIL: $out"; exit 1; }
echo "ok: a call up the layers -> $out"
sh "$check" --links "$tmp/libhigh.a" "$tmp/liblow.a" >/dev/null || { echo "FAIL: a call down fails the check"; exit 1; }
echo "ok: a call down the layers passes"
